"""Hypothesis properties of every registered unmasking algorithm (the zoo), alone and with T2T editing.

For each strategy with `unmasks=True` (built with its defaults, its paper's): progress (at least one
commit per step while masks remain, unless it re-masks, and then the block ends within its declared
bound), a finished block never changes again, no mask token is written as a token, batch == alone,
and a pure `step`, on examples drawn afresh at every run (CI too). The list is read from the
registry, so a new algorithm is covered as soon as it is registered.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from conftest import EOS, MASK, PAD, left_pad
from denoisers import BagDenoiser
from hypothesis import given, settings
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.strategies import StepContext, Strategy, TokenEdit, get_strategy

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=48, sharpness=1.5, exact=True)
ALGORITHMS = unmasking_strategies()
# Randomized in every profile, CI's included (CI's profile derandomizes the rest of the suite): each
# run draws new examples, so the zoo's properties are searched wider over time; a failure prints the
# `@reproduce_failure` blob that replays it.
EXAMPLES = settings(max_examples=12, deadline=None, derandomize=False, database=None, print_blob=True)

prompts = st.lists(st.lists(st.integers(2, MASK - 2), min_size=1, max_size=7), min_size=1, max_size=3)
shapes = st.fixed_dictionaries(
    dict(
        block_length=st.integers(2, 6),
        max_new_tokens=st.integers(2, 12),
        max_post_steps=st.integers(0, 2),
        eos_early_stop=st.booleans(),
        editing=st.booleans(),
    )
)


def build(name: str, block_length: int) -> Strategy:
    cls = get_strategy(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    if "block_length" in fields:  # QuotaUnmask spreads over a block length
        return cls(block_length=block_length, steps=max(1, block_length // 2))
    return cls()


def adapter_for(strategy: Strategy) -> str:
    """The bidirectional adapter (LLaDA / Dream, where these rules come from), unless the rule needs
    another one (a capability it declares)."""
    return getattr(strategy, "preferred_adapter", None) or "bidirectional"


def decode(name, rows, shape, **extra):
    strategy = build(name, shape["block_length"])
    strategies = [strategy] + ([TokenEdit(threshold=0.5)] if shape["editing"] else [])
    ids, mask = left_pad(rows)
    cfg = dllm_edit.EditGenerationConfig(
        strategies=strategies,
        block_length=shape["block_length"],
        max_new_tokens=shape["max_new_tokens"],
        max_post_steps=shape["max_post_steps"],
        eos_early_stop=shape["eos_early_stop"],
        use_cache=False,
        **IDS,
    )
    generator = torch.Generator().manual_seed(0)
    out = dllm_edit.generate(
        BAG,
        ids,
        attention_mask=mask,
        generation_config=cfg,
        adapter=adapter_for(strategy),
        generator=generator,
        **extra,
    )
    return strategy, ids, out


@pytest.mark.parametrize("name", ALGORITHMS)
@EXAMPLES
@given(rows=prompts, shape=shapes)
def test_progress_history_and_no_mask_written(name, rows, shape):
    strategy, ids, out = decode(name, rows, shape, output_trace=True)
    width = ids.shape[1]
    assert torch.equal(out.sequences[:, :width], ids)  # the prompt never changes
    assert not (out.sequences[:, width:] == MASK).any()  # no mask left
    remasks = strategy.remasks
    progress = strategy.progress_every_step
    last_of_block: dict[int, torch.Tensor] = {}
    per_block: dict[int, torch.Tensor] = {}
    for rec in out.trace:
        written = rec.commit | rec.edit
        if progress:
            masks_left = rec.masked.any(-1) & rec.active  # [B]
            assert bool((rec.commit.sum(-1)[masks_left] >= 1).all()), "a step made no progress"
        if not remasks:
            assert not (rec.after[written] == MASK).any(), "a mask token was written as a token"
        assert not (rec.commit & ~rec.masked).any()
        assert torch.equal(rec.before[~rec.active], rec.after[~rec.active])
        if not shape["editing"] and not remasks:  # M2T only: a committed token never changes
            assert torch.equal(rec.before[~rec.masked], rec.after[~rec.masked])
        last_of_block[rec.block] = rec
        per_block.setdefault(rec.block, torch.zeros_like(rec.active, dtype=torch.long))
        per_block[rec.block] += rec.active
    # a finished block never changes again: the loop writes only the span, which moves past it
    # (that the strategy writes nothing outside the active block is `test_step_is_pure`'s window)
    blocks = sorted(last_of_block)
    for earlier, later in itertools.pairwise(blocks):
        end = last_of_block[earlier].span_start + last_of_block[earlier].after.shape[1]
        assert all(rec.span_start >= end for rec in out.trace if rec.block == later)
    bound = 2 * shape["block_length"] + shape["max_post_steps"] + strategy.extra_forwards_per_block
    for count in per_block.values():
        assert int(count.max()) <= bound


@pytest.mark.parametrize("name", ALGORITHMS)
@EXAMPLES
@given(rows=prompts, shape=shapes)
def test_batch_equals_alone(name, rows, shape):
    if not build(name, shape["block_length"]).batch_independent:
        pytest.skip(f"{name} draws one [B, S] sample per step: batch == alone holds in distribution only")
    _, ids, batch = decode(name, rows, shape)
    width = ids.shape[1]
    for i, r in enumerate(rows):
        _, _, alone = decode(name, [r], shape)
        assert batch.sequences[i, width:].tolist() == alone.sequences[0, len(r) :].tolist()
        assert batch.num_forwards[i] == alone.num_forwards[0]


def random_context(seed: int, batch: int, width: int, window: int, vocab: int = 48) -> StepContext:
    """A step over a span whose first `window` slots are a finished block (multi-block editing's
    window, written tokens only), the rest the active block with at least one mask per row."""
    g = torch.Generator().manual_seed(seed)
    in_block = torch.arange(window + width) >= window  # [S]
    width = window + width
    masked = (torch.rand(batch, width, generator=g) < 0.6) & in_block  # [B, S]
    masked[:, window] = True  # a mask in every row's active block
    probs = torch.rand(batch, width, generator=g).clamp_min(0.05)  # [B, S]
    second = probs * torch.rand(batch, width, generator=g)  # [B, S], <= top
    return StepContext(
        tokens=torch.where(masked, MASK, torch.randint(2, vocab - 2, (batch, width), generator=g)),
        masked=masked,
        editable=~masked,
        in_block=in_block,
        cand_tokens=torch.randint(2, vocab - 2, (batch, width), generator=g),
        cand_probs=probs,
        step=torch.randint(0, 3, (batch,), generator=g),
        block_index=0,
        active=torch.ones(batch, dtype=torch.bool),
        block_masked=masked.sum(-1),
        mask_token_id=MASK,
        current_probs=probs * 0.5,
        top_probs=probs,
        second_probs=second,
        entropy=torch.rand(batch, width, generator=g) * 3,
        kl_prev=torch.rand(batch, width, generator=g) * 0.05,
        shadow_probs=torch.rand(batch, width, generator=g),
        positions=(torch.arange(width) - window).expand(batch, width),
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize("name", ALGORITHMS)
@EXAMPLES
@given(seed=st.integers(0, 2**16), batch=st.integers(1, 3), width=st.integers(1, 8), window=st.integers(0, 3))
def test_step_is_pure(name, seed, batch, width, window):
    strategy = build(name, width)
    ctx = random_context(seed, batch, width, window)
    before = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
    copies = {k: v.clone() for k, v in before.items() if isinstance(v, torch.Tensor)}
    first = strategy.step(ctx)
    again = strategy.step(dataclasses.replace(ctx, generator=torch.Generator().manual_seed(seed)))
    for key, value in copies.items():
        assert torch.equal(getattr(ctx, key), value), f"step wrote into ctx.{key}"
    assert torch.equal(first.commit, again.commit) and torch.equal(first.tokens, again.tokens)
    assert not (first.commit & ~ctx.masked).any()  # commits land on masks only
    assert not ((first.commit | first.edit) & ~ctx.in_block).any()  # finished blocks stay frozen
    if strategy.progress_every_step:
        assert bool((first.commit.sum(-1) >= 1).all())  # progress on a row with masks
