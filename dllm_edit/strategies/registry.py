"""Registry of strategy classes, with an entry-point group for third-party strategies.

Examples:
    >>> from dataclasses import dataclass
    >>> from dllm_edit.strategies import Strategy, register_strategy, get_strategy
    >>> @register_strategy("doc_example_noop")
    ... @dataclass(frozen=True)
    ... class NoOp(Strategy):
    ...     def step(self, ctx):
    ...         raise NotImplementedError
    >>> get_strategy("doc_example_noop") is NoOp, get_strategy("NoOp") is NoOp  # the class name is an alias
    (True, True)
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from .base import Strategy

ENTRY_POINT_GROUP = "dllm_edit.strategies"

_REGISTRY: dict[str, type[Strategy]] = {}
_ALIASES: dict[str, str] = {}  # earlier or other spellings -> the registered name
_entry_points_loaded = False
_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def snake_case(name: str) -> str:
    """`name` in snake_case, the style of registry names.

    Examples:
        >>> snake_case("ThresholdUnmask"), snake_case("EBSampler"), snake_case("my_rule")
        ('threshold_unmask', 'eb_sampler', 'my_rule')
    """
    words = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", words)
    return words.replace("-", "_").lower()


def register_strategy(
    name: str | None = None, *, aliases: tuple[str, ...] = (), overwrite: bool = False
) -> Callable[[type[Strategy]], type[Strategy]]:
    """Class decorator registering a `Strategy` subclass under a snake_case `name`.

    Args:
        name: the registry name, snake_case (default: the class name in snake_case, e.g.
            `MyRule` -> `my_rule`).
        aliases: other names that find the class (e.g. the names of earlier releases); the class
            name is always one.
        overwrite: replace a class registered under the same name.

    Raises:
        TypeError: if the class is not a `Strategy` subclass.
        ValueError: if the name is not snake_case, or it (or an alias) is taken and `overwrite`
            is False.
    """

    def decorator(cls: type[Strategy]) -> type[Strategy]:
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise TypeError(f"register_strategy expects a Strategy subclass, got {cls!r}.")
        key = name or snake_case(cls.__name__)
        taken = _REGISTRY.get(key) or _REGISTRY.get(_ALIASES.get(key, ""))
        if taken is not None and taken is not cls and not overwrite:
            raise ValueError(
                f"A strategy named {key!r} is already registered ({taken.__qualname__}); "
                "pass overwrite=True or choose another name."
            )
        if not _NAME.fullmatch(key):
            raise ValueError(
                f"Strategy names are snake_case (lower-case words joined by '_'), got {key!r}; "
                f"register it as {snake_case(key)!r} (aliases=... keeps the old spelling working)."
            )
        for alias in (*aliases, cls.__name__):
            owner = _REGISTRY.get(_ALIASES.get(alias, alias))
            if alias != key and (owner is None or owner is cls or overwrite):
                _ALIASES[alias] = key
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
        if ep.name in _REGISTRY or ep.name in _ALIASES:
            continue
        try:
            register_strategy(ep.name)(ep.load())
        except (ImportError, AttributeError, TypeError, ValueError) as error:  # one bad plugin
            warnings.warn(
                f"entry point {ep.name!r} = {ep.value!r} of group {ENTRY_POINT_GROUP!r} was not registered: "
                f"{error}",
                stacklevel=2,
            )


def canonical_name(name: str) -> str:
    """The registered name `name` stands for (itself, or the name an alias points to).

    Raises:
        ValueError: no strategy has that name or alias (with the close names).
    """
    if name not in _REGISTRY and name not in _ALIASES:
        _load_entry_points()
    if name in _REGISTRY:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    close = difflib.get_close_matches(str(name), sorted({*_REGISTRY, *_ALIASES}), n=3)
    hint = f" Did you mean {close}?" if close else ""
    raise ValueError(f"Unknown strategy {name!r}; registered: {sorted(_REGISTRY)}.{hint}")


def get_strategy(name: str) -> type[Strategy]:
    """Look up a registered strategy class by name or alias (built-ins, decorated classes, entry points)."""
    return _REGISTRY[canonical_name(name)]


def available_strategies() -> list[str]:
    """The registered names of all strategies (aliases left out)."""
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
