"""EOS extension of a response to the end of its block: the one rule both trainers train with.

Block decoding fills a whole block: after the answer ends, the rest of its block is EOS (or the
pad written after it). So training sequences extend each finished response with supervised EOS
tokens up to the next block boundary. `EditSFTTrainer` applies it to its tokenized examples,
`EBPOTrainer` to its rollouts (only those that ended with an EOS; truncated ones stay as they are).
"""

from __future__ import annotations

import torch


def extend_to_block_end(
    tokens: torch.Tensor,
    end: torch.Tensor,
    extend: torch.Tensor,
    eos_token_id: int | torch.Tensor,
    block_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Write EOS from each row's `end` to the end of that block, where `extend` is set.

    Args:
        tokens: LongTensor `[B, T]`, sequences whose tokens before `end` are real.
        end: LongTensor `[B]`, one past the last real token of each row.
        extend: BoolTensor `[B]`, rows to extend (a finished response).
        eos_token_id: the EOS id written.
        block_length: tokens per block (blocks start at position 0).

    Returns:
        `(tokens, tail, new_end)`: LongTensor `[B, W]` with `W = max(T, max(new_end))`, BoolTensor
        `[B, W]` marking the EOS written, LongTensor `[B]` (the block boundary where extended).

    Examples:
        >>> import torch
        >>> tokens = torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0]])
        >>> end, extend = torch.tensor([3, 2]), torch.tensor([True, False])
        >>> out, tail, end = extend_to_block_end(tokens, end, extend, 1, 2)
        >>> out.tolist(), end.tolist()
        ([[5, 6, 7, 1], [5, 6, 0, 0]], [4, 2])
    """
    new_end = torch.where(extend, -(-end // block_length) * block_length, end)  # [B]
    width = max(tokens.shape[1], int(new_end.max()) if new_end.numel() else 0)
    tokens = torch.nn.functional.pad(tokens, (0, width - tokens.shape[1]), value=0)  # [B, W]
    pos = torch.arange(width, device=tokens.device)[None]  # [1, W]
    tail = (pos >= end[:, None]) & (pos < new_end[:, None])  # [B, W]
    return torch.where(tail, torch.as_tensor(eos_token_id, device=tokens.device), tokens), tail, new_end
