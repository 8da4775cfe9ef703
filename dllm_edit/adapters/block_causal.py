"""Block-causal models (LLaDA2.x, and any decoder taking a 4-D mask and position ids)."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .attention import allowed_matrix, backend_mask
from .base import (
    ModelAdapter,
    attn_implementation,
    cache_argument,
    forward_kwargs,
    model_dtype,
    output_logits,
)
from .cache import BlockKVCache, cached_length, crop_to


class BlockCausalAdapter(ModelAdapter):
    """Adapter for block-causal diffusion LMs, with an exact KV cache of finished blocks.

    Blocks start at absolute positions (`block_start="absolute"`, the only origin it accepts).
    Each position attends to its own block and all earlier blocks. Under that mask the keys and
    values of a finished block do not depend on later blocks, so caching them is exact: each step
    runs the model on the blocks not yet cached (the active block, plus the previous block on the
    first step of a block, plus the prompt on the very first step) and the cache is cropped back to
    the finished blocks afterwards. The cache is a `BlockKVCache`, preallocated for the canvas: a
    step writes its new keys and values in place instead of concatenating the whole cache. With
    multi-block editing, a review copy of the window is appended
    to the input (see `dllm_edit.strategies.MultiBlockEdit`).

    The model's forward must take a 4-D attention mask `[B, 1, Q, K]` (and position ids, if it has
    them): if the first forward raises a `TypeError` or `RuntimeError`, it is re-raised as a
    `ValueError` pointing to `adapter="bidirectional"` / `"masked_lm"`.

    Examples:
        >>> from dllm_edit.adapters import BlockCausalAdapter
        >>> BlockCausalAdapter().supports_cache
        True
    """

    name = "block_causal"
    supports_cache = True
    default_use_cache = True
    supports_multi_block_edit = True
    supports_compile = True
    default_block_start = "absolute"
    block_starts = ("absolute",)
    block_start_refusal = (
        "A block-causal model's attention is defined over blocks at absolute positions (block k is "
        "positions [k*bl, (k+1)*bl), as in its training and the LLaDA2.x reference); blocks starting "
        "after the prompt would cut the prompt into blocks that depend on its length and the batch, "
        "which no reference defines and the exact KV cache does not cover."
    )
    infill_refusal = (
        "its attention is block-causal, so a mask in the prompt sees only its own block and earlier "
        "ones: the text after it (the suffix of a fill-in-the-middle) could never condition it, and the "
        "exact KV cache keeps the prompt's blocks as they were given."
    )

    def open(
        self, model: Any, layout: CanvasLayout, use_cache: bool, compile: bool = False
    ) -> _BlockCausalSession:
        return _BlockCausalSession(model, layout, use_cache, compiled_forward(model) if compile else model)


_COMPILED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def compiled_forward(model: Any) -> Any:
    """`torch.compile(model, dynamic=True)`, built once per model (later `generate` calls reuse it)."""
    if model not in _COMPILED:
        _COMPILED[model] = torch.compile(model, dynamic=True)
    return _COMPILED[model]


class _BlockCausalSession:
    def __init__(self, model: Any, layout: CanvasLayout, use_cache: bool, call: Any) -> None:
        self.model = model
        self.call = call  # the model, or its compiled forward
        self.layout = layout
        self.cache = BlockKVCache(layout.canvas_length) if use_cache else None
        accepted = forward_kwargs(model)
        self.pass_positions = "position_ids" in accepted or "kwargs" in accepted
        self.pass_logits_to_keep = "logits_to_keep" in accepted
        self.cache_kwarg = cache_argument(model)
        self.attn = attn_implementation(model)
        self.dtype = model_dtype(model)
        self.rows = torch.arange(
            layout.offsets.shape[0], device=layout.offsets.device
        )  # [R] rows still decoding
        self.all_rows = True  # every row of the batch still decodes: no row gather needed
        self._first_forward = True
        self._inputs_key: tuple[int, int, int] | None = None  # what `_inputs` were built for
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None

    def _forward(self, kwargs: dict[str, Any]) -> torch.Tensor:
        """Run the model; on the first forward, turn a rejected mask / argument into advice."""
        if not self._first_forward:
            return output_logits(self.model, self.call(**kwargs))
        try:
            output = self.call(**kwargs)
        except torch.cuda.OutOfMemoryError:  # (torch.OutOfMemoryError on torch >= 2.5) not our advice
            raise
        except (TypeError, RuntimeError) as err:
            passed = ", ".join(sorted(kwargs))
            raise ValueError(
                f"The first forward of {type(self.model).__name__} under the block-causal adapter failed "
                f"({type(err).__name__}: {err}). This adapter passes a 4-D attention mask [B, 1, Q, K], "
                f"position ids and cache arguments (here: {passed}); a model that does not take them needs "
                'another adapter: adapter="masked_lm" for a masked LM (BERT, RoBERTa, ModernBERT: 2-D '
                'padding mask), adapter="bidirectional" for a full-attention dLLM taking a 4-D mask, '
                'adapter="shifted" for a Dream-style model; or use_cache=False if only the cache argument '
                "is refused."
            ) from err
        self._first_forward = False
        return output_logits(self.model, output)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (a subset of the current rows, ascending) in later forwards and the cache."""
        if rows.numel() == self.rows.numel():
            return
        if self.cache is not None:
            if self._cached() > 0:
                self.cache.batch_select_indices(torch.searchsorted(self.rows, rows))
            else:  # nothing cached yet, but layers may hold empty tensors sized for the old rows
                self.cache = BlockKVCache(self.layout.canvas_length)
        self.rows = rows
        self.all_rows = False
        self._inputs_key = None

    def _cached(self) -> int:
        return 0 if self.cache is None else cached_length(self.cache)

    def invalidate_from(self, block: int) -> None:
        if self.cache is not None:
            crop_to(self.cache, min(self._cached(), block * self.layout.block_length))

    def _build_inputs(
        self, start: int, block: int, window: int, device: torch.device, review_lead: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Query slots `[Q]`, the backend's attention mask `[R, 1, Q, K]` and position ids `[R, Q]` of a
        forward over slots `start .. block end` (plus a review copy of `window` blocks, starting
        `review_lead` slots before the window; 0 without a window)."""
        bl = self.layout.block_length
        block_start, block_end = block * bl, (block + 1) * bl
        main = torch.arange(start, block_end, device=device)  # [M] slots run block-causally
        review_start = block_start - window * bl - review_lead
        review = torch.arange(review_start, block_start, device=device)  # [W*bl + lead] review copy
        q_slot = torch.cat([main, review])  # [Q]
        q_sees = torch.cat([main // bl, torch.full_like(review, block)])  # [Q]
        k_slot = torch.cat([torch.arange(start, device=device), q_slot])  # [K] cache + inputs
        k_review = torch.zeros_like(k_slot, dtype=torch.bool)
        k_review[k_slot.numel() - review.numel() :] = True
        key_valid = self.layout.key_valid if self.all_rows else self.layout.key_valid[self.rows]  # [R, T]
        allowed = allowed_matrix(q_slot, q_sees, k_slot, k_review, key_valid, bl)  # [R, Q, K]
        mask = backend_mask(allowed, self.attn, self.dtype)  # [R, 1, Q, K]
        positions = None
        if self.pass_positions:
            all_positions = self.layout.position_ids if self.all_rows else self.layout.position_ids[self.rows]
            positions = all_positions[:, q_slot]  # [R, Q]
        return q_slot, mask, positions

    def run_forward(
        self, canvas: torch.Tensor, block: int, window: int, keep: int, review_lead: int = 0
    ) -> torch.Tensor:
        """One forward over the slots not yet cached up to the end of `block` (plus a review copy of
        `window` blocks, from `review_lead` slots before the window); returns the outputs of its last
        `keep` query slots `[R, keep, V]` and crops the cache back to the finished blocks."""
        bl = self.layout.block_length
        block_start = block * bl
        start = self._cached()
        key = (start, block, window)
        if key != self._inputs_key:  # built once per block (and once more for its first step)
            self._inputs = self._build_inputs(start, block, window, canvas.device, review_lead)
            self._inputs_key = key
        assert self._inputs is not None
        q_slot, mask, positions = self._inputs
        rows_canvas = canvas if self.all_rows else canvas[self.rows]  # [R, T]
        # [R, Q]; without a review copy q_slot is a range: a slice, no gather
        input_ids = rows_canvas[:, start : (block + 1) * bl] if window == 0 else rows_canvas[:, q_slot]
        kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
        if positions is not None:
            kwargs["position_ids"] = positions
        if self.cache is not None:
            kwargs[self.cache_kwarg] = self.cache
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        if self.pass_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        outputs = self._forward(kwargs)[:, -keep:]  # [R, keep, V]
        if self.cache is not None:
            crop_to(self.cache, block_start)
        return outputs

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        bl = self.layout.block_length
        logits = self.run_forward(canvas, block, window, keep=bl + window * bl)  # [R, bl + W*bl, V]
        if window == 0:
            return logits  # [R, bl, V]
        # reorder to span order: window (from the review copy) then the active block
        return torch.cat([logits[:, bl:], logits[:, :bl]], dim=1)  # [R, W*bl + bl, V]
