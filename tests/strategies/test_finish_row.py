"""The loop-level "finish the row" action (`StepResult.finish`), Prophet's authors' regime and `eos_fill`.

Prophet with `regime="canvas"` is compared with the port of the authors' code
(`tests/references/prophet.py`) over several blocks, with the answer region ahead of the block, in
it and behind it, alone and batched (batch == alone), and in the paper's setting (256 new tokens
in blocks of 32); the rule is pinned on hand-built contexts; a block-causal model is refused before
any forward; `eos_fill` stops rows at their first EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.strategies import CanvasView, Needs, Prophet, StepResult, Strategy
from tests.helpers import EOS, MASK, left_pad
from tests.helpers.unmasking import BAG, PROMPTS, ctx_of, port_config
from tests.references import prophet as prophet_ref


def _base(bl: int) -> dict:
    return {
        "type": "QuotaUnmask",
        "steps": bl,
        "block_length": bl,
        "threshold": 1.0,
        "spread": "masked_count",
    }


def _prophet(bl: int, thresholds, answer_start, regime="canvas") -> dict:
    return {
        "type": "prophet",
        "base": _base(bl),
        "thresholds": thresholds,
        "answer_start": answer_start,
        "regime": regime,
    }


def _port(prompt, bl, gen, thresholds, answer_start):
    return prophet_ref.generate(
        BAG,
        torch.tensor([prompt]),
        mask_id=MASK,
        steps=gen,
        gen_length=gen,
        block_length=bl,
        answer_start_pos=len(prompt) + answer_start,
        thresholds=dict(zip(("early", "mid", "late"), thresholds)),
    )


def _same_completion(out, row, prompt_width, expected) -> bool:
    """The output's completion (cut after its first EOS) equals the reference's up to that cut."""
    n = int(out.completion_lengths[row])
    ours = out.sequences[row, prompt_width : prompt_width + n]
    cut_ok = n == expected.numel() or int(expected[n - 1]) == EOS
    return cut_ok and torch.equal(ours, expected[:n])


# ----------------------------------------------------------------------------------------------
# the rule on known logits


def _view(gap_ahead: float, masked_ahead=True) -> CanvasView:
    # a completion of 2 blocks of 3: the span is block 0, the region (offsets 3..4) is in block 1
    gap = torch.tensor([[0.5, 0.5, 0.5, gap_ahead, gap_ahead, 0.5]])
    masked = torch.tensor([[True, True, True, masked_ahead, True, True]])
    return CanvasView(
        start=0,
        block_length=3,
        tokens=torch.where(masked, MASK, 9),
        masked=masked,
        generated=torch.ones(1, 6, dtype=torch.bool),
        positions=torch.arange(6)[None],
        cand_tokens=torch.arange(6)[None] + 2,
        cand_probs=torch.full((1, 6), 0.5),
        stats={"logit_gap": gap},
    )


def test_canvas_regime_reads_the_region_ahead_and_finishes_the_row():
    rule = Prophet(steps=3, answer_start=3, answer_length=2, regime="canvas")
    # step 0 of block 0 of 2 blocks of 3 steps: progress 1/6, early threshold 7.5
    fired = rule.step(ctx_of([[0.9, 0.8, 0.7]], canvas=_view(8.0), logit_gap=torch.zeros(1, 3)))
    assert fired.finish.tolist() == [True] and fired.commit.all() and fired.fill is None
    quiet = rule.step(ctx_of([[0.9, 0.8, 0.7]], canvas=_view(7.0), logit_gap=torch.zeros(1, 3)))
    assert quiet.finish.tolist() == [False] and quiet.commit.sum() == 1  # the base's top-1
    # progress over all steps: step 1 of block 1 is step 5 of 6 (late phase, 2.5)
    late = ctx_of([[0.9, 0.8, 0.7]], canvas=_view(3.0), logit_gap=torch.zeros(1, 3), step=torch.tensor([1]))
    assert rule.step(late).finish.tolist() == [False]  # block 0's numbering: progress 2/6, mid (5.0)
    late = ctx_of(
        [[0.9, 0.8, 0.7]],
        canvas=_view(3.0),
        logit_gap=torch.zeros(1, 3),
        step=torch.tensor([1]),
        block_index=1,
    )
    assert rule.step(late).finish.tolist() == [True]  # progress 5/6: late


def test_canvas_regime_needs_the_view_and_declares_it():
    assert Prophet(regime="canvas").needs.whole_canvas and not Prophet().needs.whole_canvas
    with pytest.raises(LookupError, match=r"StepContext.canvas"):
        Prophet(regime="canvas").step(ctx_of([[0.9]], logit_gap=torch.zeros(1, 1)))
    with pytest.raises(ValueError, match=r"`regime`.*'canvas'.*got 'canvass'"):
        Prophet(regime="canvass")


# ----------------------------------------------------------------------------------------------
# the authors' regime against the port


@pytest.mark.parametrize("answer_start", [2, 9, 13])  # in the first block, ahead, in the last block
@pytest.mark.parametrize("thresholds", [(4.0, 3.0, 2.0), (2.0, 1.5, 1.0), (99.0, 99.0, 99.0)])
def test_canvas_regime_matches_the_port_over_several_blocks(answer_start, thresholds):
    bl, gen = 4, 16
    cfg = port_config(_prophet(bl, thresholds, answer_start), bl, gen)
    expected = [_port(p, bl, gen, thresholds, answer_start) for p in PROMPTS]
    for prompt, (x, nfe) in zip(PROMPTS, expected):
        out = dllm_edit.generate(BAG, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional")
        assert int(out.num_forwards[0]) == nfe, prompt
        assert _same_completion(out, 0, len(prompt), x[0, len(prompt) :]), prompt
    ids, mask = left_pad(PROMPTS)
    batch = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional")
    for i, (prompt, (x, nfe)) in enumerate(zip(PROMPTS, expected)):
        assert int(batch.num_forwards[i]) == nfe, ("batched", i)
        assert _same_completion(batch, i, ids.shape[1], x[0, len(prompt) :]), ("batched", i)
    if thresholds[0] < 99:
        assert any(nfe < gen for _, nfe in expected)  # it fired early on some row


@given(
    prompt=st.lists(st.integers(2, MASK - 1), min_size=1, max_size=6),
    bl=st.sampled_from([2, 4]),
    blocks=st.integers(1, 4),
    answer_start=st.integers(0, 15),
    answer_length=st.integers(1, 5),
    late=st.floats(0.5, 4.0),
)
def test_canvas_regime_equals_the_port_property(prompt, bl, blocks, answer_start, answer_length, late):
    gen = bl * blocks
    thresholds = (late + 2.0, late + 1.0, late)
    unmasking = {**_prophet(bl, thresholds, answer_start), "answer_length": answer_length}
    cfg = port_config(unmasking, bl, gen)
    x, nfe = prophet_ref.generate(
        BAG,
        torch.tensor([prompt]),
        mask_id=MASK,
        steps=gen,
        gen_length=gen,
        block_length=bl,
        answer_start_pos=len(prompt) + answer_start,
        answer_length=answer_length,
        thresholds=dict(zip(("early", "mid", "late"), thresholds)),
    )
    out = dllm_edit.generate(BAG, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional")
    assert int(out.num_forwards[0]) == nfe
    assert _same_completion(out, 0, len(prompt), x[0, len(prompt) :])


@pytest.mark.parametrize("thresholds", [(2.0, 1.5, 1.0), (3.0, 2.0, 1.5)])
def test_canvas_regime_matches_the_port_in_the_papers_setting(thresholds):
    # 256 new tokens in blocks of 32, the answer region ahead of the first block
    bl, gen, answer_start, prompt = 32, 256, 200, [5, 6, 7, 8]
    cfg = port_config(_prophet(bl, thresholds, answer_start), bl, gen)
    x, nfe = _port(prompt, bl, gen, thresholds, answer_start)
    out = dllm_edit.generate(BAG, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional")
    assert int(out.num_forwards[0]) == nfe < gen
    assert _same_completion(out, 0, len(prompt), x[0, len(prompt) :])
    # the per-block rule cannot see the region before block 6: it fires later or not at all
    per_block = port_config(_prophet(bl, thresholds, answer_start, regime="block"), bl, gen)
    other = dllm_edit.generate(
        BAG, torch.tensor([prompt]), generation_config=per_block, adapter="bidirectional"
    )
    assert int(other.num_forwards[0]) > nfe


def test_canvas_regime_is_refused_on_block_causal_before_any_forward():
    calls = []

    class Counting(torch.nn.Module):
        def forward(self, *args, **kwargs):
            calls.append(1)
            return BAG(*args, **kwargs)

    cfg = port_config(_prophet(4, (2.0, 1.5, 1.0), 2), 4, 8, block_start=None, use_cache=False)
    with pytest.raises(ValueError, match=r"reads the whole canvas.*'block_causal'.*regime='block'"):
        dllm_edit.generate(
            Counting(), torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter="block_causal"
        )
    assert not calls


def test_canvas_regime_is_refused_on_the_dual_cache():
    from tests.helpers import tiny_llama

    cfg = port_config(_prophet(4, (2.0, 1.5, 1.0), 2), 4, 8, use_cache=True)
    with pytest.raises(ValueError, match=r"reads the whole canvas.*'bidirectional_dual_cache'"):
        dllm_edit.generate(
            tiny_llama(), torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter="bidirectional_dual_cache"
        )


def test_canvas_regime_runs_on_the_approximate_prefix_cache():
    # its forwards predict the blocks ahead; the cached prefix is the prompt only, so the first
    # step of the run is exact, and a rule that fires there gives the uncached run's tokens
    from tests.helpers import tiny_llama

    model = tiny_llama()
    cfg = port_config(_prophet(4, (-1.0, -1.0, -1.0), 2), 4, 12)
    exact = dllm_edit.generate(
        model, torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter="bidirectional"
    )
    cached = dllm_edit.generate(
        model,
        torch.tensor([[5, 6, 7]]),
        generation_config=cfg.replace(use_cache=True),
        adapter="bidirectional_approx_cache",
    )
    assert int(cached.num_forwards[0]) == int(exact.num_forwards[0]) == 1
    assert torch.equal(cached.sequences, exact.sequences)


@pytest.mark.parametrize("history", ["block", "canvas"])
def test_canvas_regime_runs_with_kl(history):
    """`Needs(whole_canvas=True)` with "kl": the loop keeps the previous forward's distribution over
    the whole view. On full attention without a cache the view's span slice is the span's forward,
    so Prophet over KLASS that never fires decodes KLASS's own tokens, step for step, and one that
    fires still finishes its rows."""
    ids, mask = left_pad(PROMPTS)
    klass = {"type": "klass", "history": history}
    alone = dllm_edit.generate(
        BAG, ids, attention_mask=mask, generation_config=port_config(klass, 4, 12), adapter="bidirectional"
    )
    never = _prophet(4, (1e9, 1e9, 1e9), 2)
    never["base"] = klass
    over = dllm_edit.generate(
        BAG, ids, attention_mask=mask, generation_config=port_config(never, 4, 12), adapter="bidirectional"
    )
    assert torch.equal(over.sequences, alone.sequences) and torch.equal(over.num_forwards, alone.num_forwards)
    for a, b in zip(alone.trace, over.trace, strict=True):
        assert torch.equal(a.commit, b.commit) and torch.equal(a.after, b.after)
    fires = _prophet(4, (-1.0, -1.0, -1.0), 2)
    fires["base"] = klass
    out = dllm_edit.generate(
        BAG, ids, attention_mask=mask, generation_config=port_config(fires, 4, 12), adapter="bidirectional"
    )
    assert out.num_forwards.tolist() == [1] * len(PROMPTS) and not bool((out.sequences == MASK).any())


# ----------------------------------------------------------------------------------------------
# the action itself, from any strategy


@dataclass(frozen=True)
class _FinishAtSecondStep(Strategy):
    """Commits the block's top-1; at each row's second step, finishes it with token 3."""

    unmasks = True

    def step(self, ctx):
        score = torch.where(ctx.masked & ctx.in_block, ctx.cand_probs, -1.0)  # [B, S]
        top = score.argmax(-1, keepdim=True)  # [B, 1]
        commit = torch.zeros_like(ctx.masked).scatter(1, top, True) & ctx.masked  # [B, S]
        finish = ctx.step >= 1  # [B]
        return StepResult(
            commit=commit,
            edit=torch.zeros_like(commit),
            tokens=ctx.cand_tokens,
            finish=finish,
            fill=torch.full_like(ctx.step, 3),
        )


@dataclass(frozen=True)
class _FinishWithoutFill(_FinishAtSecondStep):
    def step(self, ctx):
        r = super().step(ctx)
        return StepResult(commit=r.commit, edit=r.edit, tokens=r.tokens, finish=r.finish)


@pytest.mark.parametrize("adapter", ["block_causal", "bidirectional"])
def test_a_finished_row_is_filled_and_spends_no_more_forwards(adapter):
    cfg = port_config(
        None, 4, 12, strategies=[_FinishAtSecondStep()], max_post_steps=0, block_start=None, use_cache=False
    )
    ids, mask = left_pad(PROMPTS)
    batch = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    # two forwards in the first block with two masks or more; a first block holding one mask (the
    # prompt's tail) ends after one, and the row finishes at the second step of the next
    assert all(n in (2, 3) for n in batch.num_forwards.tolist())
    for i, prompt in enumerate(PROMPTS):
        alone = dllm_edit.generate(BAG, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert torch.equal(alone.sequences[0, len(prompt) :], batch.sequences[i, ids.shape[1] :])
        assert int(alone.num_forwards[0]) == int(batch.num_forwards[i])
        completion = alone.sequences[0, len(prompt) : len(prompt) + int(alone.completion_lengths[0])]
        assert (completion != MASK).all()
        assert (completion != 3).sum() <= int(alone.num_forwards[0])  # the commits, then the fill


def test_finish_without_fill_needs_the_whole_canvas():
    cfg = port_config(None, 4, 8, strategies=[_FinishWithoutFill()], block_start=None, use_cache=False)
    with pytest.raises(TypeError, match=r"without `fill`.*whole_canvas=True"):
        dllm_edit.generate(BAG, torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter="block_causal")


def test_needs_merge_the_whole_canvas():
    assert (Needs() | Needs(whole_canvas=True)).whole_canvas
    with pytest.raises(TypeError, match=r"`whole_canvas`"):
        Needs(whole_canvas=1)


# ----------------------------------------------------------------------------------------------
# eos_fill


@pytest.mark.parametrize("adapter", ["block_causal", "bidirectional"])
def test_eos_fill_fills_after_the_first_eos_and_stops(adapter):
    cfg = port_config(
        {"type": "threshold_unmask", "threshold": 1.0},
        4,
        16,
        eos_early_stop=False,
        block_start=None,
        use_cache=False,
    )
    ids, mask = left_pad(PROMPTS)
    plain = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    filled = dllm_edit.generate(
        BAG, ids, attention_mask=mask, generation_config=cfg.replace(eos_fill=True), adapter=adapter
    )
    assert (filled.num_forwards <= plain.num_forwards).all()
    width = ids.shape[1]
    stopped = False
    for i, prompt in enumerate(PROMPTS):
        completion = filled.sequences[i, width:]
        assert not (completion == MASK).any()
        alone = dllm_edit.generate(
            BAG, torch.tensor([prompt]), generation_config=cfg.replace(eos_fill=True), adapter=adapter
        )
        assert torch.equal(alone.sequences[0, len(prompt) :], completion)
        assert int(alone.num_forwards[0]) == int(filled.num_forwards[i])
        stopped |= int(filled.num_forwards[i]) < int(plain.num_forwards[i])
    assert stopped  # the rule saved forwards on some row


def test_eos_fill_is_a_bool():
    with pytest.raises(TypeError, match=r"`eos_fill` must be a bool"):
        dllm_edit.EditGenerationConfig(eos_fill="yes")
