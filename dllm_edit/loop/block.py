"""Step 1 of the loop, the layout of one block: `start_block` opens a global block of the canvas
(its span with the window before it, the rows that decode it, their counters) as a `BlockState`.

The canvas itself (prompt, infill slots, blocks) is laid out once per call by
`dllm_edit.layout.build_canvas`; this step lays out each block on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from dllm_edit.loop.run import DecodeLoop


@dataclass
class BlockState:
    """What the loop tracks while one global block decodes (tensors are per row, `[B]` / `[B, S]`)."""

    block: int  # the global block
    block_index: int  # among the generated blocks
    w: int  # window blocks in the span
    span: slice  # its canvas slots
    in_block: torch.Tensor  # [S]
    generated: torch.Tensor  # [B, S] slots the decoder writes (completion and the prompt's masks)
    active: torch.Tensor  # [B] rows still decoding this block
    in_forward: torch.Tensor  # [B] rows the session's forwards compute
    rows: torch.Tensor  # [R] their indices
    all_rows: bool  # R == B: no gather / scatter of rows
    last_block: torch.Tensor  # [B] rows whose own canvas ends with this block
    check_eos: bool  # whether the EOS stop can take a row out of this block early
    block_masked: torch.Tensor  # [B] masks at the block's start
    positions: torch.Tensor  # [B, S] offsets from each completion's start
    post_steps: torch.Tensor  # [B]
    steps: torch.Tensor  # [B] forwards spent in the block
    bad: torch.Tensor  # [B] NaN/inf candidates at the last step
    no_edit: torch.Tensor  # [] "no window slot edited"
    edited_slot: torch.Tensor  # [] first window slot edited at the last step
    mask_free: torch.Tensor | None = None  # [B] no mask left in the block at the top of the step
    states: list[Any] = field(default_factory=list)  # each strategy's per-row state
    kept: tuple[torch.Tensor, torch.Tensor] | None = None  # previous step's ([B, S, V], [B, S]) for "kl"
    no_prev: torch.Tensor | None = None  # [B] rows without a previous forward at the block's first step
    saw_ahead: torch.Tensor | None = None  # [B] rows whose forwards kept the next block's distribution
    view_positions: torch.Tensor | None = None  # [B, C] offsets over the whole-canvas view
    step_number: int = 0


def start_block(run: DecodeLoop, canvas: torch.Tensor, block: int) -> BlockState:
    """Open global block `block` of `canvas` (`[B, T]`): its span, rows and counters."""
    layout, bl, device = run.layout, run.layout.block_length, canvas.device
    block_index = block - layout.first_block  # < 0: a block of the prompt holding masks (infilling)
    w = max(min(run.plan.needs.window, block_index), 0)  # window blocks actually available
    span = slice((block - w) * bl, (block + 1) * bl)
    in_block = torch.arange((w + 1) * bl, device=device) >= w * bl  # [S]
    active = layout.rows_decoding(block) & ~run.finished  # [B]
    rows = active.nonzero().flatten()  # [R] rows that still decode: the others leave the forward batch
    run.session.select_rows(rows)
    if not run.plan.needs.across_blocks:  # "kl" over the whole view compares within the block only
        run.view_kept = run.view_seen = None
    last_block = ~layout.rows_in_block(block + 1)  # [B]
    zeros = torch.zeros(canvas.shape[0], dtype=torch.long, device=device)  # [B]
    no_edit = torch.tensor(w * bl, device=device)  # []
    first_generated = layout.offsets + layout.prompt_lengths  # [B] canvas slot of each completion's start
    return BlockState(
        block=block,
        block_index=block_index,
        w=w,
        span=span,
        in_block=in_block,
        generated=layout.decoded_slots[:, span],
        active=active,
        in_forward=active.clone(),
        rows=rows,
        all_rows=rows.numel() == canvas.shape[0],
        last_block=last_block,
        # the EOS stop can only take a row out early if it has a later block: otherwise skip the scan
        check_eos=run.eos_stop and bool((active & ~last_block).any()),  # once per block
        block_masked=((canvas[:, span] == run.special.mask) & in_block).sum(-1),
        positions=torch.arange(span.start, span.stop, device=device) - first_generated[:, None],
        post_steps=zeros,
        steps=zeros,
        bad=torch.zeros(canvas.shape[0], dtype=torch.bool, device=device),
        no_edit=no_edit,
        edited_slot=no_edit,
        # reset per block, unless the strategy keeps its history across blocks
        states=[state if carry else {} for state, carry in zip(run.states, run.carries)],
        view_positions=(
            torch.arange(run.view.start, run.view.stop, device=device) - first_generated[:, None]
            if run.whole
            else None
        ),  # [B, C]
        **_carried_previous(run, w),
    )


def _carried_previous(run: DecodeLoop, w: int) -> dict[str, Any]:
    """With a "kl" history across blocks on an adapter that sees ahead: the previous forward's
    distribution over the new span (the window from the last span, the block from the slots
    ahead), and the rows that have none (no active forward in the previous block)."""
    if not run.sees_ahead or run.ahead_kept is None or run.last_kept is None:
        return {}
    bl = run.layout.block_length
    window = slice(run.last_kept[1].shape[1] - w * bl, None)  # the new window: the last span's end
    kept = (
        torch.cat([run.last_kept[0][:, window], run.ahead_kept[0]], dim=1),  # [B, S, V]
        torch.cat([run.last_kept[1][:, window], run.ahead_kept[1]], dim=1),  # [B, S]
    )
    assert run.saw_ahead is not None  # set with ahead_kept
    return dict(kept=kept, no_prev=~run.saw_ahead)
