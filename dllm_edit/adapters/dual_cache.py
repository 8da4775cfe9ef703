"""Fast-dLLM's **approximate** dual KV cache for fully bidirectional dLLMs (LLaDA-8B / LLaDA-1.5 style).

At a *refresh* the whole canvas runs and the keys/values of every slot are kept (`SlotKVCache`);
at the other steps only the span (the active block, after the multi-block-edit window when that is
on) runs: its queries attend to the cached keys/values of the prefix **and** the suffix, and to
its own fresh keys/values, written over the span's slots in the cache (Fast-dLLM's
`generate_with_dual_cache` with `replace_position`, NVlabs/Fast-dLLM `llada/generate.py`). Under
full attention the cached prefix and suffix depend on the span, which changes at every step, so the
logits of a cached step are approximate; a refresh is exact.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .base import cache_argument, forward_kwargs, output_logits
from .bidirectional import ApproxCacheBidirectionalAdapter, BidirectionalAdapter, _BidirectionalSession
from .cache import SlotKVCache


def check_refresh_every(refresh_every: Any) -> int | None:
    """`refresh_every`, validated: None (refresh at block starts only) or an int >= 1.

    Raises:
        TypeError: not None and not an int (a bool is refused).
        ValueError: an int below 1.
    """
    if refresh_every is None:
        return None
    if isinstance(refresh_every, bool) or not isinstance(refresh_every, int):
        raise TypeError(
            "`refresh_every` must be None (refresh the dual cache at each block start only) or an int "
            f">= 1 (also every that many steps within a block), got {refresh_every!r} of type "
            f"{type(refresh_every).__name__}."
        )
    if refresh_every < 1:
        raise ValueError(
            f"`refresh_every` must be >= 1 (1 refreshes at every step, i.e. no caching), got "
            f"{refresh_every}. Use None to refresh at block starts only."
        )
    return refresh_every


class DualCacheBidirectionalAdapter(BidirectionalAdapter):
    """Bidirectional adapter with Fast-dLLM's **approximate** dual KV cache.

    At a block's first step (and, with `refresh_every=k`, at its steps `k, 2k, ...`) the whole
    canvas runs and the keys/values of every slot are cached. The block's other steps run only the
    span (the active block, plus the multi-block-edit window when that is on): its queries attend to
    the cached keys/values of the slots before **and after** the span, and to the span's own fresh
    keys/values, which overwrite the span's slots in the cache (Fast-dLLM's `replace_position`).
    Under full attention the cached prefix and suffix depend on the span, which changes during the
    block, so cached steps are approximate: outputs can differ from the exact
    `BidirectionalAdapter`. A refresh step is exact, so `refresh_every=1` decodes exactly as
    `"bidirectional"` (and costs as much). It is opt-in: choose it by name,
    `adapter="bidirectional_dual_cache"`, or by object (for `refresh_every`); it is never
    auto-detected. `use_cache=False` runs the exact full-canvas session.

    The model's forward must take a cache argument (`cache` or `past_key_values`) and
    `position_ids`, and its attention layers must write keys/values through transformers'
    `Cache.update` (transformers' own decoders do: Llama, Qwen2/3, Mistral, ...). A forward that
    takes neither is refused before any forward; a model that never calls `update` for all of its
    layers (remote code with tuple caches, such as LLaDA's `modeling_llada`) is refused at the first
    forward. WINO's shadow block is refused before any forward (cached steps do not run the whole
    canvas; `dllm_edit.adapters.shadow`). Multi-block editing works: the window is part of the
    span that runs at every step, so edits of window blocks need no refresh (the cached suffix was
    stale anyway).

    Args:
        refresh_every: None (refresh at each block start only, as Fast-dLLM) or an int `k >= 1`:
            also refresh at every `k`-th step of a block.

    Raises:
        TypeError / ValueError: a `refresh_every` that is not None or an int >= 1.

    Examples:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> import dllm_edit
        >>> from dllm_edit.adapters import DualCacheBidirectionalAdapter
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
        >>> cfg = dllm_edit.EditGenerationConfig.from_mode("llada", max_new_tokens=8, block_length=4,
        ...     mask_token_id=63, eos_token_id=0)
        >>> adapter = DualCacheBidirectionalAdapter(refresh_every=2)
        >>> out = dllm_edit.generate(model, torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter=adapter)
        >>> out.sequences.shape, out.num_forwards.tolist()
        (torch.Size([1, 11]), [8])
        >>> DualCacheBidirectionalAdapter()
        DualCacheBidirectionalAdapter(refresh_every=None)
    """

    name = "bidirectional_dual_cache"
    supports_cache = True
    default_use_cache = True
    infill_cache_refusal = ApproxCacheBidirectionalAdapter.infill_cache_refusal

    def __init__(self, refresh_every: int | None = None) -> None:
        self.refresh_every = check_refresh_every(refresh_every)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(refresh_every={self.refresh_every!r})"

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _BidirectionalSession:
        if not use_cache:
            return _BidirectionalSession(model, layout)
        return _DualCacheSession(model, layout, self.refresh_every)


class _DualCacheSession(_BidirectionalSession):
    """Refresh (whole canvas, every slot cached) or span-only forward on the cached prefix and suffix.

    The cache holds canvas slots `[origin, T)`: `origin` is the `lead` of the last refresh, moved
    up when rows leave the batch (their padding slots are dropped from the cache). A cached step
    runs only the span, so its forwards do not predict the blocks ahead (`sees_ahead` is False).
    """

    sees_ahead = False

    def __init__(self, model: Any, layout: CanvasLayout, refresh_every: int | None) -> None:
        super().__init__(model, layout)
        accepted = forward_kwargs(model)
        name = type(model).__name__
        if "cache" not in accepted and "past_key_values" not in accepted and "kwargs" not in accepted:
            raise ValueError(
                f"{name}.forward takes no KV cache argument (`cache` or `past_key_values`), so the dual "
                "cache cannot be used; use adapter='bidirectional' (or use_cache=False)."
            )
        if not self.pass_positions:
            raise ValueError(
                f"{name}.forward takes no `position_ids`, which the dual cache needs (a cached step runs "
                "only the active block, whose positions the model cannot infer); use "
                "adapter='bidirectional' (or use_cache=False)."
            )
        self.raw_model = model
        self.cache_kwarg = cache_argument(model)
        self.refresh_every = refresh_every
        layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        self.num_layers = layers if isinstance(layers, int) and not isinstance(layers, bool) else None
        self.cache = SlotKVCache()
        self.block: int | None = None  # block of the current refresh cycle
        self.step = 0  # forwards of `block` so far
        self.origin = self.lead  # canvas slot of cache slot 0
        self.span_start = 0  # first slot the last forward returned logits for
        self.stale = True  # the next forward must refresh
        self.checked = False  # the first refresh showed that every layer writes into the cache
        self._step_mask: torch.Tensor | None = None  # [R, 1, S, K] of cached steps
        self._step_mask_key: tuple[int, int, int] | None = None

    def select_rows(self, rows: torch.Tensor) -> None:
        if rows.numel() != self.rows.numel():
            lead = self.layout.lead(rows)  # once per block, or when rows leave
            if self.cache.num_layers:
                self.cache.select(torch.searchsorted(self.rows, rows), drop_leading=lead - self.origin)
                self.origin = lead
            self.lead = lead
            self._step_mask = None
        self.rows = rows

    def invalidate_from(self, block: int) -> None:
        # the span runs fresh at every step; only an edit before it makes the cache older than its rule
        if block * self.layout.block_length < self.span_start:
            self.stale = True

    def logits(self, canvas: torch.Tensor, block: int, window: int, ahead: int = 0) -> torch.Tensor:
        if ahead:  # `sees_ahead` is False: the loop never asks
            raise ValueError("the dual cache's cached steps run only the span, not the blocks ahead")
        bl = self.layout.block_length
        span_start, span_stop = (block - window) * bl, (block + 1) * bl
        if block != self.block:
            self.block, self.step = block, 0
        every = self.refresh_every
        refresh = self.stale or self.step == 0 or (every is not None and self.step % every == 0)
        self.step += 1
        self.span_start = span_start
        if refresh:
            logits = self._refresh(canvas)  # [R, T - lead, V]
            start = span_start - self.lead  # generated blocks never start before `lead`
            return logits[:, start : start + (window + 1) * bl]  # [R, (window + 1) * bl, V]
        return self._cached_step(canvas, span_start, span_stop)  # [R, (window + 1) * bl, V]

    def _refresh(self, canvas: torch.Tensor) -> torch.Tensor:
        """Logits `[R, T - lead, V]` of the whole canvas; every slot's keys/values are cached."""
        rows, lead = self.rows, self.lead  # [R]
        self.cache.write_at(None)
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows, lead:],  # [R, T - lead]
            "attention_mask": self._attention_mask(canvas.device)[rows][..., lead:, lead:],  # [R, 1, T', T']
            "position_ids": self.layout.position_ids[rows, lead:],  # [R, T - lead]
            self.cache_kwarg: self.cache,
            "use_cache": True,
        }
        # [R, T - lead, V]; the first refresh also checks that the model writes into the cache
        logits = self.model(**kwargs).logits if self.checked else self._first_forward(kwargs)
        self.origin, self.stale = lead, False
        self._step_mask = None
        return logits

    def _first_forward(self, kwargs: dict[str, Any]) -> torch.Tensor:
        name = type(self.raw_model).__name__
        try:
            output = self.raw_model(**kwargs)
        except torch.cuda.OutOfMemoryError:  # not our advice
            raise
        except (TypeError, RuntimeError, AssertionError) as err:
            raise ValueError(
                f"The first forward of {name} under the dual-cache adapter failed ({type(err).__name__}: "
                f"{err}). It passes a 4-D attention mask, position ids and a transformers Cache as "
                f"`{self.cache_kwarg}`; a model that cannot take them needs adapter='bidirectional' (or "
                "use_cache=False)."
            ) from err
        logits = output_logits(self.raw_model, output)  # [R, T - lead, V]
        written = self.cache.num_layers
        if written == 0 or (self.num_layers is not None and written != self.num_layers):
            expected = "all" if self.num_layers is None else f"all {self.num_layers}"
            raise ValueError(
                f"{name} took the cache argument `{self.cache_kwarg}` but wrote keys/values into it for "
                f"{written} layer(s), not {expected}: its attention does not go through transformers' "
                "`Cache.update` (e.g. remote code with tuple caches, such as LLaDA's modeling_llada), so "
                "the dual cache cannot serve it. Use adapter='bidirectional' (or use_cache=False)."
            )
        self.checked = True
        return logits

    def _cached_step(self, canvas: torch.Tensor, span_start: int, span_stop: int) -> torch.Tensor:
        """Logits `[R, S, V]` of the span alone, on the cached prefix and suffix."""
        rows = self.rows  # [R]
        key = (span_start, span_stop, self.origin)
        if self._step_mask is None or self._step_mask_key != key:  # once per block (and row change)
            full = self._attention_mask(canvas.device)  # [B, 1, T, T]
            self._step_mask = full[rows][:, :, span_start:span_stop, self.origin :]  # [R, 1, S, K]
            self._step_mask_key = key
        self.cache.write_at(span_start - self.origin)
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows, span_start:span_stop],  # [R, S]
            "attention_mask": self._step_mask,  # [R, 1, S, K]
            "position_ids": self.layout.position_ids[rows, span_start:span_stop],  # [R, S]
            self.cache_kwarg: self.cache,
            "use_cache": True,
        }
        return self.model(**kwargs).logits  # [R, S, V]
