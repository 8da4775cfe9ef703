"""KV caches of the cached adapters, and cropping a transformers `DynamicCache` across versions.

`Cache.crop(n)` took the length to keep before transformers 5.18 and takes the (negative) number of
tokens to remove since; a negative argument means "remove that many" in both, so that is what we
pass. `crop(0)` is avoided: before 5.18 it emptied the cache.

`BlockKVCache` is a `DynamicCache` whose keys and values live in buffers allocated once for the
whole canvas: a step writes only its new positions, where `DynamicCache` concatenates the whole
cache with them (a copy of every cached key and value, per layer, per step). It only relies on the
two calls a transformers attention layer makes on its cache, `update(key, value, layer_idx, ...)`
and `get_seq_length()`, which are the same in transformers 4.57 and 5.x (what follows `layer_idx`,
`cache_kwargs` or `kwargs=`, differs and is not needed).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache


def cached_length(cache: Any) -> int:
    return int(cache.get_seq_length())


def crop_to(cache: Any, length: int) -> None:
    """Keep the first `length` positions of every layer of `cache`."""
    remove = cached_length(cache) - length
    if remove > 0:
        cache.crop(-remove)


class BlockKVCache(DynamicCache):
    """A KV cache preallocated for `capacity` positions per layer.

    Keys and values of layer `l` are stored in one buffer `[B, H, capacity, D]` (allocated on the
    layer's first `update`, in the dtype and device of its keys); `update` writes the new positions
    after the cached ones and returns views of the buffer up to them, so the attention sees exactly
    what `DynamicCache` would give it. Cropping only moves the length back. If a forward needs more
    than `capacity` positions (e.g. review copies of multi-block editing), the buffer grows.

    Args:
        capacity: positions to preallocate per layer (the canvas length is enough without review
            copies).

    Examples:
        >>> import torch
        >>> cache = BlockKVCache(capacity=8)
        >>> k, v = cache.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), layer_idx=0)
        >>> k.shape, cache.get_seq_length()
        (torch.Size([1, 2, 3, 4]), 3)
        >>> cache.crop(-1); cache.get_seq_length()
        2
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._keys: list[torch.Tensor] = []  # per layer [B, H, C, D]
        self._values: list[torch.Tensor] = []  # per layer [B, H, C, D]
        self._lengths: list[int] = []  # cached positions per layer

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `key_states`/`value_states` `[B, H, q, D]` to layer `layer_idx`; return its keys and
        values `[B, H, cached + q, D]` (views of the buffers)."""
        rows, heads, new, dim = key_states.shape
        if layer_idx == len(self._keys):
            self._keys.append(key_states.new_empty(rows, heads, self.capacity, dim))
            self._values.append(value_states.new_empty(rows, heads, self.capacity, value_states.shape[-1]))
            self._lengths.append(0)
        start = self._lengths[layer_idx]
        end = start + new
        if end > self._keys[layer_idx].shape[2]:
            self._grow(layer_idx, end)
        keys, values = self._keys[layer_idx], self._values[layer_idx]  # [B, H, C, D]
        keys[:, :, start:end] = key_states
        values[:, :, start:end] = value_states
        self._lengths[layer_idx] = end
        return keys[:, :, :end], values[:, :, :end]

    def _grow(self, layer_idx: int, needed: int) -> None:
        for store in (self._keys, self._values):
            old = store[layer_idx]  # [B, H, C, D]
            grown = old.new_empty(old.shape[0], old.shape[1], max(needed, 2 * old.shape[2]), old.shape[3])
            grown[:, :, : self._lengths[layer_idx]] = old[:, :, : self._lengths[layer_idx]]
            store[layer_idx] = grown

    def get_seq_length(self, layer_idx: int | None = 0, *args: Any, **kwargs: Any) -> int:
        index = layer_idx or 0
        return self._lengths[index] if index < len(self._lengths) else 0

    def crop(self, max_length: int) -> None:
        """Keep `max_length` positions (a negative value: remove `-max_length` positions)."""
        for i, length in enumerate(self._lengths):
            self._lengths[i] = max(0, length + max_length) if max_length < 0 else min(length, max_length)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (LongTensor `[R]`) of every layer."""
        self._keys = [k.index_select(0, indices) for k in self._keys]
        self._values = [v.index_select(0, indices) for v in self._values]


class SlotKVCache(DynamicCache):
    """Keys and values of every slot of a forward, overwritten in place where a later forward writes.

    The cache of `DualCacheBidirectionalAdapter` (Fast-dLLM's dual cache). A forward run with
    `write_at(None)` (a *refresh*) covers every slot: its keys and values `[B, H, K, D]` become the
    layer's cache, and the attention sees exactly them. A forward run with `write_at(start)` covers
    the `q` slots `[start, start + q)` of the cache: its keys and values are written there, over the
    old ones (Fast-dLLM's `replace_position`), and the attention sees the whole cache `[B, H, K, D]`,
    stale keys/values of the other slots included. Like `BlockKVCache`, it relies only on
    `update(key, value, layer_idx, ...)`, which transformers' attention layers call the same way in
    4.57 and 5.x; the write position is set by the caller, not read from `cache_position`.

    Examples:
        >>> import torch
        >>> cache = SlotKVCache()
        >>> k, _ = cache.update(torch.zeros(1, 2, 6, 4), torch.zeros(1, 2, 6, 4), layer_idx=0)
        >>> cache.write_at(2)
        >>> k, _ = cache.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4), layer_idx=0)
        >>> k.shape, k[0, 0, :, 0].tolist()
        (torch.Size([1, 2, 6, 4]), [0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    """

    def __init__(self) -> None:
        super().__init__()
        self._keys: list[torch.Tensor] = []  # per layer [B, H, K, D]
        self._values: list[torch.Tensor] = []  # per layer [B, H, K, D]
        self._start: int | None = None  # where the next forward writes; None: it covers every slot

    @property
    def num_layers(self) -> int:
        """Layers holding keys and values (those whose attention called `update`)."""
        return len(self._keys)

    def write_at(self, start: int | None) -> None:
        """Where the next forward's keys/values go: cache slot `start` on, or (None) every slot."""
        self._start = start

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (refresh) or write at the set position `key_states`/`value_states` `[B, H, q, D]`;
        return the keys and values the attention reads, `[B, H, K, D]`."""
        if self._start is None:  # a refresh: this forward's keys/values become the cache
            if layer_idx == len(self._keys):
                self._keys.append(key_states.contiguous())
                self._values.append(value_states.contiguous())
            else:
                self._keys[layer_idx] = key_states.contiguous()
                self._values[layer_idx] = value_states.contiguous()
            return key_states, value_states  # [B, H, K, D] exactly what an uncached forward sees
        if layer_idx >= len(self._keys):
            raise RuntimeError(
                f"SlotKVCache: layer {layer_idx} writes at slot {self._start} but was never refreshed; "
                "run a forward with write_at(None) first."
            )
        stop = self._start + key_states.shape[2]
        keys, values = self._keys[layer_idx], self._values[layer_idx]  # [B, H, K, D]
        keys[:, :, self._start : stop] = key_states
        values[:, :, self._start : stop] = value_states
        return keys, values

    def get_seq_length(self, layer_idx: int | None = 0, *args: Any, **kwargs: Any) -> int:
        index = layer_idx or 0
        return self._keys[index].shape[2] if index < len(self._keys) else 0

    def select(self, indices: torch.Tensor, drop_leading: int = 0) -> None:
        """Keep only the rows `indices` (LongTensor `[R]`) and the slots from `drop_leading` on."""
        self._keys = [k[:, :, drop_leading:].index_select(0, indices) for k in self._keys]
        self._values = [v[:, :, drop_leading:].index_select(0, indices) for v in self._values]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (LongTensor `[R]`) of every layer."""
        self.select(indices)
