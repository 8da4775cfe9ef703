"""Selection helpers shared by the decoding rules: which slots, ranked how, how many.

Every rule of the zoo picks among the masked slots of the active block (`masked_in_block`), ranks
them by some confidence (`confidence`, one of `CONFIDENCE_KINDS`) and takes the top `k`
(`top_k_masked`) with one tie rule (`rank_descending`: exact ties go to the lower slot), `k` often
being LLaDA-1's quota (`llada_quota`). A new rule is mostly a new way of choosing `k` or the
scores; these helpers are the rest.

Examples:
    >>> import torch
    >>> scores = torch.tensor([[0.2, 0.9, 0.9, 0.5]])
    >>> masked = torch.tensor([[True, True, True, False]])
    >>> top_k_masked(scores, masked, torch.tensor([2])).tolist()  # the tie at 0.9: both, lower first
    [[False, True, True, False]]
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.kernels import StatName

from .base import StepContext
from .schedules import Schedule, as_schedule

#: How confident the model is at a slot, larger meaning safer to commit: the candidate's
#: probability, the top-1/top-2 probability margin, or minus the entropy.
CONFIDENCE_KINDS = ("confidence", "margin", "entropy")

_KIND_STATS: dict[str, frozenset[StatName]] = {
    "confidence": frozenset(),
    "margin": frozenset({"top_prob", "second_prob"}),
    "entropy": frozenset({"entropy"}),
}


def masked_in_block(ctx: StepContext) -> torch.Tensor:
    """BoolTensor `[B, S]`: the masks of the active block (the slots an unmasking rule fills)."""
    return ctx.masked & ctx.in_block  # [B, S]


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

    Examples:
        >>> import torch
        >>> rank_descending(torch.tensor([[0.5, 0.9, 0.5]])).tolist()
        [[1, 0, 2]]
    """
    order = torch.argsort(scores, dim=-1, descending=True, stable=True)  # [B, S]
    positions = torch.arange(scores.shape[-1], device=scores.device).expand_as(order)  # [B, S]
    return torch.empty_like(order).scatter_(-1, order, positions)  # [B, S]


def masked_ranks(scores: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """LongTensor `[B, S]`: each slot's rank among the `masked` slots by `scores` (0 = the best,
    ties to the lower slot); slots outside `masked` rank after every masked one."""
    return rank_descending(torch.where(masked, scores, torch.full_like(scores, -float("inf"))))  # [B, S]


def top_k_masked(scores: torch.Tensor, masked: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """BoolTensor `[B, S]`: the `k` masked slots of each row with the largest `scores`.

    Args:
        scores: FloatTensor `[B, S]`, larger is taken first; ties go to the lower slot.
        masked: BoolTensor `[B, S]`, the slots that may be taken.
        k: LongTensor `[B]`, how many per row (more than the masks: all of them).
    """
    return masked & (masked_ranks(scores, masked) < k[:, None])  # [B, S]


def confidence(ctx: StepContext, kind: str) -> torch.Tensor:
    """FloatTensor `[B, S]`: the confidence `kind` (`CONFIDENCE_KINDS`) at each slot.

    `"confidence"`: the candidate's probability; `"margin"`: top-1 minus top-2 probability (the
    statistics `"top_prob"` / `"second_prob"`); `"entropy"`: minus the entropy. Declare
    `confidence_stats(kind)` in the rule's `Needs`.
    """
    if kind == "margin":
        return ctx.stat("top_prob") - ctx.stat("second_prob")  # [B, S]
    if kind == "entropy":
        return -ctx.stat("entropy")  # [B, S]
    if kind == "confidence":
        return ctx.cand_probs  # [B, S]
    raise ValueError(f"unknown confidence kind {kind!r}; choose among {list(CONFIDENCE_KINDS)}.")


def confidence_stats(kind: str) -> frozenset[StatName]:
    """The statistics `confidence(ctx, kind)` reads."""
    return _KIND_STATS[kind]


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


def llada_quota(ctx: StepContext, steps: int | None, minimum: int = 1) -> torch.Tensor:
    """LongTensor `[B]`: how many masks a step of LLaDA-1's schedule fills.

    `steps=None`: one per step. Otherwise `masked_count_quota` of the block's masks at its first
    step over `steps` forwards (a step past the last counts as the last), at least `minimum`.
    """
    if steps is None:
        return torch.ones_like(ctx.step)  # [B]
    quota = masked_count_quota(ctx.block_masked, ctx.step.clamp(max=steps - 1), steps)  # [B]
    return quota.clamp_min(minimum) if minimum > 0 else quota  # [B]


def at_step(threshold: Any, ctx: StepContext) -> torch.Tensor:
    """FloatTensor `[B]`: a threshold field's value at each row's step (a float is a `Constant`)."""
    schedule: Schedule = threshold if isinstance(threshold, Schedule) else as_schedule(threshold)
    return schedule(ctx.step, ctx.block_index)  # [B]


__all__ = [
    "CONFIDENCE_KINDS",
    "at_step",
    "confidence",
    "confidence_stats",
    "llada_quota",
    "masked_count_quota",
    "masked_in_block",
    "masked_ranks",
    "rank_descending",
    "top_k_masked",
]
