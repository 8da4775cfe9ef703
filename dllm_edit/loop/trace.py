"""The decoding trace: one `StepRecord` per step (what `output_trace=True` returns, and what the
replay page and `dllm_edit.replay` read)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from dllm_edit.output import StepRecord

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.decide import Decision
    from dllm_edit.loop.top_of_step import StepTop


def record_step(
    canvas: torch.Tensor, blk: BlockState, top: StepTop, decision: Decision, probs: torch.Tensor
) -> StepRecord:
    """The step just written into `canvas` (`[B, T]`), its span's before and after, on the CPU."""
    return StepRecord(
        block=blk.block,
        span_start=blk.span.start,
        active=blk.active.cpu(),
        masked=top.masked.cpu(),
        commit=decision.commit.cpu(),
        edit=decision.edit.cpu(),
        before=top.tokens.cpu(),
        after=canvas[:, blk.span].clone().cpu(),
        probs=probs.cpu(),
    )


def record_actions(trace: list[StepRecord], before: torch.Tensor, canvas: torch.Tensor) -> None:
    """Add to the step's record (the last of `trace`) the slots the loop actions wrote after the
    rules' update: `before` is the canvas before the actions, `canvas` after them (`[B, T]` each).
    One read of the device, only in traced runs where an action takes part."""
    changed = canvas != before  # [B, T]
    if not bool(changed.any()):
        return
    trace[-1] = dataclasses.replace(trace[-1], filled=changed.cpu(), filled_tokens=canvas.cpu())
