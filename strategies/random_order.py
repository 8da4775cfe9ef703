"""LLaDA's `remasking="random"` (Nie et al., arXiv 2502.09992): the quota of low-confidence
remasking, filled at random positions."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import StepContext, StepResult, Strategy
from .unmask import masked_count_quota, rank_descending


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
        if self.steps is not None and (
            isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1
        ):
            raise ValueError(
                f"`steps` must be None (one token per step) or an int >= 1 (forwards per block), "
                f"got {self.steps!r}."
            )

    @property
    def batch_independent(self) -> bool:
        """False: one generator draws the whole batch's `[B, S]` scores, so a row's draws depend on
        the rows before it (the distribution of its positions does not)."""
        return False

    def step(self, ctx: StepContext) -> StepResult:
        masked = ctx.masked & ctx.in_block  # [B, S]
        if self.steps is None:
            quota = torch.ones_like(ctx.step)  # [B]
        else:
            if ctx.block_masked is None:
                raise ValueError(
                    "LLaDARandom(steps=...) needs StepContext.block_masked; the decoding loop sets it."
                )
            quota = masked_count_quota(
                ctx.block_masked, ctx.step.clamp(max=self.steps - 1), self.steps
            )  # [B]
        u = torch.rand(masked.shape, generator=ctx.generator, device=masked.device)  # [B, S]
        scores = torch.where(masked, u, torch.full_like(u, -float("inf")))  # [B, S]
        commit = masked & (rank_descending(scores) < quota[:, None])  # [B, S]
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)
