"""Token-to-Token (T2T) editing: rewrite already-written tokens the model is confident are wrong."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .schedules import Schedule
from .selection import at_step


def select_edits(ctx: StepContext, region: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Δ of LLaDA2.1 equation 2 restricted to `region`.

    Args:
        ctx: the step context.
        region: BoolTensor `[S]` (or `[B, S]`), the positions this strategy may edit.
        threshold: FloatTensor `[B]`, τ_edit per row.

    Returns:
        BoolTensor `[B, S]`: editable, inside `region`, `p > threshold` (strict), and a token
        different from the current one.
    """
    confident = ctx.cand_probs > threshold[:, None]  # [B, S]
    changed = ctx.cand_tokens != ctx.tokens  # [B, S]
    return ctx.editable & region & confident & changed  # [B, S]


@dataclass(frozen=True)
class TokenEdit(Strategy):
    """T2T editing inside the active block (Δ, equation 2).

    A position written at an earlier step (not masked at the top of this step, not prompt) is
    rewritten with the candidate when `p > threshold` and the candidate differs. A token unmasked in
    this step is therefore never edited in the same step. `threshold=0.0` means "edit whenever the
    argmax differs" (the S-mode setting), not "off"; to switch editing off, leave this strategy out
    (`editing_threshold=None` in the config).

    Args:
        threshold: τ_edit, float in [0, 1] or a `Schedule`.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import StepContext, TokenEdit
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[5, 6]]), masked=torch.tensor([[False, False]]),
        ...     editable=torch.tensor([[True, True]]), in_block=torch.ones(2, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[5, 7]]), cand_probs=torch.tensor([[0.9, 0.8]]),
        ...     step=torch.tensor([1]), block_index=0, active=torch.tensor([True]))
        >>> TokenEdit(threshold=0.5).step(ctx).edit.tolist()
        [[False, True]]
    """

    threshold: float | Schedule = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", fields.threshold_field("editing_threshold", self.threshold))

    def step(self, ctx: StepContext) -> StepResult:
        edit = select_edits(ctx, ctx.in_block, at_step(self.threshold, ctx))  # [B, S]
        return StepResult(commit=torch.zeros_like(edit), edit=edit, tokens=ctx.cand_tokens)
