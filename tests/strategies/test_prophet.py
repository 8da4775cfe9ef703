"""Prophet (`Prophet`): early commit of the whole block when the top-2 gap says the answer is settled.

Unit tests on hand-built `StepContext`s pin the phases (against the port's rule), the answer region,
the fallback to the base rule and the base passed through (state, needs); end to end,
`dllm_edit.generate` is compared with the port in `tests/references/prophet.py` on one block, and the
documented difference of the per-block regime across blocks is shown. The authors' regime
(`regime="canvas"`) against the port over several blocks: `tests/strategies/test_finish_row.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import (
    EBSampler,
    FastDLLMFactor,
    Prophet,
    QuotaUnmask,
    StepContext,
    StepResult,
    Strategy,
    ThresholdUnmask,
    TokenEdit,
)
from tests.helpers import MASK
from tests.helpers.unmasking import (
    BAG,
    assert_parallel,
    commits,
    compare_with_port,
    completions,
    ctx_of,
    port_config,
)
from tests.references import prophet as prophet_ref

# ----------------------------------------------------------------------------------------------
# the rule


def test_prophet_phases_match_the_reference_rule():
    g = torch.Generator().manual_seed(0)
    top = torch.rand(1, 6, generator=g) * 0.5 + 0.5
    for scale in (1e-1, 1e-2, 1e-3, 1e-4):
        second = top * scale
        gap = float((top.log() - second.log()).mean())
        for step in (0, 31, 32, 33, 65, 66, 67, 99):
            ctx = ctx_of(top, step=torch.tensor([step]), logit_gap=top.log() - second.log())
            fired = Prophet(steps=100).step(ctx).commit.all()
            assert bool(fired) == prophet_ref.should_early_exit(
                step + 1, 100, gap, {"early": 7.5, "mid": 5.0, "late": 2.5}
            )


def test_prophet_answer_region_and_fallback_to_the_base():
    probs = torch.tensor([[0.9, 0.8, 0.99, 0.99, 0.7, 0.6]])
    second = torch.tensor([[0.05, 0.1, 1e-5, 1e-5, 0.2, 0.3]])
    base = dict(logit_gap=probs.log() - second.log(), positions=torch.arange(6)[None] + 10)
    ctx = ctx_of(probs, masked=[True, True, False, True, True, True], **base)
    # the region (offsets 12, 13: gap ~11.5) is confident; slot 2 is written and still counts
    assert commits(Prophet(answer_start=12, answer_length=2, steps=10), ctx) == [0, 1, 3, 4, 5]
    # the region holds slots 10, 11 (gaps 2.9, 2.1): no early commit, the base's top-1
    assert commits(Prophet(answer_start=10, answer_length=2, steps=10), ctx) == [3]
    # a region outside the span never fires, whatever the threshold
    assert commits(Prophet(answer_start=40, thresholds=(0.0, 0.0, 0.0), steps=10), ctx) == [3]
    # no region given: the block's masks (mean gap 4.3) against the late threshold 2.5 at step 9
    late = ctx_of(probs, masked=[True, True, False, True, True, True], step=torch.tensor([9]), **base)
    assert commits(Prophet(steps=10), late) == [0, 1, 3, 4, 5]
    assert commits(Prophet(steps=10), ctx) == [3]


@dataclass(frozen=True)
class _Counting(Strategy):
    """A stateful unmasking rule for the pass-through test: counts its calls in its state."""

    unmasks = True

    @property
    def needs_stats(self):
        return frozenset({"entropy"})

    @property
    def extra_forwards_per_block(self):
        return 3

    def step(self, ctx):
        calls = ctx.state.get("calls", torch.zeros_like(ctx.step)) + 1
        result = ThresholdUnmask(threshold=1.0).step(ctx)
        return StepResult(
            commit=result.commit, edit=result.edit, tokens=result.tokens, state={"calls": calls}
        )


def test_prophet_passes_the_base_through():
    p = Prophet(base=_Counting(), steps=4)
    assert p.needs.stats == {"entropy", "logit_gap"} and p.needs.extra_forwards == 3
    ctx = ctx_of([0.5, 0.4], logit_gap=torch.tensor([[0.5, 0.4]]).log() - torch.tensor([[0.4, 0.3]]).log())
    ctx = StepContext(**{**ctx.__dict__, "state": {"calls": torch.tensor([2])}})
    assert p.step(ctx).state["calls"].tolist() == [3]
    eb = Prophet(base={"type": "eb_sampler", "gamma": 0.01})
    assert eb.base == EBSampler(gamma=0.01) and eb.needs.stats == {"entropy", "logit_gap"}
    assert Prophet(base="fast_dllm_factor").base == FastDLLMFactor()
    quota = Prophet(base=QuotaUnmask(steps=4, block_length=8, spread="masked_count"))
    assert quota._horizon(ctx_of([0.5], block_masked=torch.tensor([8]))).tolist() == [4]  # the base's steps


@pytest.mark.parametrize(
    "cls, field, value, err",
    [
        (Prophet, "thresholds", (7.5, 5.0), ValueError),
        (Prophet, "thresholds", (7.5, math.inf, 1.0), ValueError),
        (Prophet, "phase_bounds", (0.7, 0.3), ValueError),
        (Prophet, "answer_start", -1, ValueError),
        (Prophet, "answer_length", 0, ValueError),
        (Prophet, "steps", 0, ValueError),
        (Prophet, "base", TokenEdit(), TypeError),
        (Prophet, "base", "no_such_rule", ValueError),
    ],
)
def test_bad_fields_name_the_field(cls, field, value, err):
    with pytest.raises(err, match=f"`{field}`|{field}|registered"):
        cls(**{field: value})


# ----------------------------------------------------------------------------------------------
# end to end against the port


@pytest.mark.parametrize(
    "answer_start, thresholds",
    [(2, (6.0, 4.0, 3.0)), (2, (4.0, 3.0, 2.0)), (7, (2.0, 1.5, 1.0)), (0, (99.0, 99.0, 99.0))],
)
def test_prophet_matches_the_port_on_one_block(answer_start, thresholds):
    gen = 12
    base = {
        "type": "QuotaUnmask",
        "steps": gen,
        "block_length": gen,
        "threshold": 1.0,
        "spread": "masked_count",
    }
    unmasking = {"type": "prophet", "base": base, "thresholds": thresholds, "answer_start": answer_start}
    names = dict(zip(("early", "mid", "late"), thresholds))
    port = lambda m, p: prophet_ref.generate(  # noqa: E731
        m,
        p,
        mask_id=MASK,
        steps=gen,
        gen_length=gen,
        block_length=gen,
        answer_start_pos=p.shape[1] + answer_start,
        thresholds=names,
    )
    expected = compare_with_port(BAG, unmasking, port, gen, gen)
    if thresholds[0] < 99:
        assert_parallel(expected, gen)  # it fired early on some row
    else:
        assert all(nfe == gen for _, nfe in expected)


def test_prophet_fills_the_active_block_only():
    # documented difference: across blocks the reference fills the whole canvas when it fires; here
    # the active block, and the next block decodes with the rule (re-checking at its first step)
    bl, gen, prompt = 4, 8, [5, 6, 7]
    base = {
        "type": "QuotaUnmask",
        "steps": bl,
        "block_length": bl,
        "threshold": 1.0,
        "spread": "masked_count",
    }
    cfg = port_config({"type": "prophet", "base": base, "thresholds": (0.0, 0.0, 0.0)}, bl, gen)
    out = dllm_edit.generate(BAG, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional")
    x, nfe = prophet_ref.generate(
        BAG,
        torch.tensor([prompt]),
        mask_id=MASK,
        steps=2 * bl,
        gen_length=gen,
        block_length=bl,
        answer_start_pos=3,
        answer_length=2,
        thresholds={"early": 0.0, "mid": 0.0, "late": 0.0},
    )
    assert nfe == 1 and int(out.num_forwards[0]) == 2  # one forward per block here
    ours = completions(out, 1)[0]
    assert torch.equal(ours[:bl], x[0, 3 : 3 + bl])  # the first block is the reference's fill
    assert not (ours == MASK).any()


def test_prophet_reads_the_logit_gap_past_the_float32_underflow():
    # a top-1 / top-2 logit gap of 110: the second probability is 0 in float32 (exp(-110) < 1.4e-45),
    # so log p1 - log p2 would be +inf and fire at any threshold; Prophet reads the gap of the logits
    from dllm_edit.kernels import candidate_stats
    from dllm_edit.strategies import StepContext

    logits = torch.zeros(1, 3, 8)  # [B, S, V]
    logits[..., 2] = 110.0  # every slot: a gap of 110 to the runners-up
    out = candidate_stats(logits, {"logit_gap", "top_prob", "second_prob"})
    assert out.second_prob.eq(0).all() and torch.allclose(out.logit_gap, torch.full((1, 3), 110.0))
    ctx = StepContext(
        tokens=torch.full((1, 3), MASK),
        masked=torch.ones(1, 3, dtype=torch.bool),
        editable=torch.zeros(1, 3, dtype=torch.bool),
        in_block=torch.ones(3, dtype=torch.bool),
        cand_tokens=out.token,
        cand_probs=out.prob,
        step=torch.tensor([0]),
        block_index=0,
        active=torch.tensor([True]),
        stats=out.statistics(),
    )
    assert Prophet(steps=10, thresholds=(200.0, 150.0, 120.0)).step(ctx).commit.sum() == 1  # the base's top-1
    assert Prophet(steps=10, thresholds=(100.0, 90.0, 80.0)).step(ctx).commit.all()  # fires: all
