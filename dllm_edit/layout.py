"""The canvas: where every row's prompt and completion live, and how rows of a batch line up.

Two block origins exist (docs/concepts/canvas.md draws both):

* `"absolute"` (LLaDA2.x, SPEC-decoding.md "Canvas and blocks"): block `k` of a row is its
  positions `[k*bl, (k+1)*bl)`, so the first decoding block may hold the prompt's tail, and a row's
  canvas is `P + G` rounded up to whole blocks. To decode prompts of different lengths in lockstep,
  row `i` is shifted right by a whole number of blocks, `offset_i = (b_max - b_i) * bl` with
  `b_i = P_i // bl`, so that every row's first decoding block is the same global block `b_max`.
* `"prompt_end"` (LLaDA-1, Dream, SPEC-decoding.md "LLaDA (v1, 8B) behaviour"): block `k` of a row
  is `[P + k*bl, P + (k+1)*bl)` and the row's canvas is exactly `P + G` (the last block is shorter
  when `bl` does not divide `G`). Row `i` is shifted right by `offset_i = ceil(P_max / bl) * bl -
  P_i`, so that every prompt ends at the same block boundary of the shared canvas.

Either way the global canvas is cut into blocks at multiples of `bl`, the decoding loop and the
adapters never need to know which origin was chosen, and each row owns the slots
`[offset_i, row_end_i)`. Slots outside that range are padding: they hold the pad token, no query
attends to them, and position ids are counted from `offset_i`, so each row sees exactly the canvas
it would see alone (also a row that needs fewer blocks than others: the trailing blocks of the
shared canvas are not part of its canvas).

Masks in the prompt (infilling, docs/how-to/infilling.md) are decoded too: a prompt slot holding the
mask token is a *decoded* slot like a completion slot (`decoded`), and the blocks that hold such
slots are decoded in canvas order before the completion's blocks (`first_decoded_block`), each
row only in the blocks that hold slots it decodes (`decodes`). Block boundaries do not move, so a
row's blocks are the same alone and in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

BlockStart = Literal["absolute", "prompt_end"]
BLOCK_STARTS: tuple[str, ...] = ("absolute", "prompt_end")


@dataclass(frozen=True)
class CanvasLayout:
    """Geometry of a batched canvas.

    Attributes:
        block_length: tokens per block.
        max_new_tokens: `G`.
        prompt_lengths: LongTensor `[B]`, `P_i` (padding excluded).
        offsets: LongTensor `[B]`, canvas index of each row's first prompt token.
        first_block: global index of the first block decoded.
        num_blocks: total global blocks of the canvas.
        row_end_block: LongTensor `[B]`, global index one past each row's last block.
        row_end: LongTensor `[B]`, canvas slot one past the end of each row's own canvas.
        position_ids: LongTensor `[B, T]`, the position id of every canvas slot (0 on padding).
        key_valid: BoolTensor `[B, T]`, the slots of each row's own canvas (not padding).
        generated: BoolTensor `[B, T]`, slots of the completion (not prompt, not padding).
        output_index: LongTensor `[B, G]`, canvas index of each returned completion token.
        block_start: where blocks start, `"absolute"` or `"prompt_end"`.
        decoded: BoolTensor `[B, T]`, slots the decoder writes: the completion and the masks of the
            prompt (the only slots T2T may rewrite); None: `generated`.
        prompt_index: LongTensor `[B, W]`, canvas slot of each input column (0 on left padding).
        first_decoded_block: the first block holding a decoded slot (`first_block`, or earlier when a
            prompt holds masks); None: `first_block`.
        decodes: BoolTensor `[B, num_blocks]`, the blocks in which each row decodes; None: the
            blocks from `first_block` up to the row's end.
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
    row_end: torch.Tensor
    block_start: str = "absolute"
    decoded: torch.Tensor | None = None
    prompt_index: torch.Tensor | None = None
    first_decoded_block: int | None = None
    decodes: torch.Tensor | None = None

    @property
    def start_block(self) -> int:
        """The first block the loop decodes (`first_decoded_block`, else `first_block`)."""
        return self.first_block if self.first_decoded_block is None else self.first_decoded_block

    @property
    def decoded_slots(self) -> torch.Tensor:
        """BoolTensor `[B, T]`: the slots the decoder writes (`decoded`, else `generated`)."""
        return self.generated if self.decoded is None else self.decoded

    def rows_decoding(self, block: int) -> torch.Tensor:
        """BoolTensor `[B]`: rows that decode slots in global `block`."""
        if self.decodes is None:
            return self.rows_in_block(block) & (block >= self.first_block)
        return self.decodes[:, block]

    def lead(self, rows: torch.Tensor) -> int:
        """First canvas slot a forward over `rows` must cover: their smallest offset, or the start of
        the first decoded block when a prompt's mask lies before it (slots before it are padding in
        every one of `rows`)."""
        return min(int(self.offsets[rows].min()), self.start_block * self.block_length)

    @property
    def canvas_length(self) -> int:
        return self.num_blocks * self.block_length

    @property
    def max_position(self) -> int:
        """Largest position id any row uses."""
        return int((self.row_end - self.offsets).max()) - 1

    def rows_in_block(self, block: int) -> torch.Tensor:
        """BoolTensor `[B]`: rows for which global `block` is part of their own canvas."""
        return self.row_end_block > block


def _row_offsets(
    lengths: torch.Tensor, ends: torch.Tensor, bl: int, block_start: str
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Where each row sits on the canvas under `block_start`.

    Args:
        lengths: LongTensor `[B]`, the prompt lengths `P`.
        ends: LongTensor `[B]`, `P + G`.
        bl: the block length.
        block_start: `"absolute"` or `"prompt_end"`.

    Returns:
        `(first_block, offsets [B], own_length [B])`: the block holding the prompts' ends, each row's
        first slot on the canvas, and the length of its own canvas.
    """
    if block_start == "absolute":
        first_blocks = lengths // bl  # [B] block holding each row's prompt tail
        first_block = int(first_blocks.max())
        offsets = (first_block - first_blocks) * bl  # [B]
        own_length = (ends + bl - 1) // bl * bl  # [B] P + G rounded up to whole blocks
    else:
        first_block = (int(lengths.max()) + bl - 1) // bl  # every prompt ends at this block boundary
        offsets = first_block * bl - lengths  # [B]
        own_length = ends  # [B] exactly P + G
    return first_block, offsets, own_length


def build_canvas(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    block_length: int,
    max_new_tokens: int,
    mask_token_id: int,
    pad_token_id: int,
    block_start: str = "absolute",
) -> tuple[CanvasLayout, torch.Tensor]:
    """Lay out left-padded prompts on a block-aligned canvas filled with the mask token.

    Args:
        input_ids: LongTensor `[B, W]`, left-padded prompts.
        attention_mask: `[B, W]`, 1 on prompt tokens (a suffix of each row), 0 on left padding.
        block_length: tokens per block.
        max_new_tokens: `G`.
        mask_token_id: fills the completion slots.
        pad_token_id: fills the padding slots (never attended to).
        block_start: `"absolute"` (blocks at multiples of `block_length` from each row's position 0)
            or `"prompt_end"` (the first block starts right after each row's prompt).

    Returns:
        `(layout, canvas)` with `canvas` a LongTensor `[B, T]`. Prompt slots holding
        `mask_token_id` are decoded (`layout.decoded`), in the blocks that hold them.

    Raises:
        ValueError: an unknown `block_start`.

    Examples:
        >>> import torch
        >>> ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
        >>> mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
        >>> layout, canvas = build_canvas(ids, mask, 2, 4, mask_token_id=99, pad_token_id=0)
        >>> canvas.tolist()  # absolute: row 0's prompt tail shares a block; row 1 needs a block fewer
        [[0, 0, 5, 6, 7, 99, 99, 99, 99, 99], [8, 9, 10, 11, 99, 99, 99, 99, 0, 0]]
        >>> layout, canvas = build_canvas(ids, mask, 2, 4, 99, 0, block_start="prompt_end")
        >>> canvas.tolist()  # prompt_end: both prompts end at slot 4, a block boundary
        [[0, 5, 6, 7, 99, 99, 99, 99], [8, 9, 10, 11, 99, 99, 99, 99]]
        >>> layout, canvas = build_canvas(torch.tensor([[5, 99, 7, 8]]), torch.ones(1, 4), 2, 0, 99, 0)
        >>> layout.first_decoded_block, layout.decoded.long().tolist()  # infilling: a mask in the prompt
        (0, [[0, 1, 0, 0]])
    """
    if block_start not in BLOCK_STARTS:
        raise ValueError(f"`block_start` must be one of {list(BLOCK_STARTS)}, got {block_start!r}.")
    device = input_ids.device
    batch, width = input_ids.shape
    bl = block_length
    lengths = attention_mask.sum(-1).to(torch.long)  # [B]
    ends = lengths + max_new_tokens  # [B] per-row P + G
    first_block, offsets, own_length = _row_offsets(lengths, ends, bl, block_start)
    row_end = offsets + own_length  # [B]
    row_end_block = (row_end + bl - 1) // bl  # [B]
    num_blocks = int(row_end_block.max())
    total = num_blocks * bl

    slots = torch.arange(total, device=device)  # [T]
    rel = slots[None, :] - offsets[:, None]  # [B, T] position within the row's own canvas
    key_valid = (rel >= 0) & (slots[None, :] < row_end[:, None])  # [B, T]
    position_ids = torch.where(key_valid, rel, torch.zeros_like(rel))  # [B, T]
    generated = key_valid & (rel >= lengths[:, None])  # [B, T]

    canvas = torch.full((batch, total), mask_token_id, dtype=torch.long, device=device)  # [B, T]
    canvas[~key_valid] = pad_token_id
    # prompt token j of row i (j < P_i) sits at input column W - P_i + j and canvas slot offset_i + j
    cols = torch.arange(width, device=device)  # [W]
    src_valid = attention_mask.bool()  # [B, W]
    dest = offsets[:, None] + cols[None, :] - (width - lengths[:, None])  # [B, W]
    rows = torch.arange(batch, device=device)[:, None].expand(batch, width)  # [B, W]
    canvas[rows[src_valid], dest[src_valid]] = input_ids[src_valid]

    infill = key_valid & ~generated & (canvas == mask_token_id)  # [B, T] masks in the prompts
    decoded = generated | infill  # [B, T]
    blocks = torch.arange(num_blocks, device=device)  # [N]
    decodes = decoded.view(batch, num_blocks, bl).any(-1)  # [B, N] blocks holding slots each row decodes
    first_decoded = int(torch.where(decodes.any(0), blocks, num_blocks).min())  # one read, before decoding
    prompt_index = (dest * src_valid).clamp(0, total - 1)  # [B, W] 0 on left padding

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
        row_end=row_end,
        block_start=block_start,
        decoded=decoded,
        prompt_index=prompt_index,
        first_decoded_block=min(first_decoded, first_block),
        decodes=decodes,
    )
    return layout, canvas
