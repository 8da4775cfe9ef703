"""Cropping a transformers `DynamicCache` across versions.

`Cache.crop(n)` took the length to keep before transformers 5.18 and takes the (negative) number of
tokens to remove since; a negative argument means "remove that many" in both, so that is what we
pass. `crop(0)` is avoided: before 5.18 it emptied the cache.
"""

from __future__ import annotations

from typing import Any


def cached_length(cache: Any) -> int:
    return int(cache.get_seq_length())


def crop_to(cache: Any, length: int) -> None:
    """Keep the first `length` positions of every layer of `cache`."""
    remove = cached_length(cache) - length
    if remove > 0:
        cache.crop(-remove)
