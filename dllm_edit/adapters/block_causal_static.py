"""Block-causal decoding through transformers' `StaticCache`: fixed-size key/value buffers for
the whole canvas, written at `cache_position`, so every forward of a block has the same shapes and
`torch.compile` (`compile=True`) builds its graphs once, without dynamic shapes."""

from __future__ import annotations

import copy
from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .attention import allowed_matrix, backend_mask
from .block_causal import BlockCausalAdapter, _BlockCausalSession


class StaticCacheBlockCausalAdapter(BlockCausalAdapter):
    """`BlockCausalAdapter` with a `StaticCache` the size of the canvas (the same tokens).

    Each forward writes the keys and values of the slots it runs at their canvas positions
    (`cache_position`) and attends over the whole buffer with a `[R, 1, Q, T]` mask, so its shapes do
    not grow with the cache: with `compile=True` the model is compiled with static shapes (one graph
    per query width). Finished blocks stay in the buffer; the active block's slots are rewritten at
    every step, and slots past it are masked. Rows that finish keep their place in the buffer (a
    `StaticCache` has a fixed batch), so their forwards still run; their outputs are dropped.
    Multi-block editing (a review copy of finished blocks would overwrite their cached keys) is
    refused. The model's forward must write its keys through `Cache.update` at `cache_position` and
    take a 4-D mask over the whole buffer, as transformers' decoders (Llama, Qwen3, ...) and
    dllm_edit's native classes (LLaDA2.x, LLaDA, LLaDA-MoE) do.

    Examples:
        >>> from dllm_edit.adapters import get_adapter_class
        >>> adapter = get_adapter_class("block_causal_static")()
        >>> adapter.supports_cache, adapter.supports_multi_block_edit
        (True, False)
    """

    name = "block_causal_static"
    supports_multi_block_edit = False

    def open(
        self, model: Any, layout: CanvasLayout, use_cache: bool, compile: bool = False
    ) -> _BlockCausalSession:
        if not use_cache:  # nothing static to keep: the plain block-causal session
            return super().open(model, layout, use_cache, compile)
        call = torch.compile(model, dynamic=False) if compile else model
        return _StaticSession(model, layout, call)


def _full_attention(config: Any) -> Any:
    """The config the cache is sized from: a window that is switched off (`use_sliding_window=False`,
    LLaDA2.x's and Qwen2's published configs, which still carry `sliding_window: 4096`) must not give
    transformers' sliding-window static layers, whose rolling writes cannot rewrite the active block."""
    if getattr(config, "use_sliding_window", None) is False and getattr(config, "sliding_window", None):
        config = copy.copy(config)  # shallow: only the window changes, on the copy
        config.sliding_window = None
    return config


class _StaticSession(_BlockCausalSession):
    def __init__(self, model: Any, layout: CanvasLayout, call: Any) -> None:
        from transformers import StaticCache

        # the first forward (the prompt and first block) runs eagerly: the cache's layers allocate their
        # buffers on their first write, which inside a compiled graph recompiles once per layer
        super().__init__(model, layout, use_cache=False, call=model)
        self.later_call = call  # the model, or its compiled forward, from the second forward on
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.cache = StaticCache(config=_full_attention(config), max_cache_len=layout.canvas_length)  # type: ignore[assignment]
        self.batch_rows = self.rows  # [B] the buffer's rows, fixed
        self.decoding = self.rows  # [R] the rows the loop asks for
        self.written = 0  # canvas slots whose keys/values in the buffer are final (finished blocks)

    def _forward(self, kwargs: dict[str, Any]) -> torch.Tensor:
        logits = super()._forward(kwargs)
        self.call = self.later_call  # the buffers exist now
        return logits

    def _write_from(self, start: int) -> None:
        """Make the next forward write its keys and values from slot `start`: transformers >= 5.2x's
        static layers write after a running count of what they hold (`cumulative_length`) and ignore
        `cache_position`, which 4.x's read; set the count back to `start` (the active block is
        rewritten at every step)."""
        for layer in getattr(self.cache, "layers", ()):
            count = getattr(layer, "cumulative_length", None)
            if isinstance(count, torch.Tensor):
                count.fill_(start)
            elif isinstance(count, int):
                layer.cumulative_length = start

    def _cached(self) -> int:
        return self.written

    def select_rows(self, rows: torch.Tensor) -> None:
        """The buffer keeps every row: later forwards still run them; `logits` returns `rows` only."""
        self.decoding = rows

    def invalidate_from(self, block: int) -> None:
        self.written = min(self.written, block * self.layout.block_length)

    def _build_inputs(
        self, start: int, block: int, window: int, device: torch.device, review_lead: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Query slots `[Q]` = `start .. block end`, the mask `[B, 1, Q, T]` over the whole buffer
        (block-causal; slots past the block hold stale or no keys and are never visible), positions."""
        bl = self.layout.block_length
        q_slot = torch.arange(start, (block + 1) * bl, device=device)  # [Q]
        k_slot = torch.arange(self.layout.canvas_length, device=device)  # [T] the whole buffer
        no_review = torch.zeros_like(k_slot, dtype=torch.bool)  # [T]
        allowed = allowed_matrix(
            q_slot, q_slot // bl, k_slot, no_review, self.layout.key_valid, bl
        )  # [B, Q, T]
        mask = backend_mask(allowed, self.attn, self.dtype)  # [B, 1, Q, T]
        positions = self.layout.position_ids[:, q_slot] if self.pass_positions else None  # [B, Q]
        return q_slot, mask, positions

    def run_forward(
        self, canvas: torch.Tensor, block: int, window: int, keep: int, review_lead: int = 0
    ) -> torch.Tensor:
        bl = self.layout.block_length
        start = self.written
        key = (start, block, window)
        if key != self._inputs_key:
            self._inputs = self._build_inputs(start, block, window, canvas.device, review_lead)
            self._inputs_key = key
        assert self._inputs is not None
        q_slot, mask, positions = self._inputs
        kwargs: dict[str, Any] = {
            "input_ids": canvas[:, start : (block + 1) * bl],  # [B, Q]
            "attention_mask": mask,
            "cache_position": q_slot,
            self.cache_kwarg: self.cache,
            "use_cache": True,
        }
        if positions is not None:
            kwargs["position_ids"] = positions
        if self.pass_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        self._write_from(start)
        outputs = self._forward(kwargs)[:, -keep:]  # [B, keep, V]
        self.written = block * bl  # the finished blocks; the active block is rewritten next step
        if self.decoding.numel() != self.batch_rows.numel():
            outputs = outputs[self.decoding]  # [R, keep, V]
        return outputs
