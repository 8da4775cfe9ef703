"""Apply the rules' decision: the step's commits and edits (a remask is an edit to the mask) go into
the canvas, the streamer and the trace see them, and the forward, edit and step counters advance;
a row whose block holds no mask and that edited nothing stops decoding the block."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dllm_edit.loop.trace import record_step

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.decide import Decision
    from dllm_edit.loop.run import DecodeLoop
    from dllm_edit.loop.top_of_step import StepTop


def write_step(
    run: DecodeLoop,
    canvas: torch.Tensor,
    blk: BlockState,
    top: StepTop,
    decision: Decision,
    probs: torch.Tensor,
) -> None:
    """Write the step into the canvas (`[B, T]`, in place), stream and trace it, and count forwards
    and edits (`probs`: the candidates' probabilities `[B, S]`, for the trace)."""
    bl = run.layout.block_length
    old, commit, edit = top.tokens, decision.commit, decision.edit
    canvas[:, blk.span] = torch.where(commit | edit, decision.tokens, old)
    run.stream.step(canvas, blk.span, edit)
    if run.trace is not None:
        run.trace.append(record_step(canvas, blk, top, decision, probs))
    blk.steps = blk.steps + blk.active
    run.num_forwards = run.num_forwards + blk.active
    run.num_edits = run.num_edits + edit.sum(-1)
    edited_any = edit.any(-1)  # [B]
    if blk.w > 0:
        window_edits = edit[:, : blk.w * bl].any(0)  # [w*bl]
        # argmax of a bool row: its first True; no True: no_edit
        blk.edited_slot = torch.where(window_edits.any(), window_edits.long().argmax(), blk.no_edit)  # []
    assert blk.mask_free is not None  # set by top_of_step
    blk.active = blk.active & ~(blk.mask_free & ~edited_any)
    blk.step_number += 1
