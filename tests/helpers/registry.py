"""A registered strategy built with its defaults (its paper's), for the registry-driven property tests."""

from __future__ import annotations

import dataclasses

from dllm_edit.strategies import Strategy, get_strategy


def build(name: str, block_length: int) -> Strategy:
    """The strategy registered as `name`, with its defaults; a rule that spreads over a block length
    (`QuotaUnmask`) gets `block_length` and half as many steps."""
    cls = get_strategy(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    if "block_length" in fields:  # QuotaUnmask spreads over a block length
        return cls(block_length=block_length, steps=max(1, block_length // 2))
    return cls()
