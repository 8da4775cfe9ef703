"""EB-Sampler (`EBSampler`): the entropy bound, its proxies, and the port's running max.

Unit tests on hand-built `StepContext`s pin the rule and its bad fields; the selection is compared
with the port in `tests/references/eb_sampler.py` on random logits (with the paper's running max, and
the documented difference from d2Cache's); end to end, `dllm_edit.generate` is compared with the
port's block loop in tokens and forward count, each prompt alone and the prompts batched.
"""

from __future__ import annotations

import math

import pytest
import torch

from dllm_edit.strategies import EBSampler
from dllm_edit.strategies.eb_sampler import entropy_bound_count
from tests.helpers import MASK
from tests.helpers.unmasking import (
    BAG,
    assert_parallel,
    commits,
    compare_with_port,
    ctx_of,
    random_case,
    stats_ctx,
)
from tests.references import eb_sampler as eb_ref

# ----------------------------------------------------------------------------------------------
# the rule


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


@pytest.mark.parametrize(
    "cls, field, value, err",
    [
        (EBSampler, "gamma", -1e-3, ValueError),
        (EBSampler, "gamma", math.nan, ValueError),
        (EBSampler, "gamma", None, TypeError),
        (EBSampler, "proxy", "margins", ValueError),
    ],
)
def test_bad_fields_name_the_field(cls, field, value, err):
    with pytest.raises(err, match=f"`{field}`|{field}|registered"):
        cls(**{field: value})


# ----------------------------------------------------------------------------------------------
# end to end against the port


@pytest.mark.parametrize(
    "gamma, proxy, alg",
    [(0.5, "confidence", "maskgit_plus"), (2.0, "entropy", "entropy"), (1.0, "margin", "topk_margin")],
)
def test_eb_sampler_matches_the_port(gamma, proxy, alg):
    port = lambda m, p: eb_ref.generate(  # noqa: E731
        m, p, mask_id=MASK, gen_length=12, block_length=4, gamma=gamma, alg=alg, cummax_dim=1
    )
    assert_parallel(
        compare_with_port(BAG, {"type": "eb_sampler", "gamma": gamma, "proxy": proxy}, port, 4, 12), 12
    )
