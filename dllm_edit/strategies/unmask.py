"""Mask-to-Token (M2T) strategies: which masked positions to fill at a step (the set Γ).

`rank_descending` and `masked_count_quota` live in `dllm_edit.strategies.selection` and are
importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .schedules import Schedule
from .selection import (
    at_step,
    llada_quota,
    masked_count_quota,
    masked_in_block,
    rank_descending,
    top_k_masked,
)


def select_unmask(
    probs: torch.Tensor, masked: torch.Tensor, threshold: torch.Tensor, quota: torch.Tensor
) -> torch.Tensor:
    """Γ of LLaDA2.1 equation 1 with the fallback of the reference decoder.

    If at least `quota` masked positions have `p > threshold` (strict), take exactly those;
    otherwise take the `min(quota, #masked)` masked positions of highest probability.

    Args:
        probs: FloatTensor `[B, S]`, candidate probabilities.
        masked: BoolTensor `[B, S]`, positions that are masked.
        threshold: FloatTensor `[B]`.
        quota: LongTensor `[B]`, the minimum number to fill (`num_to_transfer`).

    Returns:
        BoolTensor `[B, S]`, the positions to unmask.
    """
    confident = masked & (probs > threshold[:, None])  # [B, S]
    enough = confident.sum(-1) >= quota  # [B]
    top = top_k_masked(probs, masked, quota)  # [B, S]
    return torch.where(enough[:, None], confident, top)  # [B, S]


@dataclass(frozen=True)
class ThresholdUnmask(Strategy):
    """LLaDA2.1 threshold decoding (Γ, equation 1): unmask every masked position with `p > threshold`.

    When fewer than `num_to_transfer` positions pass, the `num_to_transfer` most confident masked
    positions are unmasked instead, so every step makes progress.

    Args:
        threshold: τ_mask, a float in [0, 1] or a `Schedule`. With 1.0 nothing passes
            (strict `>`) and the rule reduces to top-`num_to_transfer` per step.
        num_to_transfer: minimum number of positions unmasked per step (>= 1).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import ThresholdUnmask, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.tensor([[True, True, True]]),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.9, 0.2, 0.6]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> ThresholdUnmask(threshold=0.5).step(ctx).commit.tolist()
        [[True, False, True]]
    """

    threshold: float | Schedule = 0.7
    num_to_transfer: int = 1

    unmasks = True
    sweep = ("threshold", (0.9, 0.7, 0.5, 0.3))

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", fields.threshold_field("threshold", self.threshold))
        fields.positive_int(
            "ThresholdUnmask", "num_to_transfer", self.num_to_transfer, "each step must unmask something"
        )

    def step(self, ctx: StepContext) -> StepResult:
        quota = torch.full_like(ctx.step, self.num_to_transfer)  # [B]
        commit = select_unmask(
            ctx.cand_probs, masked_in_block(ctx), at_step(self.threshold, ctx), quota
        )  # [B, S]
        return StepResult.unmasking(ctx, commit)


def quota_schedule(block_length: int, steps: int) -> list[int]:
    """Spread `block_length` tokens evenly over `steps` steps, earlier steps taking the remainder.

    Examples:
        >>> quota_schedule(10, 4)
        [3, 3, 2, 2]
    """
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


QUOTA_SPREADS = ("block_length", "masked_count")


@dataclass(frozen=True)
class QuotaUnmask(Strategy):
    """LLaDA / LLaDA2.0 fixed-steps decoding: step `s` unmasks at least `quota[s]` positions.

    Two rules spread a block's tokens over its `steps` (earlier steps take the remainder):

    * `spread="block_length"` (LLaDA2.0): `quota = quota_schedule(block_length, steps)`, the same
      for every block, summing to the block length (a first block holding the prompt's tail
      simply runs out of masks early);
    * `spread="masked_count"` (LLaDA-1's `get_num_transfer_tokens`): the masks the block holds at
      its first step, `n`, spread over the steps (`masked_count_quota`), summing to `n`.

    At each step, every masked position with `p > threshold` is taken if that meets the quota,
    else the top-quota ones (the LLaDA2.0 reference rule; `threshold=1.0` gives the pure
    low-confidence remasking of LLaDA). `EditGenerationConfig(steps=...)` builds this strategy with
    the rule of its block origin: `"block_length"` for `block_start="absolute"`, `"masked_count"`
    for `"prompt_end"`.

    Args:
        steps: forwards per block (>= 1).
        block_length: the block length the quota is spread over (`spread="block_length"`).
        threshold: confidence threshold (float or Schedule).
        spread: `"block_length"` or `"masked_count"`.

    Examples:
        >>> QuotaUnmask(steps=4, block_length=8).quota
        (2, 2, 2, 2)
    """

    steps: int
    block_length: int
    threshold: float | Schedule = 1.0
    spread: str = "block_length"

    unmasks = True
    sweep = ("steps", (32, 16, 8, 4))  # forwards per block; `dllm-edit bench` blocks are 32 long

    def __post_init__(self) -> None:
        fields.positive_int("QuotaUnmask", "steps", self.steps, "forwards per block")
        fields.positive_int("QuotaUnmask", "block_length", self.block_length)
        if self.steps > self.block_length:
            raise ValueError(
                f"`steps` ({self.steps}) must be <= `block_length` ({self.block_length}): "
                "each step unmasks at least one token."
            )
        object.__setattr__(self, "threshold", fields.threshold_field("threshold", self.threshold))
        fields.choice("QuotaUnmask", "spread", self.spread, QUOTA_SPREADS, "LLaDA2.0's rule or LLaDA-1's")

    @property
    def quota(self) -> tuple[int, ...]:
        """The per-step quota of a block of `block_length` masks (either rule gives this then)."""
        return tuple(quota_schedule(self.block_length, self.steps))

    def step(self, ctx: StepContext) -> StepResult:
        if self.spread == "masked_count":
            quota = llada_quota(ctx, self.steps, minimum=0)  # [B]
        else:
            table = torch.tensor(self.quota, device=ctx.step.device)  # [steps]
            quota = table[ctx.step.clamp(max=self.steps - 1)]  # [B]
        commit = select_unmask(
            ctx.cand_probs, masked_in_block(ctx), at_step(self.threshold, ctx), quota
        )  # [B, S]
        return StepResult.unmasking(ctx, commit)


__all__ = [
    "QUOTA_SPREADS",
    "QuotaUnmask",
    "ThresholdUnmask",
    "masked_count_quota",
    "quota_schedule",
    "rank_descending",
    "select_unmask",
]
