"""Dream's unmasking orders (`DreamUnmask`): the timestep schedule, the orders, `alg_temp` sampling.

Unit tests on hand-built `StepContext`s pin the per-step counts, each order, the draws (draw for draw
with `torch.multinomial` / `torch.rand`) and the bad fields; end to end, `dllm_edit.generate` is
compared with the port in `tests/references/dream.py` in tokens and forward count.
"""

from __future__ import annotations

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import DreamUnmask
from dllm_edit.strategies.dream import dream_fraction
from tests.helpers import MASK
from tests.helpers.llada1 import SOFT_BAG
from tests.helpers.unmasking import BAG, commits, compare_with_port, completions, ctx_of, port_config
from tests.references import dream as dream_ref

# ----------------------------------------------------------------------------------------------
# the rule


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


@pytest.mark.parametrize(
    "cls, field, value, err",
    [
        (DreamUnmask, "alg", "maskgit", ValueError),
        (DreamUnmask, "alg_temp", -0.1, ValueError),
        (DreamUnmask, "alg_temp", "hot", TypeError),
        (DreamUnmask, "steps", 0, ValueError),
        (DreamUnmask, "eps", 1.0, ValueError),
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
# end to end against the port


@pytest.mark.parametrize(
    "alg, steps", [("maskgit_plus", 5), ("topk_margin", 8), ("entropy", None), ("entropy", 3)]
)
def test_dream_matches_the_port(alg, steps):
    gen = 8
    port = lambda m, p: dream_ref.generate(m, p, mask_id=MASK, gen_length=gen, steps=steps or gen, alg=alg)  # noqa: E731
    compare_with_port(BAG, {"type": "dream", "alg": alg, "steps": steps}, port, gen, gen, adapter="shifted")


@pytest.mark.parametrize("alg, alg_temp", [("origin", None), ("maskgit_plus", 0.05), ("entropy", 0.5)])
def test_dream_sampled_orders_match_the_port_draw_for_draw(alg, alg_temp):
    gen, steps, seed = 8, 4, 11
    cfg = port_config({"type": "dream", "alg": alg, "alg_temp": alg_temp, "steps": steps}, gen, gen)
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
        assert torch.equal(torch.stack(completions(out, len(ids))), x[:, 3:])
        assert out.num_forwards.tolist() == [nfe] * len(ids)


DREAM_ORDERS = ("top_p_first", "top_k_first")


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
@pytest.mark.parametrize("order", DREAM_ORDERS)
def test_dream_filter_order_matches_the_port_draw_for_draw(alg, order):
    # Dream's sample_tokens filters top-p, then top-k; the candidate kernel top-k, then top-p. On a
    # soft model with top_k = 4 and top_p = 0.9 the two orders keep different tokens
    gen, steps, seed, sampling = 8, 4, 5, dict(temperature=0.8, top_p=0.9, top_k=4)
    cfg = port_config(
        {"type": "dream", "alg": alg, "steps": steps, "filter_order": order}, gen, gen, **sampling
    )
    ids = torch.tensor([[5, 6, 7], [9, 10, 11]])  # equal lengths: the port's canvas has no padding
    results = {}
    for which in DREAM_ORDERS:
        x, _ = dream_ref.generate(
            SOFT_BAG,
            ids,
            mask_id=MASK,
            gen_length=gen,
            steps=steps,
            alg=alg,
            generator=torch.Generator().manual_seed(seed),
            filter_order=which,
            **sampling,
        )
        results[which] = x[:, 3:]
    out = dllm_edit.generate(
        SOFT_BAG, ids, generation_config=cfg, adapter="shifted", generator=torch.Generator().manual_seed(seed)
    )
    assert torch.equal(torch.stack(completions(out, len(ids))), results[order])
    assert out.num_forwards.tolist() == [steps] * len(ids)
    assert not torch.equal(results["top_p_first"], results["top_k_first"]), "the orders agree: nothing tested"


def test_dream_filter_order_is_a_checked_field_and_declared_once():
    assert DreamUnmask().needs.top_p_first and not DreamUnmask(filter_order="top_k_first").needs.top_p_first
    with pytest.raises(ValueError, match="filter_order"):
        DreamUnmask(filter_order="top_p")


def test_dream_origin_ends_a_block_once_its_masks_are_drawn():
    # Dream's code runs `steps` forwards whatever is left; dllm_edit ends a block with no mask left
    # (documented): the same tokens, fewer forwards. Enough steps that every mask is drawn early.
    gen, steps, seed = 4, 12, 3
    cfg = port_config({"type": "dream", "alg": "origin", "steps": steps}, gen, gen, max_steps_per_block=None)
    ids = torch.tensor([[5, 6, 7]])
    x, nfe = dream_ref.generate(
        BAG,
        ids,
        mask_id=MASK,
        gen_length=gen,
        steps=steps,
        alg="origin",
        generator=torch.Generator().manual_seed(seed),
    )
    out = dllm_edit.generate(
        BAG, ids, generation_config=cfg, adapter="shifted", generator=torch.Generator().manual_seed(seed)
    )
    assert torch.equal(completions(out, 1)[0], x[0, 3:])
    assert nfe == steps and int(out.num_forwards[0]) < steps
