"""Fully bidirectional diffusion LMs (LLaDA-8B / LLaDA-1.5 style): every position sees the canvas."""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .attention import allowed_matrix, backend_mask
from .base import (
    ModelAdapter,
    attn_implementation,
    cache_argument,
    checked_forward,
    forward_kwargs,
    model_dtype,
)


class BidirectionalAdapter(ModelAdapter):
    """Adapter for full-attention dLLMs; runs the whole canvas at every step, no KV cache.

    Keys of later blocks change as they are decoded, so no cache of earlier blocks is exact here
    (`ApproxCacheBidirectionalAdapter` offers an approximate prefix cache). Multi-block
    editing needs nothing extra: the window's logits already see the active block.

    Blocks start right after the prompt by default (`block_start="prompt_end"`), as in LLaDA-1's
    reference `generate` (and Fast-dLLM's): the canvas is the prompt followed by exactly
    `max_new_tokens` masks. `block_start="absolute"` (LLaDA2.x's origin) is accepted too.

    Examples:
        >>> from dllm_edit.adapters import BidirectionalAdapter
        >>> BidirectionalAdapter().supports_cache
        False
    """

    name = "bidirectional"
    supports_cache = False
    default_use_cache = False
    supports_multi_block_edit = True
    default_block_start = "prompt_end"
    supports_infill = True

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _BidirectionalSession:
        return _BidirectionalSession(model, layout)


class _BidirectionalSession:
    """Runs the whole canvas of the session's rows at every step.

    Slots before `lead`, the smallest offset among the rows, are padding in every row: they are
    left out of the forward, so a row decoded alone (or the least padded row of a batch) is run on
    exactly its own canvas, with no padding slot at all. Its forwards predict the blocks ahead too
    (`sees_ahead`): `logits(..., ahead=n)` appends the next `n` blocks' logits.
    """

    sees_ahead = True

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
        self.lead = layout.lead(self.rows)  # slots [0, lead) are padding in every row

    def select_rows(self, rows: torch.Tensor) -> None:
        if rows.numel() != self.rows.numel():
            self.lead = self.layout.lead(rows)  # once per block, not per step
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

    def forward_canvas(self, canvas: torch.Tensor) -> torch.Tensor:
        """Logits `[R, T - lead, V]` of canvas slots `lead..T` of the session's rows."""
        rows, lead = self.rows, self.lead  # [R]
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows, lead:],  # [R, T - lead]
            "attention_mask": self._attention_mask(canvas.device)[rows][..., lead:, lead:],  # [R, 1, T', T']
        }
        if self.pass_positions:
            kwargs["position_ids"] = self.layout.position_ids[rows, lead:]  # [R, T - lead]
        if self.pass_use_cache:
            kwargs["use_cache"] = False
        return self.model(**kwargs).logits  # [R, T - lead, V]

    def logits(self, canvas: torch.Tensor, block: int, window: int, ahead: int = 0) -> torch.Tensor:
        """Logits `[R, (window + 1 + ahead) * bl, V]`: the window blocks, the active `block`, and the
        `ahead` blocks after it (which must exist)."""
        bl = self.layout.block_length
        logits = self.forward_canvas(canvas)  # [R, T - lead, V]
        start = (block - window) * bl - self.lead  # generated blocks never start before `lead`
        return logits[:, start : start + (window + 1 + ahead) * bl]  # [R, (window + 1 + ahead) * bl, V]


class ApproxCacheBidirectionalAdapter(BidirectionalAdapter):
    """Bidirectional adapter with an **approximate** prefix KV cache (Fast-dLLM style).

    At the first step of every block the whole canvas runs and the keys/values of the slots before
    the span (the active block, plus the multi-block-edit window) are kept; the other steps of the
    block run only the span and the slots after it, attending to that cached prefix. Under full
    attention the prefix's keys/values depend on the span and the suffix, which change during the
    block, so the cached prefix is stale after the first step: outputs can differ from the exact
    `BidirectionalAdapter`. Steps that read fresh logits only (e.g. a block filled in its first
    step) match it exactly. Choose it by name, `adapter="bidirectional_approx_cache"`, or object;
    it is never auto-detected.

    Examples:
        >>> from dllm_edit.adapters import ApproxCacheBidirectionalAdapter
        >>> ApproxCacheBidirectionalAdapter.supports_cache, ApproxCacheBidirectionalAdapter.name
        (True, 'bidirectional_approx_cache')
    """

    name = "bidirectional_approx_cache"
    supports_cache = True
    default_use_cache = True
    infill_cache_refusal = (
        "its cache keeps the rows of the batch as they leave it, block after block, but infilling "
        "decodes each row only in the blocks that hold its masks, so rows would have to rejoin the "
        "cached batch. Set use_cache=False (the exact bidirectional session)."
    )

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _BidirectionalSession:
        if not use_cache:
            return _BidirectionalSession(model, layout)
        return _ApproxCacheSession(model, layout)


class _ApproxCacheSession(_BidirectionalSession):
    """Full-canvas forward at a block's first step, then span + suffix on a cached prefix."""

    def __init__(self, model: Any, layout: CanvasLayout) -> None:
        super().__init__(model, layout)
        accepted = forward_kwargs(model)
        if "cache" not in accepted and "past_key_values" not in accepted and "kwargs" not in accepted:
            raise ValueError(
                f"{type(model).__name__}.forward takes no KV cache argument, so the approximate prefix cache "
                "cannot be used; use adapter='bidirectional' (or use_cache=False)."
            )
        self.cache_kwarg = cache_argument(model)
        self.cache: Any = None
        self.block: int | None = None  # block whose prefix is cached
        self.prefix = 0  # cached slots [0, prefix)

    def select_rows(self, rows: torch.Tensor) -> None:
        if rows.numel() != self.rows.numel() and self.cache is not None and self.prefix > 0:
            self.cache.batch_select_indices(torch.searchsorted(self.rows, rows))
        self.rows = rows

    def invalidate_from(self, block: int) -> None:
        if block * self.layout.block_length < self.prefix:
            self.block = None  # refresh at the next step

    def logits(self, canvas: torch.Tensor, block: int, window: int, ahead: int = 0) -> torch.Tensor:
        from transformers import DynamicCache

        from .cache import crop_to

        bl = self.layout.block_length
        device = canvas.device
        span_start, span_stop = (block - window) * bl, (block + 1) * bl
        if block != self.block:  # first step of the block: everything afresh
            self.cache, self.prefix, self.block = DynamicCache(), 0, block
        start = self.prefix
        rows = self.rows  # [R]
        q_slot = torch.arange(start, self.layout.canvas_length, device=device)  # [Q] prefix is cached
        k_slot = torch.arange(self.layout.canvas_length, device=device)  # [K]
        allowed = allowed_matrix(
            q_slot,
            torch.full_like(q_slot, self.layout.num_blocks),
            k_slot,
            torch.zeros_like(k_slot, dtype=torch.bool),
            self.layout.key_valid[rows],
            bl,
        )  # [R, Q, K]
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows][:, q_slot],  # [R, Q]
            "attention_mask": backend_mask(allowed, self.attn, self.dtype),  # [R, 1, Q, K]
            self.cache_kwarg: self.cache,
            "use_cache": True,
        }
        if self.pass_positions:
            kwargs["position_ids"] = self.layout.position_ids[rows][:, q_slot]  # [R, Q]
        logits = self.model(**kwargs).logits  # [R, Q, V]
        crop_to(self.cache, span_start)  # keep the prefix only
        self.prefix = span_start
        return logits[:, span_start - start : span_stop + ahead * bl - start]  # [R, S + ahead * bl, V]
