"""Fast-dLLM's two parallel-decoding rules: the confidence threshold (`FastDLLMThreshold`) and the
factor rule (`FastDLLMFactor`, NVlabs' and d2Cache's readings of the last rank).

Unit tests on hand-built `StepContext`s pin each rule (ties, `>=` vs `>`, keep-at-least-one, bad
fields); the selection functions are compared with the port in `tests/references/fast_dllm.py` on
random logits; end to end, `dllm_edit.generate` is compared with the port's block loop in tokens and
forward count, each prompt alone and the prompts batched.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from dllm_edit.strategies import FastDLLMFactor, FastDLLMThreshold, Linear, ThresholdUnmask
from tests.helpers import MASK, tiny_llama
from tests.helpers.unmasking import (
    BAG,
    PROMPTS,
    assert_parallel,
    commits,
    compare_with_port,
    ctx_of,
    random_case,
    stats_ctx,
)
from tests.references import fast_dllm as fast_ref

# ----------------------------------------------------------------------------------------------
# the threshold rule


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
# the factor rule


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
    ],
)
def test_bad_fields_name_the_field(cls, field, value, err):
    with pytest.raises(err, match=f"`{field}`|{field}|registered"):
        cls(**{field: value})


# ----------------------------------------------------------------------------------------------
# end to end against the port


@pytest.mark.parametrize("tau", [0.3, 0.5, 0.9])
def test_fast_dllm_threshold_matches_the_port(tau):
    port = lambda m, p: fast_ref.generate(m, p, mask_id=MASK, gen_length=12, block_length=4, threshold=tau)  # noqa: E731
    expected = compare_with_port(BAG, {"type": "fast_dllm_threshold", "threshold": tau}, port, 4, 12)
    if tau < 0.9:
        assert_parallel(expected, 12)


@pytest.mark.parametrize("factor, rule", [(1.0, "nvlabs"), (1.0, "dllm"), (3.0, "nvlabs"), (3.0, "dllm")])
def test_fast_dllm_factor_matches_the_port(factor, rule):
    port = lambda m, p: fast_ref.generate(  # noqa: E731
        m, p, mask_id=MASK, gen_length=12, block_length=4, factor=factor, factor_rule=rule
    )
    unmasking = {"type": "fast_dllm_factor", "factor": factor, "nvlabs_last_rank": rule == "nvlabs"}
    assert_parallel(compare_with_port(BAG, unmasking, port, 4, 12), 12)


def test_fast_dllm_on_a_tiny_llama():
    # float32 alone; float64 for the left-padded batch (see test_adapters.py on padded float32 rows)
    model = tiny_llama("eager", seed=3)
    for unmasking, kw in (
        ({"type": "fast_dllm_threshold", "threshold": 0.1}, dict(threshold=0.1)),
        ({"type": "fast_dllm_factor", "factor": 8.0}, dict(factor=8.0, factor_rule="dllm")),
    ):
        port = lambda m, p, kw=kw: fast_ref.generate(m, p, mask_id=MASK, gen_length=8, block_length=4, **kw)  # noqa: E731
        compare_with_port(
            model, unmasking, port, 4, 8, prompts=PROMPTS[:2], batched_model=copy.deepcopy(model).double()
        )
