"""The finish action: rows a rule finishes (`StepResult.finish`) have every mask left in their
completion filled (`fill`, or the step's candidate there from the whole-canvas view) and are frozen
for the rest of the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dllm_edit.loop.actions import LoopAction, register_loop_action

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.decide import Decision
    from dllm_edit.loop.forward import Proposal
    from dllm_edit.loop.run import DecodeLoop


@register_loop_action
class FinishRows(LoopAction):
    """Finish the rows the rules finished at this step (see the module docstring)."""

    name = "finish"
    order = 10  # before the EOS fill: a finished row is frozen first

    def apply(
        self, run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, decision: Decision, proposal: Proposal
    ) -> None:
        if decision.finish is None or decision.fill is None:
            return
        finish, fill, view = decision.finish, decision.fill, proposal.view  # [B], [B]
        left = (canvas == run.special.mask) & run.layout.generated & finish[:, None]  # [B, T]
        tokens = fill[:, None].expand_as(canvas)  # [B, T]
        if view is not None:
            cands = canvas.clone()  # [B, T]
            cands[:, run.view] = view.cand_tokens
            tokens = torch.where(fill[:, None] >= 0, tokens, cands)  # [B, T]
        canvas.copy_(torch.where(left, tokens, canvas))
        run.finished = run.finished | finish
        blk.active = blk.active & ~finish
