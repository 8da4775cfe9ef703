"""Mask-to-Token (M2T) strategies: which masked positions to fill at a step (the set Γ)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from .base import StepContext, StepResult, Strategy, threshold_field
from .schedules import Schedule


def rank_descending(scores: torch.Tensor) -> torch.Tensor:
    """Rank of each entry along the last dim, 0 = largest; exact ties go to the lower index.

    The references select with `torch.topk`, whose order among exactly equal values is not
    specified: on CPU it changes with the row length and `k` (for a row of equal values, top-1 of 4
    entries returns the last one and of 16 the first). No rule can match it on every tie, so
    dllm_edit takes the rule that is deterministic and independent of the batch (which batch ==
    alone needs): the lower position first, as a stable descending sort does. With candidate
    probabilities computed as `softmax` then gather (see `dllm_edit.kernels.candidates`), exact ties
    need probabilities equal to float32 resolution (e.g. two near-1 values closer than 6e-8).

    Args:
        scores: FloatTensor `[B, S]`.

    Returns:
        LongTensor `[B, S]`.
    """
    order = torch.argsort(scores, dim=-1, descending=True, stable=True)  # [B, S]
    positions = torch.arange(scores.shape[-1], device=scores.device).expand_as(order)  # [B, S]
    return torch.empty_like(order).scatter_(-1, order, positions)  # [B, S]


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
    k = torch.minimum(quota, masked.sum(-1))  # [B]
    scores = torch.where(masked, probs, torch.full_like(probs, -float("inf")))  # [B, S]
    top = masked & (rank_descending(scores) < k[:, None])  # [B, S]
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
        object.__setattr__(self, "threshold", threshold_field("threshold", self.threshold))
        if isinstance(self.num_to_transfer, bool) or not isinstance(self.num_to_transfer, int):
            raise TypeError(f"`num_to_transfer` must be an int >= 1, got {self.num_to_transfer!r}.")
        if self.num_to_transfer < 1:
            raise ValueError(
                "`num_to_transfer` must be >= 1 (each step must unmask something), "
                f"got {self.num_to_transfer}."
            )

    def step(self, ctx: StepContext) -> StepResult:
        tau = cast(Schedule, self.threshold)(ctx.step, ctx.block_index)  # [B]; a Schedule by now
        quota = torch.full_like(ctx.step, self.num_to_transfer)  # [B]
        masked = ctx.masked & ctx.in_block  # [B, S]
        commit = select_unmask(ctx.cand_probs, masked, tau, quota)  # [B, S]
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)


def masked_count_quota(block_masked: torch.Tensor, step: torch.Tensor, steps: int) -> torch.Tensor:
    """LLaDA-1's quota (`get_num_transfer_tokens`): the block's masked count spread over `steps`.

    Step `j` of a block that started with `n` masks unmasks `n // steps`, plus one for the first
    `n % steps` steps, so the quotas sum to `n`.

    Args:
        block_masked: LongTensor `[B]`, masks in the block at its first step (`n`).
        step: LongTensor `[B]`, the step within the block (`j`, from 0).
        steps: steps per block.

    Returns:
        LongTensor `[B]`.

    Examples:
        >>> import torch
        >>> masked_count_quota(torch.tensor([10, 10, 3]), torch.tensor([0, 3, 2]), 4).tolist()
        [3, 2, 1]
    """
    base = block_masked // steps  # [B]
    return base + (step < block_masked % steps).long()  # [B]


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
        for name in ("steps", "block_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
        if self.steps > self.block_length:
            raise ValueError(
                f"`steps` ({self.steps}) must be <= `block_length` ({self.block_length}): "
                "each step unmasks at least one token."
            )
        object.__setattr__(self, "threshold", threshold_field("threshold", self.threshold))
        if self.spread not in QUOTA_SPREADS:
            raise ValueError(
                f"`spread` must be one of {list(QUOTA_SPREADS)} (LLaDA2.0's rule or LLaDA-1's), "
                f"got {self.spread!r}."
            )

    @property
    def quota(self) -> tuple[int, ...]:
        """The per-step quota of a block of `block_length` masks (either rule gives this then)."""
        return tuple(quota_schedule(self.block_length, self.steps))

    def step(self, ctx: StepContext) -> StepResult:
        step = ctx.step.clamp(max=self.steps - 1)  # [B]
        if self.spread == "masked_count":
            if ctx.block_masked is None:
                raise ValueError(
                    "QuotaUnmask(spread='masked_count') needs `StepContext.block_masked` (the masks of "
                    "the block at its first step); the decoding loop sets it."
                )
            quota = masked_count_quota(ctx.block_masked, step, self.steps)  # [B]
        else:
            table = torch.tensor(self.quota, device=ctx.step.device)  # [steps]
            quota = table[step]  # [B]
        tau = cast(Schedule, self.threshold)(ctx.step, ctx.block_index)  # [B]; a Schedule by now
        masked = ctx.masked & ctx.in_block  # [B, S]
        commit = select_unmask(ctx.cand_probs, masked, tau, quota)  # [B, S]
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)
