"""LLaDA's random remasking (`LLaDARandom`): the quota per step and the draws from the generator.

A unit test on hand-built `StepContext`s pins the quota and the draws; end to end, `dllm_edit.generate`
is compared with the port in `tests/references/llada.py` draw for draw, alone and batched.
"""

from __future__ import annotations

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import LLaDARandom
from tests.helpers import MASK
from tests.helpers.unmasking import BAG, completions, ctx_of, port_config
from tests.references import llada as llada_ref

# ----------------------------------------------------------------------------------------------
# the rule


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


@pytest.mark.parametrize(
    "cls, field, value, err",
    [
        (LLaDARandom, "steps", 0, ValueError),
        (LLaDARandom, "steps", 2.0, ValueError),
    ],
)
def test_bad_fields_name_the_field(cls, field, value, err):
    with pytest.raises(err, match=f"`{field}`|{field}|registered"):
        cls(**{field: value})


# ----------------------------------------------------------------------------------------------
# end to end against the port


@pytest.mark.parametrize("steps", [None, 2, 4])
def test_llada_random_matches_the_port_draw_for_draw(steps):
    bl, gen, seed = 4, 12, 5
    prompts = torch.tensor([[5, 6, 7], [9, 10, 11], [20, 21, 22]])
    cfg = port_config({"type": "llada_random", "steps": steps}, bl, gen)
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
        assert torch.equal(torch.stack(completions(out, len(ids))), x[:, 3:])
        assert out.num_forwards.tolist() == [nfe] * len(ids)
