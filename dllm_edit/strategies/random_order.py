"""LLaDA's `remasking="random"` (Nie et al., arXiv 2502.09992): the quota of low-confidence
remasking, filled at random positions."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .selection import llada_quota, masked_in_block, top_k_masked


@dataclass(frozen=True)
class LLaDARandom(Strategy):
    """LLaDA-1 random remasking: step `j` of a block fills `q_j` masks chosen uniformly at random.

    `q_j` is LLaDA-1's quota (`get_num_transfer_tokens`, as `QuotaUnmask(spread="masked_count")`):
    the `n` masks the block holds at its first step spread over `steps`, the remainder to the first
    steps. The positions are the `q_j` masked slots of the active block with the largest scores
    `u ~ U[0, 1)` drawn from `ctx.generator` (one per slot of the span, every step).

    Matches `ML-GSAI/LLaDA:generate.py` (`generate(..., remasking="random")`, @b7e6c35) and
    `NVlabs/Fast-dLLM:llada/generate.py` (`get_transfer_index`, `remasking="random"`). The
    reference draws `torch.rand` over the whole canvas from the global RNG; the draws differ, the
    distribution of the chosen positions does not. Once the block holds no mask it ends (the
    reference would run its remaining zero-quota steps when `steps` exceeds the masks).

    Args:
        steps: forwards per block (>= 1); None: one token per step (LLaDA's default
            `steps == gen_length`).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import LLaDARandom, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9, 9]]), masked=torch.ones(1, 4, dtype=torch.bool),
        ...     editable=torch.zeros(1, 4, dtype=torch.bool), in_block=torch.ones(4, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3, 4]]), cand_probs=torch.full((1, 4), 0.5),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]),
        ...     block_masked=torch.tensor([4]), generator=torch.Generator().manual_seed(0))
        >>> int(LLaDARandom(steps=2).step(ctx).commit.sum())  # 4 masks over 2 steps
        2
    """

    steps: int | None = None

    unmasks = True
    sweep = ("steps", (None, 16, 8, 4))

    def __post_init__(self) -> None:
        fields.optional_int(
            "LLaDARandom", "steps", self.steps, 1, "None: one token per step; else forwards per block"
        )

    def requires(self) -> Needs:
        """Not batch-independent: one generator draws the whole batch's `[B, S]` scores, so a row's
        draws depend on the rows before it (the distribution of its positions does not)."""
        return Needs(batch_independent=False)

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        u = torch.rand(masked.shape, generator=ctx.generator, device=masked.device)  # [B, S]
        return StepResult.unmasking(ctx, top_k_masked(u, masked, llada_quota(ctx, self.steps, minimum=0)))
