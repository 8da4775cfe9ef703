"""The canvas: where every row's prompt and completion live, and how rows of a batch line up.

Blocks are aligned to absolute position 0 of each sequence (SPEC-decoding.md, "Canvas and blocks").
To decode a batch of prompts of different lengths in lockstep, row `i` is shifted right by a whole
number of blocks, `offset_i = (b_max - b_i) * block_length` with `b_i = P_i // block_length`, so
that every row's first decoding block (the one holding its prompt tail) is the same global block
`b_max`. Positions before `offset_i` are padding: no query attends to them and position ids are
counted from `offset_i`, so each row sees exactly the canvas it would see alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CanvasLayout:
    """Geometry of a batched canvas.

    Attributes:
        block_length: tokens per block.
        max_new_tokens: `G`.
        prompt_lengths: LongTensor `[B]`, `P_i` (padding excluded).
        offsets: LongTensor `[B]`, canvas index of each row's first prompt token.
        first_block: global index of the first block decoded (holds the longest prompt tail).
        num_blocks: total global blocks of the canvas.
        row_end_block: LongTensor `[B]`, global index one past each row's last block.
        position_ids: LongTensor `[B, T]`, the position id of every canvas slot.
        key_valid: BoolTensor `[B, T]`, slots that are not padding.
        generated: BoolTensor `[B, T]`, slots of the completion (not prompt, not padding).
        output_index: LongTensor `[B, G]`, canvas index of each returned completion token.
    """

    block_length: int
    max_new_tokens: int
    prompt_lengths: torch.Tensor
    offsets: torch.Tensor
    first_block: int
    num_blocks: int
    row_end_block: torch.Tensor
    position_ids: torch.Tensor
    key_valid: torch.Tensor
    generated: torch.Tensor
    output_index: torch.Tensor

    @property
    def canvas_length(self) -> int:
        return self.num_blocks * self.block_length

    @property
    def max_position(self) -> int:
        """Largest position id any row uses."""
        return int((self.row_end_block * self.block_length - self.offsets).max()) - 1

    def rows_in_block(self, block: int) -> torch.Tensor:
        """BoolTensor `[B]`: rows for which global `block` is part of their own canvas."""
        return self.row_end_block > block


def build_canvas(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    block_length: int,
    max_new_tokens: int,
    mask_token_id: int,
    pad_token_id: int,
) -> tuple[CanvasLayout, torch.Tensor]:
    """Lay out left-padded prompts on a block-aligned canvas filled with the mask token.

    Args:
        input_ids: LongTensor `[B, W]`, left-padded prompts.
        attention_mask: `[B, W]`, 1 on prompt tokens (a suffix of each row), 0 on left padding.
        block_length: tokens per block.
        max_new_tokens: `G`.
        mask_token_id: fills the completion slots.
        pad_token_id: fills the padding slots (never attended to).

    Returns:
        `(layout, canvas)` with `canvas` a LongTensor `[B, T]`.
    """
    device = input_ids.device
    batch, width = input_ids.shape
    bl = block_length
    lengths = attention_mask.sum(-1).to(torch.long)  # [B]
    first_blocks = lengths // bl  # [B]
    first_block = int(first_blocks.max())
    offsets = (first_block - first_blocks) * bl  # [B]
    ends = lengths + max_new_tokens  # [B] per-row P + G
    row_blocks = (ends + bl - 1) // bl - first_blocks  # [B] blocks decoded by each row
    row_end_block = first_block + row_blocks  # [B]
    num_blocks = int(row_end_block.max())
    total = num_blocks * bl

    slots = torch.arange(total, device=device)  # [T]
    rel = slots[None, :] - offsets[:, None]  # [B, T] position within the row's own canvas
    key_valid = rel >= 0  # [B, T]
    position_ids = rel.clamp_min(0)  # [B, T]
    generated = rel >= lengths[:, None]  # [B, T]

    canvas = torch.full((batch, total), mask_token_id, dtype=torch.long, device=device)  # [B, T]
    canvas[~key_valid] = pad_token_id
    # prompt token j of row i (j < P_i) sits at input column W - P_i + j and canvas slot offset_i + j
    cols = torch.arange(width, device=device)  # [W]
    src_valid = attention_mask.bool()  # [B, W]
    dest = offsets[:, None] + cols[None, :] - (width - lengths[:, None])  # [B, W]
    rows = torch.arange(batch, device=device)[:, None].expand(batch, width)  # [B, W]
    canvas[rows[src_valid], dest[src_valid]] = input_ids[src_valid]

    output_index = offsets[:, None] + lengths[:, None] + torch.arange(max_new_tokens, device=device)  # [B, G]
    layout = CanvasLayout(
        block_length=bl,
        max_new_tokens=max_new_tokens,
        prompt_lengths=lengths,
        offsets=offsets,
        first_block=first_block,
        num_blocks=num_blocks,
        row_end_block=row_end_block,
        position_ids=position_ids,
        key_valid=key_valid,
        generated=generated,
        output_index=output_index,
    )
    return layout, canvas
