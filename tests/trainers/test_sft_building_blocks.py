"""Corruption, the block-diffusion attention rule and forward, and the mixed objective (torch only)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dllm_edit.trainers import (
    DiffusionForward,
    block_diffusion_allowed,
    corrupt_response,
    edit_objective,
)
from tests.helpers import MASK, VOCAB, tiny_llama
from tests.helpers.training import naive_block_logits


def _batch(lengths, prompt_lengths, width):
    """Right-padded random ids `[B, W]`, response mask `[B, W]` and valid mask `[B, W]`."""
    gen = torch.Generator().manual_seed(sum(lengths) + width)
    ids = torch.randint(2, VOCAB - 1, (len(lengths), width), generator=gen)
    pos = torch.arange(width)[None]
    valid = pos < torch.tensor(lengths)[:, None]
    response = valid & (pos >= torch.tensor(prompt_lengths)[:, None])
    return ids, response, valid


@given(
    rows=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=4),
    mask_rate=st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted),
    edit_rate=st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted),
    block=st.one_of(st.none(), st.integers(1, 5)),
    seed=st.integers(0, 2**16),
)
def test_corruption_respects_prompt_padding_and_kinds(rows, mask_rate, edit_rate, block, seed):
    lengths = [p + r for p, r in rows]
    ids, response, _ = _batch(lengths, [p for p, _ in rows], max(lengths))
    special = (0, 1)
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=tuple(mask_rate),
        edit_rate=tuple(edit_rate),
        block_length=block,
        never_sample=special,
        generator=torch.Generator().manual_seed(seed),
    )
    assert torch.equal(c.noisy[~response], ids[~response])  # prompt and padding never noised
    assert not (c.masked & c.replaced).any()
    assert not ((c.masked | c.replaced) & ~response).any()
    assert torch.equal(c.masked, c.noisy == MASK)
    assert torch.equal(c.replaced, (c.noisy != ids) & ~c.masked)  # a replacement always changes the token
    replaced_tokens = c.noisy[c.replaced]
    assert not torch.isin(replaced_tokens, torch.tensor([MASK, *special])).any()
    assert ((c.mask_rate >= mask_rate[0] - 1e-6) & (c.mask_rate <= mask_rate[1] + 1e-6)).all()
    if block is not None:  # one rate per block
        per_block = c.mask_rate[:, ::block].repeat_interleave(block, dim=1)[:, : ids.shape[1]]
        assert torch.equal(per_block, c.mask_rate)
    again = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=tuple(mask_rate),
        edit_rate=tuple(edit_rate),
        block_length=block,
        never_sample=special,
        generator=torch.Generator().manual_seed(seed),
    )
    assert torch.equal(again.noisy, c.noisy)  # the generator is the only source of randomness


def test_corruption_rates_match_on_average():
    ids, response, _ = _batch([64] * 400, [16] * 400, 64)
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=(0.2, 0.6),
        edit_rate=(0.1, 0.1),
        generator=torch.Generator().manual_seed(0),
    )
    n = response.sum()
    masked = c.masked.sum() / n
    assert abs(masked.item() - 0.4) < 0.02  # E[t] = 0.4
    unmasked = (response & ~c.masked).sum()
    # a replacement drawing the original token (1 in 45 here) stays clean
    assert abs((c.replaced.sum() / unmasked).item() - 0.1 * 44 / 45) < 0.01
    full = corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, mask_rate=(1.0, 1.0))
    assert torch.equal(full.masked, response)


@given(
    stream_rate=st.floats(0, 1),
    block=st.sampled_from([None, 2, 3, 4, 6, 8]),  # divisors of the width 24
    seed=st.integers(0, 2**16),
)
def test_editing_stream_examples_hold_no_mask(stream_rate, block, seed):
    """Editing-stream rows (or blocks) carry replacements only; the others are corrupted as without it."""
    ids, response, _ = _batch([24] * 6, [4] * 6, 24)
    kwargs = dict(mask_token_id=MASK, vocab_size=VOCAB, mask_rate=(0.5, 1.0), edit_rate=(0.2, 0.2))
    plain = corrupt_response(
        ids, response, block_length=block, generator=torch.Generator().manual_seed(seed), **kwargs
    )
    mixed = corrupt_response(
        ids,
        response,
        block_length=block,
        editing_stream_rate=stream_rate,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
    # the stream only removes masks (drawn last: every other draw is unchanged)
    assert not (mixed.masked & ~plain.masked).any()
    assert torch.equal(mixed.mask_rate, plain.mask_rate)
    group = 24 if block is None else block
    unmasked = mixed.masked.reshape(6, -1, group).sum(-1) == 0  # [B, groups]
    changed = (plain.masked & ~mixed.masked).reshape(6, -1, group).any(-1)  # [B, groups]
    assert not (changed & ~unmasked).any()  # masks disappear from whole rows (or blocks) only
    # where the masks were lifted, the old masked positions are now clean or replaced, never masked
    lifted = plain.masked & ~mixed.masked
    assert torch.equal(mixed.noisy[lifted & ~mixed.replaced], ids[lifted & ~mixed.replaced])
    if stream_rate == 0:
        assert torch.equal(mixed.noisy, plain.noisy)
    if stream_rate == 1:
        assert not mixed.masked.any()


def test_editing_stream_rate_matches_on_average():
    ids, response, _ = _batch([32] * 2000, [8] * 2000, 32)
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=(0.5, 1.0),
        editing_stream_rate=0.25,
        generator=torch.Generator().manual_seed(0),
    )
    no_mask_rows = (~c.masked.any(dim=1)).float().mean().item()
    assert abs(no_mask_rows - 0.25) < 0.03  # P(no mask by chance at t >= 0.5 over 24 tokens) ~ 0
    with pytest.raises(ValueError, match="editing_stream_rate"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, editing_stream_rate=1.5)


@given(
    rows=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=4),
    context_rate=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
def test_in_context_replacements_copy_the_rows_own_ordinary_tokens(rows, context_rate, seed):
    """Replacements from context are tokens of the same row's response, never special ones; the masks,
    rates and kinds of every position are those drawn without it (it is drawn last)."""
    width = max(p + r for p, r in rows)
    ids, response, _ = _batch([p + r for p, r in rows], [p for p, _ in rows], width)
    special = 3  # a special id (like the EOS padding of a response): never sampled, never copied
    ids[:, -1] = special
    kwargs = dict(mask_token_id=MASK, vocab_size=VOCAB, edit_rate=(0.0, 1.0), never_sample=(special,))
    plain = corrupt_response(ids, response, generator=torch.Generator().manual_seed(seed), **kwargs)
    mixed = corrupt_response(
        ids, response, in_context_rate=context_rate, generator=torch.Generator().manual_seed(seed), **kwargs
    )
    assert torch.equal(mixed.masked, plain.masked) and torch.equal(mixed.mask_rate, plain.mask_rate)
    assert not (mixed.replaced & ~response).any()
    assert not ((mixed.noisy == special) & (ids != special)).any()  # special ids are never written
    ordinary = response & (ids != special)
    for row in range(ids.shape[0]):
        own = set(ids[row][ordinary[row]].tolist())
        copied = mixed.replaced[row] & (mixed.noisy[row] != plain.noisy[row])
        assert set(mixed.noisy[row][copied].tolist()) <= own
    if context_rate == 0:
        assert torch.equal(mixed.noisy, plain.noisy)


def test_in_context_replacements_are_plausible_on_average():
    """With rate 1, every replacement in a digit-only response is another digit of that response."""
    digits = torch.arange(10, 20)  # ten "digit" ids
    gen = torch.Generator().manual_seed(0)
    ids = digits[torch.randint(0, 10, (500, 16), generator=gen)]  # [500, 16]
    response = torch.ones_like(ids, dtype=torch.bool)
    response[:, :4] = False  # the prompt
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=(0.1, 0.1),
        edit_rate=(0.3, 0.3),
        in_context_rate=1.0,
        generator=torch.Generator().manual_seed(1),
    )
    assert c.replaced.float().mean() > 0.15  # ~0.3 * 0.9 * (1 - P(copying the same digit)) of the response
    assert torch.isin(c.noisy[c.replaced], digits).all()
    with pytest.raises(ValueError, match="in_context_rate"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, in_context_rate=2.0)


@given(
    rows=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=4),
    shift_rate=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
def test_shifted_spans_move_response_tokens_by_one_position(rows, shift_rate, seed):
    """Edit-based corruption: masks and rates are those drawn without it (it is drawn last); a row has
    at most one shifted span, inside its response, whose tokens are its neighbours' clean tokens; every
    unmasked position that differs from x_0 is marked replaced."""
    width = max(p + r for p, r in rows)
    ids, response, _ = _batch([p + r for p, r in rows], [p for p, _ in rows], width)
    kwargs = dict(mask_token_id=MASK, vocab_size=VOCAB, mask_rate=(0.0, 0.5), edit_rate=(0.0, 0.0))
    plain = corrupt_response(ids, response, generator=torch.Generator().manual_seed(seed), **kwargs)
    shifted = corrupt_response(
        ids, response, shift_rate=shift_rate, generator=torch.Generator().manual_seed(seed), **kwargs
    )
    assert torch.equal(shifted.masked, plain.masked) and torch.equal(shifted.mask_rate, plain.mask_rate)
    assert torch.equal(shifted.replaced, response & ~shifted.masked & (shifted.noisy != ids))
    assert not (shifted.replaced & ~response).any()
    for row in range(ids.shape[0]):
        changed = shifted.replaced[row].nonzero().flatten().tolist()
        if changed:  # one span: within 8 positions, each token the clean token one position away
            assert changed[-1] - changed[0] < 8
            for i in changed:
                neighbours = {int(ids[row, j]) for j in (i - 1, i + 1) if 0 <= j < width and response[row, j]}
                assert int(shifted.noisy[row, i]) in neighbours
    if shift_rate == 0:
        assert torch.equal(shifted.noisy, plain.noisy)


def test_shifted_spans_insert_and_delete():
    """Rate 1 on distinct tokens: every row gets a duplicated or dropped token, and bad rates raise."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.randperm(VOCAB - 10, generator=gen)[:24] + 5 for _ in range(200)])  # [200, 24]
    response = torch.ones_like(ids, dtype=torch.bool)
    response[:, :4] = False
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=(0.0, 0.0),
        edit_rate=(0.0, 0.0),
        shift_rate=1.0,
        generator=torch.Generator().manual_seed(1),
    )
    assert c.replaced.any(dim=1).float().mean() > 0.9  # (a span starting the response may shift nothing)
    repeats = (c.noisy[:, 1:] == c.noisy[:, :-1]).any(dim=1)  # every shift writes one token twice
    assert torch.equal(repeats, c.replaced.any(dim=1))
    with pytest.raises(ValueError, match="shift_rate"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, shift_rate=1.5)


@given(
    rows=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 14)), min_size=1, max_size=4),
    block=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_semi_autoregressive_rows_have_a_finished_past_and_a_masked_future(rows, block, seed):
    """At rate 1 every row, blocks counted from its first response token: nothing masked before one
    block, everything masked (rate 1) after it, and that block as the plain draw left it; the prompt
    is untouched. At rate 0 the draws are exactly those without the option (it is drawn last)."""
    width = max(p + r for p, r in rows)
    ids, response, _ = _batch([p + r for p, r in rows], [p for p, _ in rows], width)
    kwargs = dict(mask_token_id=MASK, vocab_size=VOCAB, mask_rate=(0.2, 0.8), edit_rate=(0.0, 0.3))
    plain = corrupt_response(ids, response, generator=torch.Generator().manual_seed(seed), **kwargs)
    semi = corrupt_response(
        ids, response, semi_ar_rate=1.0, semi_ar_block_length=block,
        generator=torch.Generator().manual_seed(seed), **kwargs,
    )  # fmt: skip
    assert not (semi.masked & ~response).any() and torch.equal(semi.noisy[~response], ids[~response])
    for row, (prompt, length) in enumerate(rows):
        if length == 0:
            assert torch.equal(semi.noisy[row], plain.noisy[row])
            continue
        masked = semi.masked[row, prompt : prompt + length].split(block)  # the response's blocks
        drawn = plain.masked[row, prompt : prompt + length].split(block)
        rate = semi.mask_rate[row, prompt : prompt + length].split(block)

        assert any(_layout_around(k, masked, drawn, rate) for k in range(len(masked)))
    zero = corrupt_response(
        ids, response, semi_ar_rate=0.0, semi_ar_block_length=block,
        generator=torch.Generator().manual_seed(seed), **kwargs,
    )  # fmt: skip
    for field in ("noisy", "masked", "replaced", "mask_rate"):
        assert torch.equal(getattr(zero, field), getattr(plain, field))


def _layout_around(k, masked, drawn, rate):
    """Blocks (tuples of `[<=block]` tensors): no mask before block k, all masked at rate 1 after it,
    block k as the plain draw left it."""
    before = all(not masked[j].any() for j in range(k))
    after = all(masked[j].all() and (rate[j] == 1).all() for j in range(k + 1, len(masked)))
    return before and after and torch.equal(masked[k], drawn[k])


def test_semi_autoregressive_layout_draws_every_block_and_refuses_bad_input():
    """Over many rows each of a response's blocks is the current one about equally often; the rate
    and the block length are checked."""
    ids, response, _ = _batch([16] * 600, [4] * 600, 16)  # responses of 12 = 3 blocks of 4
    c = corrupt_response(
        ids, response, mask_token_id=MASK, vocab_size=VOCAB, mask_rate=(0.0, 0.0), edit_rate=(0.0, 0.0),
        semi_ar_rate=1.0, semi_ar_block_length=4, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    masked_blocks = c.masked[:, 4:].view(600, 3, 4).all(dim=2).sum(dim=1)  # [600] future blocks per row
    counts = torch.bincount(masked_blocks, minlength=3)  # current block 2, 1, 0
    assert counts.sum() == 600 and (counts > 150).all()
    with pytest.raises(ValueError, match="semi_ar_rate"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, semi_ar_rate=1.5)
    with pytest.raises(ValueError, match="semi_ar_block_length"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, semi_ar_rate=0.5)


@pytest.mark.parametrize(
    "bad", [dict(mask_rate=(-0.1, 0.5)), dict(mask_rate=(0.6, 0.5)), dict(edit_rate=(0, 1.5))]
)
def test_corruption_refuses_bad_rates(bad):
    ids, response, _ = _batch([8], [2], 8)
    with pytest.raises(ValueError, match="rate"):
        corrupt_response(ids, response, mask_token_id=MASK, vocab_size=VOCAB, **bad)


@given(
    lengths=st.lists(st.integers(1, 11), min_size=1, max_size=3),
    extra=st.integers(0, 3),
    block=st.integers(1, 5),
)
def test_block_diffusion_attention_rule_holds_for_every_pair(lengths, extra, block):
    width = max(lengths) + extra
    valid = torch.arange(width)[None] < torch.tensor(lengths)[:, None]  # [B, T]
    allowed = block_diffusion_allowed(valid, block)  # [B, 2T, 2T]
    for b, length in enumerate(lengths):
        for q in range(2 * width):
            for k in range(2 * width):
                q_noisy, k_noisy = q >= width, k >= width
                qi, ki = q % width, k % width
                qb, kb = qi // block, ki // block
                if ki >= length:  # padding key: only a padding query's own slot
                    expected = qi >= length and q == k
                elif not q_noisy:
                    expected = not k_noisy and kb <= qb
                else:
                    expected = (k_noisy and kb == qb) or (not k_noisy and kb < qb)
                if qi >= length and q == k:
                    expected = True
                assert bool(allowed[b, q, k]) == expected, (b, q, k)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_vectorised_block_diffusion_equals_naive_block_loop(attn):
    model = tiny_llama(attn, seed=3)
    ids, response, valid = _batch([12, 9, 5], [3, 4, 2], 12)
    c = corrupt_response(
        ids,
        response,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_rate=(0.3, 0.9),
        generator=torch.Generator().manual_seed(1),
    )
    with torch.no_grad():
        fast = DiffusionForward(model, "block_diffusion", block_length=4)(c.noisy, ids, valid)
        slow = naive_block_logits(model, c.noisy, ids, valid, 4)
    torch.testing.assert_close(fast[valid], slow[valid], atol=1e-4, rtol=1e-4)
    kw = dict(mask_token_id=MASK, mask_rate=c.mask_rate)
    loss_fast = edit_objective(fast, c.noisy, ids, response, **kw).loss
    loss_slow = edit_objective(slow, c.noisy, ids, response, **kw).loss
    torch.testing.assert_close(loss_fast, loss_slow, atol=1e-5, rtol=1e-5)


def test_bidirectional_form_is_full_attention_over_valid_tokens():
    model = tiny_llama("sdpa", seed=4)
    ids, _, valid = _batch([7, 5], [0, 0], 7)
    with torch.no_grad():
        logits = DiffusionForward(model, "bidirectional", block_length=4)(ids, ids, valid)
        alone = model(input_ids=ids[1:, :5], attention_mask=torch.ones(1, 1, 5, 5, dtype=torch.bool)).logits
    torch.testing.assert_close(logits[1, :5], alone[0], atol=1e-4, rtol=1e-4)


def test_objective_terms_and_weights():
    logits = torch.zeros(1, 4, 4)  # uniform: every nll is log 4
    clean = torch.tensor([[1, 2, 3, 2]])
    noisy = torch.tensor([[0, 2, 1, 2]])  # drafting, clean, editing, (prompt)
    response = torch.tensor([[True, True, True, False]])
    rate = torch.full((1, 4), 0.25)
    terms = edit_objective(
        logits,
        noisy,
        clean,
        response,
        mask_token_id=0,
        mask_rate=rate,
        edit_loss_weight=2.0,
        clean_loss_weight=0.5,
    )
    log4 = math.log(4)
    assert terms.counts.tolist() == [1.0, 1.0, 1.0]
    torch.testing.assert_close(terms.nll_sums, torch.full((3,), log4))
    torch.testing.assert_close(terms.loss, torch.tensor((4.0 + 2.0 + 0.5) * log4 / 3))  # 1/t = 4
    halved = edit_objective(logits, noisy, clean, response, mask_token_id=0, mask_rate=rate, normalizer=6)
    torch.testing.assert_close(halved.loss, torch.tensor((4.0 + 1.0 + 1.0) * log4 / 6))
    with pytest.raises(ValueError, match="mask_loss_weighting"):
        edit_objective(
            logits, noisy, clean, response, mask_token_id=0, mask_rate=rate, mask_loss_weighting="t"
        )


def test_shifted_form_reads_the_decoding_adapters_logits():
    """The training form and `ShiftedLogitsAdapter` give the same prediction for every answer position
    of the same text: what the model is trained on is what decoding reads. Decoding left-pads the
    canvas; training right-pads (each row from position 0), so the rows are compared shifted."""
    from dllm_edit.adapters import ShiftedLogitsAdapter
    from dllm_edit.layout import build_canvas
    from tests.helpers import left_pad

    model = tiny_llama("sdpa", seed=6)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15]]
    ids, mask = left_pad(prompts)
    layout, canvas = build_canvas(ids, mask, 4, 8, MASK, 0)  # [B, T]
    gen = torch.Generator().manual_seed(2)
    written = torch.randint(3, VOCAB - 2, canvas.shape, generator=gen)
    canvas = torch.where((canvas == MASK) & (torch.rand(canvas.shape, generator=gen) < 0.5), written, canvas)
    last = layout.num_blocks - 1
    session = ShiftedLogitsAdapter().open(model, layout, use_cache=False)
    forward = DiffusionForward(model, "shifted", block_length=4)
    width = canvas.shape[1]
    with torch.no_grad():
        decoding = session.logits(canvas, last, last)  # [B, T, V], one row per canvas slot
        for row, prompt in enumerate(prompts):
            first = int(layout.offsets[row])  # the row's own position 0
            text = canvas[row, first:]  # prompt, then the answer (written or masked)
            noisy = torch.nn.functional.pad(text, (0, first))[None]  # [1, T] right-padded
            valid = (torch.arange(width) < width - first)[None]  # [1, T]
            training = forward(noisy, noisy, valid)[0, : width - first]  # [T - first, V]
            answer = slice(len(prompt), width - first)
            torch.testing.assert_close(training[answer], decoding[row, first:][answer], atol=1e-4, rtol=1e-4)


def test_block_shifted_form_reads_the_decoding_adapters_logits():
    """The `"block_diffusion_shifted"` form and `BlockCausalShiftedAdapter` (with its KV cache) give
    the same prediction for every answer position of every block: the block being decoded is the
    noisy copy, the finished blocks before it the clean copy. Decoding left-pads by whole blocks,
    training right-pads, so each row is compared from its own first slot."""
    from dllm_edit.adapters import BlockCausalShiftedAdapter
    from dllm_edit.layout import build_canvas
    from tests.helpers import left_pad

    model = tiny_llama("sdpa", seed=6)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20]]
    ids, mask = left_pad(prompts)
    layout, canvas = build_canvas(ids, mask, 4, 10, MASK, 0)  # [B, T]
    gen = torch.Generator().manual_seed(2)
    final = torch.where(layout.generated, torch.randint(3, VOCAB - 2, canvas.shape, generator=gen), canvas)
    session = BlockCausalShiftedAdapter().open(model, layout, use_cache=True)
    forward = DiffusionForward(model, "block_diffusion_shifted", block_length=4)
    width = canvas.shape[1]
    for block in range(layout.first_block, layout.num_blocks):
        span = slice(block * 4, (block + 1) * 4)
        noisy_canvas = final.clone()
        written = torch.randint(3, VOCAB - 2, (len(prompts), 4), generator=gen)
        state = torch.rand(len(prompts), 4, generator=gen)  # masked, rewritten or kept
        block_tokens = torch.where(state < 0.4, MASK, torch.where(state < 0.7, written, final[:, span]))
        noisy_canvas[:, span] = torch.where(layout.generated[:, span], block_tokens, final[:, span])
        with torch.no_grad():
            decoding = session.logits(noisy_canvas, block, 0)  # [B, 4, V]
            for row in range(len(prompts)):
                first = int(layout.offsets[row])  # the row's own position 0, a block boundary
                pad = (0, first)
                clean = torch.nn.functional.pad(final[row, first:], pad)[None]  # [1, T]
                noisy = torch.nn.functional.pad(noisy_canvas[row, first:], pad)[None]  # [1, T]
                valid = (torch.arange(width) < width - first)[None]  # [1, T]
                training = forward(noisy, clean, valid)[0, block * 4 - first : (block + 1) * 4 - first]
                answer = layout.generated[row, span]  # [4]
                torch.testing.assert_close(training[answer], decoding[row][answer], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("keep", [True, False])
def test_block_shifted_form_is_block_diffusion_read_one_position_to_the_left(keep):
    model = tiny_llama("sdpa", seed=8)
    ids, response, valid = _batch([12, 9, 5], [3, 4, 2], 12)
    draw = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0))  # [B, T]
    noisy = torch.where(response & (draw < 0.6), MASK, ids)
    forward = DiffusionForward(model, "block_diffusion_shifted", block_length=4)
    forward.pass_logits_to_keep = keep  # False: the model returns all 2T rows, read in place
    with torch.no_grad():
        shifted = forward(noisy, ids, valid)  # [B, T, V]
        blocks = naive_block_logits(model, noisy, ids, valid, 4)  # the block-diffusion outputs
        clean = naive_block_logits(model, ids, ids, valid, 4)  # the clean copy's outputs
    j = torch.arange(1, 12)
    inside = j % 4 != 0
    torch.testing.assert_close(shifted[:, j[inside]], blocks[:, j[inside] - 1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(shifted[:, j[~inside]], clean[:, j[~inside] - 1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(shifted[:, 0], blocks[:, 0], atol=1e-4, rtol=1e-4)  # reads its own output


def test_shifted_form_supervises_each_position_with_the_previous_output():
    model = tiny_llama("sdpa", seed=7)
    ids, _, valid = _batch([7, 5], [2, 2], 7)
    with torch.no_grad():
        plain = DiffusionForward(model, "bidirectional", block_length=4)(ids, ids, valid)
        shifted = DiffusionForward(model, "shifted", block_length=4)(ids, ids, valid)
    torch.testing.assert_close(shifted[:, 1:], plain[:, :-1])
    torch.testing.assert_close(shifted[:, 0], plain[:, 0])  # position 0 reads its own output
