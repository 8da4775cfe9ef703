"""Block-causal models (LLaDA2.x, and any decoder taking a 4-D mask and position ids)."""

from __future__ import annotations

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
from .cache import cached_length, crop_to


class BlockCausalAdapter(ModelAdapter):
    """Adapter for block-causal diffusion LMs, with an exact KV cache of finished blocks.

    Blocks start at absolute positions (`block_start="absolute"`, the only origin it accepts).
    Each position attends to its own block and all earlier blocks. Under that mask the keys and
    values of a finished block do not depend on later blocks, so caching them is exact: each step
    runs the model on the blocks not yet cached (the active block, plus the previous block on the
    first step of a block, plus the prompt on the very first step) and the cache is cropped back to
    the finished blocks afterwards. With multi-block editing, a review copy of the window is appended
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
    default_block_start = "absolute"
    block_starts = ("absolute",)
    block_start_refusal = (
        "A block-causal model's attention is defined over blocks at absolute positions (block k is "
        "positions [k*bl, (k+1)*bl), as in its training and the LLaDA2.x reference); blocks starting "
        "after the prompt would cut the prompt into blocks that depend on its length and the batch, "
        "which no reference defines and the exact KV cache does not cover."
    )

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _BlockCausalSession:
        return _BlockCausalSession(model, layout, use_cache)


class _BlockCausalSession:
    def __init__(self, model: Any, layout: CanvasLayout, use_cache: bool) -> None:
        from transformers import DynamicCache

        self.model = model
        self.layout = layout
        self.cache = DynamicCache() if use_cache else None
        accepted = forward_kwargs(model)
        self.pass_positions = "position_ids" in accepted or "kwargs" in accepted
        self.pass_logits_to_keep = "logits_to_keep" in accepted
        self.cache_kwarg = cache_argument(model)
        self.attn = attn_implementation(model)
        self.dtype = model_dtype(model)
        self.rows = torch.arange(
            layout.offsets.shape[0], device=layout.offsets.device
        )  # [R] rows still decoding
        self._first_forward = True

    def _forward(self, kwargs: dict[str, Any]) -> torch.Tensor:
        """Run the model; on the first forward, turn a rejected mask / argument into advice."""
        if not self._first_forward:
            return output_logits(self.model, self.model(**kwargs))
        try:
            output = self.model(**kwargs)
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
                from transformers import DynamicCache

                self.cache = DynamicCache()
        self.rows = rows

    def _cached(self) -> int:
        return 0 if self.cache is None else cached_length(self.cache)

    def invalidate_from(self, block: int) -> None:
        if self.cache is not None:
            crop_to(self.cache, min(self._cached(), block * self.layout.block_length))

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        bl = self.layout.block_length
        device = canvas.device
        block_start, block_end = block * bl, (block + 1) * bl
        start = self._cached()
        main = torch.arange(start, block_end, device=device)  # [M] slots run block-causally
        review = torch.arange(block_start - window * bl, block_start, device=device)  # [W*bl] review copy
        q_slot = torch.cat([main, review])  # [Q]
        q_sees = torch.cat([main // bl, torch.full_like(review, block)])  # [Q]
        k_slot = torch.cat([torch.arange(start, device=device), q_slot])  # [K] cache + inputs
        k_review = torch.zeros_like(k_slot, dtype=torch.bool)
        k_review[k_slot.numel() - review.numel() :] = True
        rows = self.rows  # [R]
        allowed = allowed_matrix(
            q_slot, q_sees, k_slot, k_review, self.layout.key_valid[rows], bl
        )  # [R, Q, K]

        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows][:, q_slot],  # [R, Q]
            "attention_mask": backend_mask(allowed, self.attn, self.dtype),  # [R, 1, Q, K]
        }
        if self.pass_positions:
            kwargs["position_ids"] = self.layout.position_ids[rows][:, q_slot]  # [R, Q]
        if self.cache is not None:
            kwargs[self.cache_kwarg] = self.cache
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        keep = bl + review.numel()
        if self.pass_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        logits = self._forward(kwargs)[:, -keep:]  # [R, bl + W*bl, V]
        if self.cache is not None:
            crop_to(self.cache, block_start)
        # reorder to span order: window (from the review copy) then the active block
        return torch.cat([logits[:, bl:], logits[:, :bl]], dim=1)  # [R, W*bl + bl, V]
