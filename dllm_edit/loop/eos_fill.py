"""The `eos_fill` action: in each active row whose completion holds an EOS, every mask after its
first EOS becomes EOS; a row left with no mask is finished (frozen for the rest of the run)."""

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
class EosFill(LoopAction):
    """Fill after the first EOS (`EditGenerationConfig.eos_fill`; see the module docstring)."""

    name = "eos_fill"
    order = 20

    @classmethod
    def enabled(cls, run: DecodeLoop) -> bool:
        return bool(run.config.eos_fill and run.special.eos)

    def apply(
        self, run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, decision: Decision, proposal: Proposal
    ) -> None:
        generated = run.layout.generated  # [B, T]
        eos = run.special.eos_tensor(canvas.device)  # [E]
        is_eos = torch.isin(canvas, eos) & generated  # [B, T]
        after = (is_eos.long().cumsum(-1) > 0) & (canvas == run.special.mask) & generated  # [B, T]
        after = after & blk.active[:, None]
        canvas.copy_(torch.where(after, eos[0], canvas))
        left = ((canvas == run.special.mask) & generated).any(-1)  # [B]
        done = blk.active & is_eos.any(-1) & ~left  # [B]
        run.finished = run.finished | done
        blk.active = blk.active & ~done
