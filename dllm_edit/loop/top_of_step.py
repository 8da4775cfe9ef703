"""The top of each step: the block-end rule per row (post steps, the step cap), the rows that leave
the forward batch, and the loop's one read of the device per step (`top_of_step`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from dllm_edit.layout import CanvasLayout
from dllm_edit.special_tokens import SpecialTokens

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.run import DecodeLoop


class StepTop(NamedTuple):
    """The span at the top of a step."""

    tokens: torch.Tensor  # [B, S] the span's tokens (a copy)
    masked: torch.Tensor  # [B, S] its masks inside the block


def top_of_step(run: DecodeLoop, canvas: torch.Tensor, blk: BlockState) -> StepTop | None:
    """The block-end rule per row (post steps, cap), rows leaving the forward batch, and the one
    read of the device per step. Returns the span's tokens and masks, or None when no row of the
    block is still active.

    Raises:
        ValueError: the previous step's candidates held NaN/inf (`nonfinite_error`).
    """
    bl, special = run.layout.block_length, run.special
    old = canvas[:, blk.span].clone()  # [B, S]
    masked = (old == special.mask) & blk.in_block  # [B, S]
    blk.mask_free = ~masked.any(-1)  # [B]
    blk.post_steps = blk.post_steps + (blk.mask_free & blk.active)
    blk.active = blk.active & (blk.post_steps <= run.config.max_post_steps)
    if run.cap is not None:
        blk.active = blk.active & (blk.steps < run.cap)
    # rows whose block has ended and that will not decode again (their own canvas ends here,
    # or the EOS stop will end them after this block) leave the forward batch now, not at
    # the next block: a row still editing then costs the batch only its own compute
    done = blk.last_block | run.finished  # [B]
    if blk.check_eos:
        done = done | eos_done(canvas, run.layout, (blk.block + 1) * bl, special)  # [B]
    leaving = blk.in_forward & ~blk.active & done  # [B]
    # the one read of the device per step
    any_active, any_bad, first_slot, any_leaving = torch.stack(
        [blk.active.any().long(), blk.bad.any().long(), blk.edited_slot, leaving.any().long()]
    ).tolist()
    if any_bad:
        raise nonfinite_error(blk.bad, blk.block, blk.step_number - 1)
    if first_slot < blk.w * bl:  # a window block was edited: its cached keys/values are stale
        run.session.invalidate_from(blk.block - blk.w + first_slot // bl)
    if not any_active:
        return None
    if any_leaving:  # at most once per row and block: one more read of the device
        blk.in_forward = blk.in_forward & ~leaving
        blk.rows = blk.in_forward.nonzero().flatten()  # [R']
        blk.all_rows = False
        run.session.select_rows(blk.rows)
    return StepTop(old, masked)


def eos_done(canvas: torch.Tensor, layout: CanvasLayout, end: int, special: SpecialTokens) -> torch.Tensor:
    """BoolTensor `[B]`: the completion up to slot `end` has no mask left and contains an EOS."""
    region = canvas[:, :end]  # [B, end]
    gen = layout.generated[:, :end]  # [B, end]
    no_mask = ~((region == special.mask) & gen).any(-1)  # [B]
    eos = special.eos_tensor(canvas.device)  # [E]
    has_eos = (torch.isin(region, eos) & gen).any(-1)  # [B]
    return no_mask & has_eos


def nonfinite_error(bad: torch.Tensor, block: int, step: int) -> ValueError:
    """The error for rows `bad` (BoolTensor `[B]`) whose candidate probability was NaN/inf: a NaN or
    +inf logit poisons the row's log-sum-exp, so this catches bad model output without another pass
    over `[B, S, V]`."""
    rows = bad.nonzero().flatten().tolist()
    return ValueError(
        f"NaN/inf logits at block {block}, step {step} (rows {rows}): the model returned NaN/inf "
        "(check the dtype, e.g. fp16 overflow: try bfloat16/float32, the weights and the attention "
        "backend), or a logits processor removed every token of a position."
    )
