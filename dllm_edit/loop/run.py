"""`DecodeLoop`: the block loop of one `generate` call, as its sequence of steps.

Per block: `start_block` (the layout of the block); per step: `top_of_step` (the block-end rule and
the one device read), `run_forward` (the adapter's forward and the candidates), `step_context`
(the statistics the rules declared), `decide` (the rules), `write_step` (commit, edit, remask; the
trace), then every registered `LoopAction` (finish, fill, ...; the trace records what they wrote);
after the block, `end_block` (the EOS stop).
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.layout import CanvasLayout
from dllm_edit.loop.actions import LoopAction, loop_actions
from dllm_edit.loop.block import BlockState, start_block
from dllm_edit.loop.decide import decide
from dllm_edit.loop.forward import run_forward
from dllm_edit.loop.statistics import step_context
from dllm_edit.loop.top_of_step import eos_done, top_of_step
from dllm_edit.loop.trace import record_actions
from dllm_edit.loop.write import write_step
from dllm_edit.output import StepRecord
from dllm_edit.proposer import Proposer
from dllm_edit.run_checks import RunPlan
from dllm_edit.special_tokens import SpecialTokens
from dllm_edit.strategies import Strategy
from dllm_edit.streaming import StreamBridge


class DecodeLoop:
    """The block loop of one `generate` call and the state its steps share (the counters per row,
    the rows finished, the histories that cross blocks, the trace)."""

    def __init__(
        self,
        session: Any,
        config: EditGenerationConfig,
        strategies: list[Strategy],
        layout: CanvasLayout,
        special: SpecialTokens,
        stream: StreamBridge,
        propose: Proposer,
        generator: torch.Generator | None,
        plan: RunPlan,
    ) -> None:
        self.session, self.config, self.strategies, self.layout = session, config, strategies, layout
        self.special, self.stream, self.propose, self.generator, self.plan = (
            special,
            stream,
            propose,
            generator,
            plan,
        )
        self.cap = config.steps_cap()
        self.eos_stop = bool(config.eos_early_stop and special.eos)
        self.keeps_previous = "kl" in propose.stats
        # histories across blocks (`Needs.across_blocks`): each such strategy's state, per row, and
        # the previous forward's distribution behind "kl" over the span and the next block
        self.carries = [s.needs.across_blocks for s in strategies]
        self.states: list[Any] = [{} for _ in strategies]
        kl_across = self.keeps_previous and plan.needs.across_blocks
        self.sees_ahead = kl_across and bool(getattr(session, "sees_ahead", False))
        self.last_kept: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, S, V], [B, S])
        self.ahead_kept: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, bl, V], [B, bl])
        self.saw_ahead: torch.Tensor | None = None  # [B]
        # the forward over the whole completion (`Needs.whole_canvas`): slots [view.start, T)
        self.whole = plan.needs.whole_canvas
        self.view = slice(layout.first_block * layout.block_length, layout.canvas_length)
        # with "kl" over the view: the previous forward's distribution there, and the rows that had one
        self.view_kept: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, C, V], [B, C])
        self.view_seen: torch.Tensor | None = None  # [B]
        self.actions: list[LoopAction] = [cls() for cls in loop_actions() if cls.enabled(self)]

    def run(self, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[StepRecord] | None]:
        """Decode every block into `canvas` (in place); returns (num_forwards, num_edits, trace)."""
        layout, batch, device = self.layout, canvas.shape[0], canvas.device
        self.num_forwards = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.num_edits = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)  # [B] stopped at EOS
        self.trace: list[StepRecord] | None = [] if self.config.output_trace else None
        decoding = layout.decodes.any(0).tolist() if layout.decodes is not None else None  # [N], once
        for block in range(layout.start_block, layout.num_blocks):
            if decoding is not None and not decoding[block]:  # a prompt block without masks
                continue
            blk = start_block(self, canvas, block)
            while (top := top_of_step(self, canvas, blk)) is not None:
                proposal = run_forward(self, canvas, blk, top.tokens)
                decision = decide(self, step_context(self, blk, top, proposal), blk)
                write_step(self, canvas, blk, top, decision, proposal.cand.prob)
                before = canvas.clone() if self.trace is not None and self.actions else None  # [B, T]
                for action in self.actions:
                    action.apply(self, canvas, blk, decision, proposal)
                if before is not None and self.trace is not None:
                    record_actions(self.trace, before, canvas)
            if self.end_block(canvas, blk):
                break
        self.stream.confirm(canvas, layout.canvas_length)
        return self.num_forwards, self.num_edits, self.trace

    def end_block(self, canvas: torch.Tensor, blk: BlockState) -> bool:
        """The EOS stop per row after the block; True when no row decodes another block."""
        layout, bl = self.layout, self.layout.block_length
        if self.eos_stop:
            self.finished = self.finished | (
                eos_done(canvas, layout, (blk.block + 1) * bl, self.special) & layout.rows_in_block(blk.block)
            )
        self.stream.confirm(
            canvas, (blk.block + 1 - self.plan.needs.window) * bl
        )  # window blocks may still be edited
        self.states = blk.states
        return bool((self.finished | ~layout.rows_in_block(blk.block + 1)).all())
