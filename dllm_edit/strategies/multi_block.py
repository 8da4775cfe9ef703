"""Multi-Block Editing (MBE): T2T edits in the last few finished blocks, seen from the new block.

LLaDA2.1 describes MBE in two sentences ("revisit and revise previously generated blocks based on
the content of newly decoded blocks") and publishes no reference. dllm_edit defines it as follows:

* The *window* is the last `window` finished generated blocks before the active block.
* At every step of the active block, the model also reads the window through a *review copy*: the
  window's tokens appended once more to the model input, with the same position ids, whose queries
  attend to everything up to and including the active block (so they see the new content). The
  active block and the original window keys keep the block-causal attention the model was trained
  with, so single-block decoding of the active block is unchanged by the review copy.
* A window position is rewritten when its review-copy candidate differs from the current token
  with `p > threshold` (the T2T rule of equation 2). Window edits count as edits for the
  block-end rule (a block whose masks are all filled continues while edits happen, up to
  `max_post_steps`).
* KV-cache entries from the earliest edited block onward are invalidated and recomputed at the
  next step.

It is off by default (`multi_block_edit=False` in the config).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .edit import select_edits
from .needs import Needs
from .schedules import Schedule
from .selection import at_step


@dataclass(frozen=True)
class MultiBlockEdit(Strategy):
    """T2T editing of the last `window` finished blocks, conditioned on the active block.

    Args:
        window: number of finished blocks before the active one that may be edited (>= 1).
        threshold: τ for window edits (float in [0, 1] or `Schedule`).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import MultiBlockEdit, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[5, 6, 0]]), masked=torch.tensor([[False, False, True]]),
        ...     editable=torch.tensor([[True, True, False]]),
        ...     in_block=torch.tensor([False, False, True]),
        ...     cand_tokens=torch.tensor([[4, 6, 2]]), cand_probs=torch.tensor([[0.95, 0.9, 0.9]]),
        ...     step=torch.tensor([0]), block_index=1, active=torch.tensor([True]))
        >>> MultiBlockEdit(window=1, threshold=0.9).step(ctx).edit.tolist()
        [[True, False, False]]
    """

    window: int = 1
    threshold: float | Schedule = 0.9

    def __post_init__(self) -> None:
        fields.positive_int("MultiBlockEdit", "window", self.window, "config: `multi_block_window`")
        object.__setattr__(self, "threshold", fields.threshold_field("multi_block_threshold", self.threshold))

    def requires(self) -> Needs:
        return Needs(window=self.window)

    def step(self, ctx: StepContext) -> StepResult:
        edit = select_edits(ctx, ~ctx.in_block, at_step(self.threshold, ctx))  # [B, S]
        return StepResult(commit=torch.zeros_like(edit), edit=edit, tokens=ctx.cand_tokens)
