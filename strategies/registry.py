"""Registry of strategy classes, with an entry-point group for third-party strategies.

Examples:
    >>> from dataclasses import dataclass
    >>> from dllm_edit.strategies import Strategy, register_strategy, get_strategy
    >>> @register_strategy("doc_example_noop")
    ... @dataclass(frozen=True)
    ... class NoOp(Strategy):
    ...     def step(self, ctx):
    ...         raise NotImplementedError
    >>> get_strategy("doc_example_noop") is NoOp
    True
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from .base import Strategy

ENTRY_POINT_GROUP = "dllm_edit.strategies"
_REGISTRY: dict[str, type[Strategy]] = {}
_entry_points_loaded = False


def register_strategy(
    name: str | None = None, *, overwrite: bool = False
) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator registering a `Strategy` subclass under `name` (default: class name).

    Raises:
        TypeError: if the class is not a `Strategy` subclass.
        ValueError: if the name is taken and `overwrite` is False.
    """

    def decorator(cls: type[Strategy]) -> type[Strategy]:
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise TypeError(f"register_strategy expects a Strategy subclass, got {cls!r}.")
        key = name or cls.__name__
        if key in _REGISTRY and _REGISTRY[key] is not cls and not overwrite:
            raise ValueError(
                f"A strategy named {key!r} is already registered ({_REGISTRY[key].__qualname__}); "
                "pass overwrite=True or choose another name."
            )
        _REGISTRY[key] = cls
        if not cls.__dict__.get("name"):
            cls.name = key  # so to_dict() records the name the class is registered under
        return cls

    return decorator


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            register_strategy(ep.name)(ep.load())


def get_strategy(name: str) -> type[Strategy]:
    """Look up a registered strategy class (built-ins, decorated classes, entry points)."""
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), sorted(_REGISTRY), n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(f"Unknown strategy {name!r}; registered: {sorted(_REGISTRY)}.{hint}")
    return _REGISTRY[name]


def available_strategies() -> list[str]:
    """Names of all registered strategies."""
    _load_entry_points()
    return sorted(_REGISTRY)


def strategy_from_dict(data: dict[str, Any]) -> Strategy:
    """Rebuild a strategy from `Strategy.to_dict` output."""
    data = dict(data)
    kind = data.pop("type", None)
    if not isinstance(kind, str):
        raise ValueError(f"A strategy dict needs a 'type' key naming a registered strategy, got {data!r}.")
    cls = get_strategy(kind)
    accepted = _init_fields(cls)
    unknown = sorted(set(data) - accepted) if accepted is not None else []
    if unknown:  # a misspelt field: name it and the close ones, rather than Python's bare TypeError
        close = {key: difflib.get_close_matches(key, sorted(accepted or ()), n=2) for key in unknown}
        hints = "; ".join(f"{key!r}: did you mean {near}?" for key, near in close.items() if near)
        raise TypeError(
            f"Strategy {kind!r} has no field(s) {unknown}; its fields are {sorted(accepted or ())}."
            + (f" {hints}" if hints else "")
        )
    return cls(**data)


def _init_fields(cls: type[Strategy]) -> set[str] | None:
    """The keyword arguments `cls(...)` takes (None: it takes any, through `**kwargs`)."""
    import inspect

    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a class without a signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
