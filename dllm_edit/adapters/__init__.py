"""Model adapters: how the decoding loop runs each family of diffusion LM.

`resolve_adapter(model, adapter)` accepts a registered name, an adapter object, or None
(auto-detection from `model.config.model_type`).
"""

from __future__ import annotations

from typing import Any

from .base import ForwardSession, ModelAdapter
from .bidirectional import BidirectionalAdapter
from .block_causal import BlockCausalAdapter

_ADAPTERS: dict[str, type[ModelAdapter]] = {
    BlockCausalAdapter.name: BlockCausalAdapter,
    BidirectionalAdapter.name: BidirectionalAdapter,
}
#: model_type -> adapter name for families that are not block-causal.
MODEL_TYPE_ADAPTERS: dict[str, str] = {"llada": "bidirectional", "lladamoe": "bidirectional"}


def register_adapter(cls: type[ModelAdapter], model_types: tuple[str, ...] = ()) -> type[ModelAdapter]:
    """Register an adapter class under `cls.name`, optionally as the default for `model_types`."""
    if not (isinstance(cls, type) and issubclass(cls, ModelAdapter)) or not cls.name:
        raise TypeError(f"register_adapter expects a ModelAdapter subclass with a `name`, got {cls!r}.")
    _ADAPTERS[cls.name] = cls
    for model_type in model_types:
        MODEL_TYPE_ADAPTERS[model_type] = cls.name
    return cls


def resolve_adapter(model: Any, adapter: str | ModelAdapter | None) -> ModelAdapter:
    """The adapter to use for `model`.

    Raises:
        ValueError: unknown adapter name.
        TypeError: an object that is not a ModelAdapter.
    """
    if adapter is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        adapter = MODEL_TYPE_ADAPTERS.get(str(model_type), BlockCausalAdapter.name)
    if isinstance(adapter, str):
        if adapter not in _ADAPTERS:
            raise ValueError(f"Unknown adapter {adapter!r}; available: {sorted(_ADAPTERS)}.")
        return _ADAPTERS[adapter]()
    if isinstance(adapter, ModelAdapter):
        return adapter
    raise TypeError(
        f"`adapter` must be None, an adapter name ({sorted(_ADAPTERS)}) or a ModelAdapter, got {adapter!r}."
    )


__all__ = [
    "MODEL_TYPE_ADAPTERS",
    "BidirectionalAdapter",
    "BlockCausalAdapter",
    "ForwardSession",
    "ModelAdapter",
    "register_adapter",
    "resolve_adapter",
]
