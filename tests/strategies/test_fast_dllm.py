"""Issue 35, items 3 and 5 (first half of the zoo): Fast-dLLM threshold and factor, EB-Sampler, Dream's
orders, LLaDA's random remasking and Prophet.

Unit tests on hand-built `StepContext`s pin each rule (ties, `>=` vs `>`, keep-at-least-one,
fallbacks, bad fields); the selection functions are compared with the ports in `tests/references/`
on random logits; end to end, `dllm_edit.generate` is compared with each port's block loop in tokens
and forward count, each prompt alone and the prompts batched.
"""

from __future__ import annotations

import copy
import math
import tempfile
from dataclasses import dataclass

import pytest
import torch
from conftest import EOS, MASK, PAD, VOCAB, left_pad, tiny_llama
from denoisers import BagDenoiser
from references import dream as dream_ref
from references import eb_sampler as eb_ref
from references import fast_dllm as fast_ref
from references import llada as llada_ref
from references import prophet as prophet_ref

import dllm_edit
from dllm_edit.strategies import (
    DreamUnmask,
    EBSampler,
    FastDLLMFactor,
    FastDLLMThreshold,
    Linear,
    LLaDARandom,
    Prophet,
    QuotaUnmask,
    StepContext,
    StepResult,
    Strategy,
    ThresholdUnmask,
    TokenEdit,
    get_strategy,
    strategy_from_dict,
)
from dllm_edit.strategies.dream import dream_fraction
from dllm_edit.strategies.eb_sampler import entropy_bound_count

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
NAMES = ("fast_dllm_threshold", "fast_dllm_factor", "eb_sampler", "prophet", "dream", "llada_random")


def ctx_of(probs, masked=None, in_block=None, **extra) -> StepContext:
    """A one-step context over `probs` (`[B, S]`): every slot masked unless `masked` says otherwise."""
    probs = torch.as_tensor(probs, dtype=torch.float32)
    if probs.dim() == 1:
        probs = probs[None]
    batch, width = probs.shape
    masked = torch.ones(batch, width, dtype=torch.bool) if masked is None else torch.as_tensor(masked)
    if masked.dim() == 1:
        masked = masked[None].expand(batch, width)
    fields = dict(
        tokens=torch.where(masked, MASK, 9),
        masked=masked,
        editable=~masked,
        in_block=torch.ones(width, dtype=torch.bool) if in_block is None else torch.as_tensor(in_block),
        cand_tokens=torch.arange(width).expand(batch, width) + 2,
        cand_probs=probs,
        step=torch.zeros(batch, dtype=torch.long),
        block_index=0,
        active=torch.ones(batch, dtype=torch.bool),
        mask_token_id=MASK,
    )
    fields.update(extra)
    return StepContext(**fields)


def stats_ctx(logits, masked, **extra) -> StepContext:
    """A context with every statistic, computed from `logits` `[B, S, V]` as the candidate pass does."""
    probs = torch.softmax(logits.float(), dim=-1)  # [B, S, V]
    top2 = probs.topk(2, dim=-1).values  # [B, S, 2]
    entropy = -torch.special.xlogy(probs, probs).sum(-1)  # [B, S]
    return ctx_of(
        top2[..., 0],
        masked,
        cand_tokens=probs.argmax(-1),
        top_probs=top2[..., 0],
        second_probs=top2[..., 1],
        entropy=entropy,
        **extra,
    )


def random_case(seed, batch=1, width=10, vocab=12, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, width, vocab, generator=g) * scale * torch.rand(batch, width, 1, generator=g)
    masked = torch.rand(batch, width, generator=g) < 0.7
    masked[:, 0] = True
    return logits, masked


def commits(strategy, ctx):
    return strategy.step(ctx).commit[0].nonzero().flatten().tolist()


# ----------------------------------------------------------------------------------------------
# Fast-dLLM threshold


def test_threshold_is_inclusive_and_keeps_the_top1():
    ctx = ctx_of([0.5, 0.25, 0.75, 0.5])
    assert commits(FastDLLMThreshold(threshold=0.5), ctx) == [0, 2, 3]  # 0.5 >= 0.5
    assert commits(ThresholdUnmask(threshold=0.5), ctx) == [2]  # LLaDA2.1's strict >
    assert commits(FastDLLMThreshold(threshold=0.9), ctx) == [2]  # none passes: the top-1
    assert commits(FastDLLMThreshold(threshold=0.0), ctx) == [0, 1, 2, 3]


def test_threshold_top1_tie_goes_to_the_lower_slot():
    assert commits(FastDLLMThreshold(threshold=0.9), ctx_of([0.25, 0.5, 0.5, 0.5])) == [1]


def test_threshold_only_reads_the_masks_of_the_active_block():
    # slot 0: written; slot 3: on the MBE window (in_block False); both have the highest probability
    ctx = ctx_of([0.99, 0.3, 0.2, 0.98], masked=[False, True, True, True], in_block=[True, True, True, False])
    assert commits(FastDLLMThreshold(threshold=0.9), ctx) == [1]
    none = ctx_of([0.99, 0.3], masked=[False, False])
    assert commits(FastDLLMThreshold(), none) == []


def test_threshold_takes_a_schedule_per_row():
    ctx = ctx_of([[0.6, 0.7, 0.8], [0.6, 0.7, 0.8]], step=torch.tensor([0, 2]))
    out = FastDLLMThreshold(threshold=Linear(start=0.9, end=0.5, num_steps=2)).step(ctx).commit
    assert out.tolist() == [[False, False, True], [True, True, True]]


@pytest.mark.parametrize("seed", range(40))
def test_threshold_and_factor_match_the_ports_selection(seed):
    logits, masked = random_case(seed)
    ctx = stats_ctx(logits, masked)
    for tau in (0.05, 0.2, 0.5, 0.9):
        _, transfer = fast_ref.transfer_threshold(logits, masked, ctx.tokens, tau)
        assert torch.equal(FastDLLMThreshold(threshold=tau).step(ctx).commit, transfer), tau
    for f in (0.3, 1.0, 2.5):
        _, theirs = fast_ref.transfer_factor_nvlabs(logits, masked, ctx.tokens, f)
        assert torch.equal(FastDLLMFactor(factor=f, nvlabs_last_rank=True).step(ctx).commit, theirs), f
        _, theirs = fast_ref.transfer_factor_dllm(logits, masked, ctx.tokens, f)
        assert torch.equal(FastDLLMFactor(factor=f).step(ctx).commit, theirs), f


# ----------------------------------------------------------------------------------------------
# Fast-dLLM factor


def test_factor_rule_is_inclusive_prefix():
    # f = 1.5: rank 2 needs c >= 1 - 1.5/3 = 0.5 (exact), rank 3 needs c >= 0.625
    assert commits(FastDLLMFactor(factor=1.5), ctx_of([0.4, 0.9, 0.5])) == [1, 2]
    assert commits(FastDLLMFactor(factor=1.5), ctx_of([0.4, 0.9, 0.4999])) == [1]
    # rank 1 is committed whatever its confidence
    assert commits(FastDLLMFactor(factor=0.01), ctx_of([0.01, 0.02])) == [1]
    # a failing rank stops the prefix even if a later rank would pass its own threshold
    assert commits(FastDLLMFactor(factor=1.0), ctx_of([0.99, 0.5, 0.5, 0.5])) == [0]


def test_factor_nvlabs_last_rank_off_by_one():
    ctx = ctx_of([0.9, 0.1])  # two masks: rank 2 fails 0.1 >= 2/3
    assert commits(FastDLLMFactor(), ctx) == [0]
    assert commits(FastDLLMFactor(nvlabs_last_rank=True), ctx) == [0, 1]  # NVlabs commits both
    early = ctx_of([0.9, 0.1, 0.05])  # the failure is not at the last rank: both rules agree
    assert commits(FastDLLMFactor(), early) == commits(FastDLLMFactor(nvlabs_last_rank=True), early) == [0]
    one = ctx_of([0.3], masked=[True])
    assert commits(FastDLLMFactor(nvlabs_last_rank=True), one) == [0]


@pytest.mark.parametrize(
    "cls, field, value, err",
    [
        (FastDLLMThreshold, "threshold", 1.5, ValueError),
        (FastDLLMThreshold, "threshold", "high", TypeError),
        (FastDLLMFactor, "factor", 0.0, ValueError),
        (FastDLLMFactor, "factor", -1.0, ValueError),
        (FastDLLMFactor, "factor", math.inf, ValueError),
        (FastDLLMFactor, "factor", "1", TypeError),
        (FastDLLMFactor, "nvlabs_last_rank", 1, TypeError),
        (EBSampler, "gamma", -1e-3, ValueError),
        (EBSampler, "gamma", math.nan, ValueError),
        (EBSampler, "gamma", None, TypeError),
        (EBSampler, "proxy", "margins", ValueError),
        (DreamUnmask, "alg", "maskgit", ValueError),
        (DreamUnmask, "alg_temp", -0.1, ValueError),
        (DreamUnmask, "alg_temp", "hot", TypeError),
        (DreamUnmask, "steps", 0, ValueError),
        (DreamUnmask, "eps", 1.0, ValueError),
        (LLaDARandom, "steps", 0, ValueError),
        (LLaDARandom, "steps", 2.0, ValueError),
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


def test_dream_refuses_alg_temp_with_origin():
    with pytest.raises(ValueError, match=r"`alg_temp`=0.5 has no effect with alg='origin'"):
        DreamUnmask(alg="origin", alg_temp=0.5)
    DreamUnmask(alg="origin", alg_temp=0.0)  # 0 means deterministic: nothing to refuse


# ----------------------------------------------------------------------------------------------
# EB-Sampler


def test_eb_bound_excludes_the_largest_entropy():
    ones = torch.ones(1, 4, dtype=torch.bool)
    h = torch.tensor([[0.5, 1e-4, 1e-4, 0.2]])
    assert entropy_bound_count(h, ones, 1e-3).tolist() == [3]  # 0.5002 - 0.5 <= 1e-3, + 0.2 is not
    assert entropy_bound_count(h, ones, 0.0).tolist() == [1]  # k = 1 always
    assert entropy_bound_count(h, ones, 10.0).tolist() == [4]
    assert entropy_bound_count(h, torch.zeros(1, 4, dtype=torch.bool), 10.0).tolist() == [0]


def test_eb_orders_by_the_proxy():
    # confidence order: 0, 1, 2; entropy order: 2, 1, 0; margin order: 1, 2, 0
    ctx = ctx_of(
        [0.9, 0.8, 0.7],
        entropy=torch.tensor([[0.9, 3e-4, 2e-4]]),
        top_probs=torch.tensor([[0.9, 0.8, 0.7]]),
        second_probs=torch.tensor([[0.85, 0.01, 0.05]]),
    )
    # confidence order: k=2 costs 0.9 + 3e-4 - 0.9 = 3e-4, k=3 costs 5e-4
    assert commits(EBSampler(gamma=1e-3), ctx) == [0, 1, 2]
    assert commits(EBSampler(gamma=4e-4), ctx) == [0, 1]
    assert commits(EBSampler(gamma=1e-4), ctx) == [0]
    assert commits(EBSampler(gamma=1e-3, proxy="entropy"), ctx) == [0, 1, 2]
    assert commits(EBSampler(gamma=2.5e-4, proxy="entropy"), ctx) == [1, 2]
    assert commits(EBSampler(gamma=2.5e-4, proxy="margin"), ctx) == [1, 2]
    assert EBSampler().needs.stats == {"entropy"}
    assert EBSampler(proxy="margin").needs.stats == {"entropy", "top_prob", "second_prob"}
    with pytest.raises(LookupError, match="entropy"):  # a hand-built context without it
        EBSampler().step(ctx_of([0.5]))


@pytest.mark.parametrize(
    "proxy, alg", [("confidence", "maskgit_plus"), ("margin", "topk_margin"), ("entropy", "entropy")]
)
def test_eb_matches_the_port_with_the_paper_running_max(proxy, alg):
    # a crafted row first: the most confident slot has the larger entropy (0.9 spread thin vs 0.85
    # on one rival), so the paper's bound (minus the max) and d2Cache's (minus the k-th) differ
    crafted = torch.full((1, 3, 12), 0.1 / 11)
    crafted[0, 0, 0] = 0.9
    crafted[0, 1] = 1e-6
    crafted[0, 1, 1], crafted[0, 1, 2] = 0.85, 0.15 - 10e-6
    crafted[0, 2] = 1 / 12
    cases = [(crafted.log(), torch.ones(1, 3, dtype=torch.bool))]
    cases += [random_case(seed, width=12, scale=6.0) for seed in range(30)]
    differs = 0
    for seed, (logits, masked) in enumerate(cases):
        ctx = stats_ctx(logits, masked)
        scores, _, probs = eb_ref.sample_confidence(logits, alg)
        for gamma in (1e-3, 0.05, 0.5, 0.6):
            ours = EBSampler(gamma=gamma, proxy=proxy).step(ctx).commit[0]
            paper = eb_ref.eb_select(scores, masked, probs, gamma, cummax_dim=1)[0]
            assert sorted(ours.nonzero().flatten().tolist()) == sorted(paper.tolist()), (seed, gamma)
            # the reference's cummax(dim=0) at batch 1: the bound leaves out the k-th entropy, not the max
            theirs = eb_ref.eb_select(scores, masked, probs, gamma, cummax_dim=0)[0]
            differs += len(theirs) != int(ours.sum())
            assert len(theirs) <= int(ours.sum())
    # the documented difference shows on these cases; in entropy order the k-th entropy is the max
    assert differs > 0 if proxy != "entropy" else differs == 0


def test_eb_reference_running_max_mixes_the_batch():
    # d2Cache's cummax over dim 0 takes the max across rows: a row's choice depends on its neighbour
    rows = [random_case(seed, width=12, scale=6.0) for seed in range(8)]
    logits = torch.cat([r[0] for r in rows])
    masked = torch.cat([r[1] for r in rows])
    scores, _, probs = eb_ref.sample_confidence(logits, "maskgit_plus")
    batched = eb_ref.eb_select(scores, masked, probs, 0.05, cummax_dim=0)
    alone = [
        eb_ref.eb_select(scores[i : i + 1], masked[i : i + 1], probs[i : i + 1], 0.05, 0)[0] for i in range(8)
    ]
    assert any(len(b) != len(a) for b, a in zip(batched, alone))
    ours = EBSampler(gamma=0.05).step(stats_ctx(logits, masked)).commit
    ours_alone = [
        EBSampler(gamma=0.05).step(stats_ctx(logits[i : i + 1], masked[i : i + 1])).commit for i in range(8)
    ]
    assert torch.equal(ours, torch.cat(ours_alone))  # per row: batch == alone


# ----------------------------------------------------------------------------------------------
# Dream


def _dream_counts_reference(m, steps, eps=1e-3):
    """Dream's per-step counts for one row of `m` masks, as `_sample` computes them."""
    ts = torch.linspace(1, eps, steps + 1)
    out = []
    for i in range(steps):
        k = int(torch.tensor(m) / 1 * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else m
        out.append(k)
        m -= k
    return out


def _dream_counts(strategy, n, width):
    masked = torch.zeros(1, width, dtype=torch.bool)
    masked[0, :n] = True
    counts, step = [], 0
    while masked.any() and step < 4 * width:
        ctx = ctx_of(
            torch.linspace(0.9, 0.1, width), masked, step=torch.tensor([step]), block_masked=torch.tensor([n])
        )
        commit = strategy.step(ctx).commit
        counts.append(int(commit.sum()))
        masked = masked & ~commit
        step += 1
    return counts


@pytest.mark.parametrize("n, steps", [(8, 8), (8, 3), (16, 16), (5, 2), (12, 5), (1, 1), (4, 9)])
def test_dream_counts_follow_the_timestep_schedule(n, steps):
    expected = _dream_counts_reference(n, steps)
    assert _dream_counts(DreamUnmask(alg="maskgit_plus", steps=steps), n, max(n, 16)) == expected
    if steps == n:  # steps=None: the block's masks at its first step
        assert _dream_counts(DreamUnmask(alg="maskgit_plus"), n, 16) == expected
    assert sum(expected) == n and len(expected) == steps


def test_dream_first_step_can_fill_nothing():
    assert _dream_counts_reference(8, 8)[0] == 0  # floor(8 * 0.124875) = 0: a forward with no commit
    assert dream_fraction(torch.tensor([8, 4]), torch.tensor([0, 3]), 1e-3, 8).tolist() == pytest.approx(
        [
            1 - float(torch.linspace(1, 1e-3, 9)[1]),
            1 - float(torch.linspace(1, 1e-3, 5)[4] / torch.linspace(1, 1e-3, 5)[3]),
        ]
    )


def test_dream_orders():
    ctx = ctx_of(
        [0.9, 0.6, 0.7, 0.2],
        top_probs=torch.tensor([[0.9, 0.6, 0.7, 0.2]]),
        second_probs=torch.tensor([[0.85, 0.01, 0.2, 0.1]]),
        entropy=torch.tensor([[0.3, 0.2, 0.1, 0.4]]),
        step=torch.tensor([1]),
    )
    # steps=3, j=1: floor(4 * (1 - t2/t1)) = floor(1.998) = 1
    assert commits(DreamUnmask(alg="maskgit_plus", steps=3), ctx) == [0]
    assert commits(DreamUnmask(alg="topk_margin", steps=3), ctx) == [1]
    assert commits(DreamUnmask(alg="entropy", steps=3), ctx) == [2]
    assert commits(DreamUnmask(alg="entropy", steps=2), ctx) == [0, 1, 2, 3]  # j=1 is the last step
    assert DreamUnmask(alg="topk_margin").needs.stats == {"top_prob", "second_prob"}
    assert DreamUnmask().needs_stats == {"entropy"} and DreamUnmask(alg="origin").needs_stats == frozenset()


def test_dream_alg_temp_is_torch_multinomial_draw_for_draw():
    conf = torch.tensor([[0.9, 0.6, 0.7, 0.2, 0.5, 0.3]])
    masked = torch.tensor([[True, True, False, True, True, True]])
    strategy = DreamUnmask(alg="maskgit_plus", alg_temp=0.4, steps=2)
    for seed in range(20):
        ctx = ctx_of(conf, masked, generator=torch.Generator().manual_seed(seed))
        ours = commits(strategy, ctx)
        k = int(5 * (1 - torch.linspace(1, 1e-3, 3)[1]))
        weights = torch.softmax(torch.where(masked, conf / 0.4, -torch.inf), -1)
        theirs = torch.multinomial(weights, k, generator=torch.Generator().manual_seed(seed))
        assert ours == sorted(theirs[0].tolist())


def test_dream_origin_draws_each_mask():
    masked = torch.tensor([[True, True, True, False, True, True, True, True]])
    ctx = ctx_of(
        torch.full((1, 8), 0.5), masked, step=torch.tensor([0]), generator=torch.Generator().manual_seed(3)
    )
    ours = DreamUnmask(alg="origin", steps=4).step(ctx).commit
    u = torch.rand((1, 8), generator=torch.Generator().manual_seed(3))
    p = 1 - torch.linspace(1, 1e-3, 5)[1] / torch.linspace(1, 1e-3, 5)[0]
    assert torch.equal(ours, masked & (u < p))
    last = ctx_of(torch.full((1, 8), 0.5), masked, step=torch.tensor([3]), generator=torch.Generator())
    assert torch.equal(DreamUnmask(alg="origin", steps=4).step(last).commit, masked)


def test_dream_steps_above_the_cap_are_refused_before_decoding():
    cfg = dllm_edit.EditGenerationConfig(
        unmasking={"type": "dream", "steps": 8}, block_length=8, max_post_steps=0
    )
    assert cfg.unmasking.extra_forwards_per_block == 8
    with pytest.raises(ValueError, match="max_steps_per_block"):
        dllm_edit.EditGenerationConfig(
            unmasking={"type": "dream", "steps": 12}, block_length=8, max_post_steps=0
        )
    dllm_edit.EditGenerationConfig(
        unmasking={"type": "dream", "steps": 12}, block_length=8, max_post_steps=0, max_steps_per_block=None
    )


# ----------------------------------------------------------------------------------------------
# LLaDA random


def test_llada_random_quota_and_draws():
    masked = torch.tensor([[True, True, True, True, True, False, True]])
    for seed in range(10):
        for step, quota in ((0, 2), (1, 2), (2, 1)):  # 5 masks (block_masked) over 3 steps
            ctx = ctx_of(
                torch.full((1, 7), 0.5),
                masked,
                in_block=torch.tensor([True] * 6 + [False]),
                step=torch.tensor([step]),
                block_masked=torch.tensor([5]),
                generator=torch.Generator().manual_seed(seed),
            )
            ours = LLaDARandom(steps=3).step(ctx).commit
            u = torch.rand((1, 7), generator=torch.Generator().manual_seed(seed))
            u = torch.where(masked & ctx.in_block, u, -torch.inf)
            assert sorted(ours[0].nonzero().flatten().tolist()) == sorted(u[0].topk(quota).indices.tolist())
            assert not ours[0, 5] and not ours[0, 6]
    one = ctx_of(torch.full((1, 4), 0.5), generator=torch.Generator().manual_seed(0))
    assert int(LLaDARandom().step(one).commit.sum()) == 1


# ----------------------------------------------------------------------------------------------
# Prophet


def test_prophet_phases_match_the_reference_rule():
    g = torch.Generator().manual_seed(0)
    top = torch.rand(1, 6, generator=g) * 0.5 + 0.5
    for scale in (1e-1, 1e-2, 1e-3, 1e-4):
        second = top * scale
        gap = float((top.log() - second.log()).mean())
        for step in (0, 31, 32, 33, 65, 66, 67, 99):
            ctx = ctx_of(top, step=torch.tensor([step]), top_probs=top, second_probs=second)
            fired = Prophet(steps=100).step(ctx).commit.all()
            assert bool(fired) == prophet_ref.should_early_exit(
                step + 1, 100, gap, {"early": 7.5, "mid": 5.0, "late": 2.5}
            )


def test_prophet_answer_region_and_fallback_to_the_base():
    probs = torch.tensor([[0.9, 0.8, 0.99, 0.99, 0.7, 0.6]])
    second = torch.tensor([[0.05, 0.1, 1e-5, 1e-5, 0.2, 0.3]])
    base = dict(top_probs=probs, second_probs=second, positions=torch.arange(6)[None] + 10)
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
    assert p.needs.stats == {"entropy", "top_prob", "second_prob"} and p.needs.extra_forwards == 3
    ctx = ctx_of([0.5, 0.4], top_probs=torch.tensor([[0.5, 0.4]]), second_probs=torch.tensor([[0.4, 0.3]]))
    ctx = StepContext(**{**ctx.__dict__, "state": {"calls": torch.tensor([2])}})
    assert p.step(ctx).state["calls"].tolist() == [3]
    eb = Prophet(base={"type": "eb_sampler", "gamma": 0.01})
    assert eb.base == EBSampler(gamma=0.01) and eb.needs.stats == {"entropy", "top_prob", "second_prob"}
    assert Prophet(base="fast_dllm_factor").base == FastDLLMFactor()
    quota = Prophet(base=QuotaUnmask(steps=4, block_length=8, spread="masked_count"))
    assert quota._horizon(ctx_of([0.5], block_masked=torch.tensor([8]))).tolist() == [4]  # the base's steps


# ----------------------------------------------------------------------------------------------
# registry, config, composition


@pytest.mark.parametrize("name", NAMES)
def test_every_rule_is_selectable_and_round_trips(name):
    cls = get_strategy(name)
    assert cls.unmasks and cls.sweep is not None
    strategy = cls()
    assert strategy_from_dict(strategy.to_dict()) == strategy
    cfg = dllm_edit.EditGenerationConfig(unmasking=name, editing_threshold=0.5, **IDS)
    built = cfg.build_strategies()
    assert built[0] == strategy and isinstance(built[1], TokenEdit)
    for value in cls.sweep[1]:  # the bench's sweep is valid
        cls(**{cls.sweep[0]: value})
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        back = dllm_edit.EditGenerationConfig.from_pretrained(d)
    assert back.unmasking == strategy


def test_a_dict_selects_fields():
    cfg = dllm_edit.EditGenerationConfig(unmasking={"type": "eb_sampler", "gamma": 0.01, "proxy": "entropy"})
    assert cfg.unmasking == EBSampler(gamma=0.01, proxy="entropy")
    with pytest.raises(ValueError, match="gamma"):
        dllm_edit.EditGenerationConfig(unmasking={"type": "eb_sampler", "gamma": -1.0})


@pytest.mark.parametrize(
    "unmasking", ["eb_sampler", "fast_dllm_factor", "fast_dllm_threshold", "dream", "prophet", "llada_random"]
)
def test_rules_compose_with_t2t_editing_and_mbe(unmasking):
    model = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
    ids, mask = left_pad([[5, 6, 7], [9, 10, 11, 12, 13]])
    out = dllm_edit.generate(
        model,
        ids,
        attention_mask=mask,
        adapter="bidirectional",
        unmasking=unmasking,
        editing_threshold=0.3,
        multi_block_edit=True,
        max_post_steps=2,
        block_length=4,
        max_new_tokens=12,
        eos_early_stop=False,
        generator=torch.Generator().manual_seed(0),
        **IDS,
    )
    assert not (out.sequences == MASK).any()
    assert (out.num_forwards <= 3 * (4 + 2 + 4 + 4)).all()


# ----------------------------------------------------------------------------------------------
# end to end against the ports


BAG = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12], [20], [30, 31, 32, 33, 34, 35, 36, 37, 38]]


def _config(unmasking, bl, gen, **fields):
    return dllm_edit.EditGenerationConfig.from_mode(
        "llada",
        steps=None,
        unmasking=unmasking,
        block_length=bl,
        max_new_tokens=gen,
        output_trace=True,
        **IDS,
        **fields,
    )


def _completions(out, rows):
    """Each row's whole completion (before the EOS cut of the output), from the trace."""
    last = {}
    for record in out.trace:
        last[record.block] = record
    full = torch.cat([last[b].after for b in sorted(last)], dim=1)  # [B, blocks * bl]
    return [full[i] for i in range(rows)]


def _compare(model, unmasking, port, bl, gen, adapter="bidirectional", prompts=PROMPTS, batched_model=None):
    """dllm_edit vs `port(model, prompt) -> (canvas, nfe)`: each prompt alone, then all batched."""
    cfg = _config(unmasking, bl, gen)
    expected = []
    for prompt in prompts:
        x, nfe = port(model, torch.tensor([prompt]))
        expected.append((x[0, len(prompt) :], int(nfe) if not torch.is_tensor(nfe) else int(nfe[0])))
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert torch.equal(_completions(alone, 1)[0], expected[-1][0]), ("alone", prompt)
        assert int(alone.num_forwards[0]) == expected[-1][1], ("alone forwards", prompt)
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(
        batched_model or model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter
    )
    for i, (tokens, nfe) in enumerate(expected):
        assert torch.equal(_completions(batch, len(prompts))[i], tokens), ("batched", i)
        assert int(batch.num_forwards[i]) == nfe, ("batched forwards", i)
    return expected


def _parallel(expected, gen):
    """The test means something: some row committed several tokens in one forward."""
    assert any(nfe < gen for _, nfe in expected)


@pytest.mark.parametrize("tau", [0.3, 0.5, 0.9])
def test_fast_dllm_threshold_matches_the_port(tau):
    port = lambda m, p: fast_ref.generate(m, p, mask_id=MASK, gen_length=12, block_length=4, threshold=tau)  # noqa: E731
    expected = _compare(BAG, {"type": "fast_dllm_threshold", "threshold": tau}, port, 4, 12)
    if tau < 0.9:
        _parallel(expected, 12)


@pytest.mark.parametrize("factor, rule", [(1.0, "nvlabs"), (1.0, "dllm"), (3.0, "nvlabs"), (3.0, "dllm")])
def test_fast_dllm_factor_matches_the_port(factor, rule):
    port = lambda m, p: fast_ref.generate(  # noqa: E731
        m, p, mask_id=MASK, gen_length=12, block_length=4, factor=factor, factor_rule=rule
    )
    unmasking = {"type": "fast_dllm_factor", "factor": factor, "nvlabs_last_rank": rule == "nvlabs"}
    _parallel(_compare(BAG, unmasking, port, 4, 12), 12)


def test_fast_dllm_on_a_tiny_llama():
    # float32 alone; float64 for the left-padded batch (see test_adapters.py on padded float32 rows)
    model = tiny_llama("eager", seed=3)
    for unmasking, kw in (
        ({"type": "fast_dllm_threshold", "threshold": 0.1}, dict(threshold=0.1)),
        ({"type": "fast_dllm_factor", "factor": 8.0}, dict(factor=8.0, factor_rule="dllm")),
    ):
        port = lambda m, p, kw=kw: fast_ref.generate(m, p, mask_id=MASK, gen_length=8, block_length=4, **kw)  # noqa: E731
        _compare(
            model, unmasking, port, 4, 8, prompts=PROMPTS[:2], batched_model=copy.deepcopy(model).double()
        )


@pytest.mark.parametrize(
    "gamma, proxy, alg",
    [(0.5, "confidence", "maskgit_plus"), (2.0, "entropy", "entropy"), (1.0, "margin", "topk_margin")],
)
def test_eb_sampler_matches_the_port(gamma, proxy, alg):
    port = lambda m, p: eb_ref.generate(  # noqa: E731
        m, p, mask_id=MASK, gen_length=12, block_length=4, gamma=gamma, alg=alg, cummax_dim=1
    )
    _parallel(_compare(BAG, {"type": "eb_sampler", "gamma": gamma, "proxy": proxy}, port, 4, 12), 12)


@pytest.mark.parametrize(
    "alg, steps", [("maskgit_plus", 5), ("topk_margin", 8), ("entropy", None), ("entropy", 3)]
)
def test_dream_matches_the_port(alg, steps):
    gen = 8
    port = lambda m, p: dream_ref.generate(m, p, mask_id=MASK, gen_length=gen, steps=steps or gen, alg=alg)  # noqa: E731
    _compare(BAG, {"type": "dream", "alg": alg, "steps": steps}, port, gen, gen, adapter="shifted")


@pytest.mark.parametrize("alg, alg_temp", [("origin", None), ("maskgit_plus", 0.05), ("entropy", 0.5)])
def test_dream_sampled_orders_match_the_port_draw_for_draw(alg, alg_temp):
    gen, steps, seed = 8, 4, 11
    cfg = _config({"type": "dream", "alg": alg, "alg_temp": alg_temp, "steps": steps}, gen, gen)
    prompts = torch.tensor([[5, 6, 7], [9, 10, 11]])  # equal lengths: the port's canvas has no padding
    for ids in (prompts[:1], prompts):
        x, nfe = dream_ref.generate(
            BAG,
            ids,
            mask_id=MASK,
            gen_length=gen,
            steps=steps,
            alg=alg,
            alg_temp=alg_temp,
            generator=torch.Generator().manual_seed(seed),
        )
        out = dllm_edit.generate(
            BAG, ids, generation_config=cfg, adapter="shifted", generator=torch.Generator().manual_seed(seed)
        )
        assert torch.equal(torch.stack(_completions(out, len(ids))), x[:, 3:])
        assert out.num_forwards.tolist() == [nfe] * len(ids)


@pytest.mark.parametrize("steps", [None, 2, 4])
def test_llada_random_matches_the_port_draw_for_draw(steps):
    bl, gen, seed = 4, 12, 5
    prompts = torch.tensor([[5, 6, 7], [9, 10, 11], [20, 21, 22]])
    cfg = _config({"type": "llada_random", "steps": steps}, bl, gen)
    for ids in (prompts[:1], prompts):
        x, nfe = llada_ref.generate_random(
            BAG,
            ids,
            mask_id=MASK,
            steps=(steps or bl) * (gen // bl),
            gen_length=gen,
            block_length=bl,
            generator=torch.Generator().manual_seed(seed),
        )
        out = dllm_edit.generate(
            BAG,
            ids,
            generation_config=cfg,
            adapter="bidirectional",
            generator=torch.Generator().manual_seed(seed),
        )
        assert torch.equal(torch.stack(_completions(out, len(ids))), x[:, 3:])
        assert out.num_forwards.tolist() == [nfe] * len(ids)


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
    expected = _compare(BAG, unmasking, port, gen, gen)
    if thresholds[0] < 99:
        _parallel(expected, gen)  # it fired early on some row
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
    cfg = _config({"type": "prophet", "base": base, "thresholds": (0.0, 0.0, 0.0)}, bl, gen)
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
    ours = _completions(out, 1)[0]
    assert torch.equal(ours[:bl], x[0, 3 : 3 + bl])  # the first block is the reference's fill
    assert not (ours == MASK).any()
