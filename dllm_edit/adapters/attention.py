"""Attention masks for dLLM forwards, in the form each attention backend expects.

Every query of a forward is described by the canvas slot it reads (`q_slot`) and the last block it
may see (`q_sees`); every key by its canvas slot and whether it is part of a review copy (keys of
review copies are never attended to). Padding keys are hidden; a padding query attends to its own
slot only, so no softmax row is empty.
"""

from __future__ import annotations

import torch

_BOOLEAN_BACKENDS = ("sdpa", "flex_attention")


def allowed_matrix(
    q_slot: torch.Tensor,
    q_sees: torch.Tensor,
    k_slot: torch.Tensor,
    k_review: torch.Tensor,
    key_valid: torch.Tensor,
    block_length: int,
) -> torch.Tensor:
    """Which key each query may attend to.

    Args:
        q_slot: LongTensor `[Q]`, canvas slot of each query.
        q_sees: LongTensor `[Q]`, the last global block each query may attend to.
        k_slot: LongTensor `[K]`, canvas slot of each key.
        k_review: BoolTensor `[K]`, keys belonging to a review copy (never attended to).
        key_valid: BoolTensor `[B, T]`, non-padding canvas slots per row.
        block_length: tokens per block.

    Returns:
        BoolTensor `[B, Q, K]`.
    """
    k_block = k_slot // block_length  # [K]
    visible = (k_block[None, :] <= q_sees[:, None]) & ~k_review[None, :]  # [Q, K]
    self_key = (q_slot[:, None] == k_slot[None, :]) & ~k_review[None, :]  # [Q, K]
    return with_padding_rule(visible, key_valid[:, q_slot], key_valid[:, k_slot], self_key)  # [B, Q, K]


def with_padding_rule(
    visible: torch.Tensor, q_valid: torch.Tensor, k_valid: torch.Tensor, self_key: torch.Tensor
) -> torch.Tensor:
    """The padding rule every dLLM attention mask shares (decoding adapters and training forwards):
    padding keys are hidden, and a padding query also attends to its own slot, so no softmax row is empty.

    Args:
        visible: BoolTensor `[Q, K]` (or `[B, Q, K]`), the layout's rule (which key each query may see).
        q_valid: BoolTensor `[B, Q]`, non-padding queries.
        k_valid: BoolTensor `[B, K]`, non-padding keys.
        self_key: BoolTensor `[Q, K]`, the key holding each query's own slot.

    Returns:
        BoolTensor `[B, Q, K]`.

    Examples:
        >>> import torch
        >>> valid = torch.tensor([[False, True]])  # slot 0 is padding
        >>> eye = torch.eye(2, dtype=torch.bool)
        >>> with_padding_rule(torch.ones(2, 2, dtype=torch.bool), valid, valid, eye)[0].int().tolist()
        [[1, 1], [0, 1]]
    """
    allowed = visible & k_valid[:, None, :]  # [B, Q, K]
    return allowed | (~q_valid[:, :, None] & self_key)  # [B, Q, K]


def backend_mask(allowed: torch.Tensor, attn_implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
    """Turn an allowed-matrix `[B, Q, K]` into the 4-D mask `[B, 1, Q, K]` of the backend.

    SDPA and flex attention take a boolean mask (True = attend); eager and remote-code attention
    add the mask to the scores, so they get 0 / dtype-min in the model's dtype.

    Raises:
        ValueError: for flash-attention backends, which take no arbitrary 4-D mask.
    """
    impl = attn_implementation or "eager"
    if "flash" in impl:
        raise ValueError(
            f"attn_implementation={impl!r} cannot take the block-causal 4-D mask dLLM decoding needs. "
            "Load the model with attn_implementation='sdpa' (or 'eager')."
        )
    mask = allowed[:, None]  # [B, 1, Q, K]
    if impl in _BOOLEAN_BACKENDS:
        return mask
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    neg = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(mask, zero, neg)  # [B, 1, Q, K]
