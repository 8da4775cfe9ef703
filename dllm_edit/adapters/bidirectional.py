"""Fully bidirectional diffusion LMs (LLaDA-8B / LLaDA-1.5 style): every position sees the canvas."""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .attention import allowed_matrix, backend_mask
from .base import ModelAdapter, attn_implementation, checked_forward, forward_kwargs, model_dtype


class BidirectionalAdapter(ModelAdapter):
    """Adapter for full-attention dLLMs; runs the whole canvas at every step, no KV cache.

    Keys of later blocks change as they are decoded, so no cache of earlier blocks is exact here
    (an approximate prefix cache is future work and will be labelled approximate). Multi-block
    editing needs nothing extra: the window's logits already see the active block.

    Examples:
        >>> from dllm_edit.adapters import BidirectionalAdapter
        >>> BidirectionalAdapter().supports_cache
        False
    """

    name = "bidirectional"
    supports_cache = False
    default_use_cache = False
    supports_multi_block_edit = True

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _BidirectionalSession:
        return _BidirectionalSession(model, layout)


class _BidirectionalSession:
    def __init__(self, model: Any, layout: CanvasLayout) -> None:
        self.model = checked_forward(model)
        self.layout = layout
        accepted = forward_kwargs(model)
        self.pass_positions = "position_ids" in accepted or "kwargs" in accepted
        self.pass_use_cache = "use_cache" in accepted or "kwargs" in accepted
        self.attn = attn_implementation(model)
        self.dtype = model_dtype(model)
        self._mask: torch.Tensor | None = None
        self.rows = torch.arange(layout.offsets.shape[0], device=layout.offsets.device)  # [R]

    def select_rows(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def invalidate_from(self, block: int) -> None:
        return None

    def _attention_mask(self, device: torch.device) -> torch.Tensor:
        if self._mask is None:  # the same every step: build once
            slots = torch.arange(self.layout.canvas_length, device=device)  # [T]
            sees_all = torch.full_like(slots, self.layout.num_blocks)  # [T]
            allowed = allowed_matrix(
                slots,
                sees_all,
                slots,
                torch.zeros_like(slots, dtype=torch.bool),
                self.layout.key_valid,
                self.layout.block_length,
            )  # [B, T, T]
            self._mask = backend_mask(allowed, self.attn, self.dtype)  # [B, 1, T, T]
        return self._mask

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        bl = self.layout.block_length
        rows = self.rows  # [R]
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows],  # [R, T]
            "attention_mask": self._attention_mask(canvas.device)[rows],  # [R, 1, T, T]
        }
        if self.pass_positions:
            kwargs["position_ids"] = self.layout.position_ids[rows]  # [R, T]
        if self.pass_use_cache:
            kwargs["use_cache"] = False
        logits = self.model(**kwargs).logits  # [R, T, V]
        return logits[:, (block - window) * bl : (block + 1) * bl]  # [R, (window + 1) * bl, V]
