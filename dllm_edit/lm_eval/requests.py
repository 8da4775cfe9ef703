"""lm-eval generation requests: their keyword arguments as config overrides, stop strings, batching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# lm-eval's names for settings the config spells differently
_RENAMED = {"max_gen_toks": "max_new_tokens"}


def split_gen_kwargs(gen_kwargs: Any, index: int) -> tuple[list[str], dict[str, Any]]:
    """A request's stop strings and its config overrides (`max_gen_toks` → `max_new_tokens`).

    Args:
        gen_kwargs: the request's generation keyword arguments (a dict with `until`).
        index: the request's position, for the error message.

    Returns:
        `(until, overrides)`: the stop strings of this row and the `EditGenerationConfig` fields to
        set for it (`do_sample=False` becomes `temperature=0`).

    Raises:
        TypeError / ValueError: not a dict, no `until`, or `until` not a string or list of strings.

    Examples:
        >>> split_gen_kwargs({"until": "\\n", "max_gen_toks": 8, "do_sample": False}, 0)
        (['\\n'], {'max_new_tokens': 8, 'temperature': 0.0})
    """
    if not isinstance(gen_kwargs, dict):
        raise TypeError(
            f"generate_until request {index}: the generation arguments must be a dict, got "
            f"{type(gen_kwargs).__name__} {gen_kwargs!r}."
        )
    kwargs = dict(gen_kwargs)
    if "until" not in kwargs:
        raise ValueError(
            f"generate_until request {index} has no `until` (its generation arguments: {gen_kwargs!r}). "
            "Set `until` in the task's generation_kwargs (a list of stop strings; [] for none)."
        )
    until = kwargs.pop("until")
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, (list, tuple)) or not all(isinstance(s, str) and s for s in until):
        raise ValueError(
            f"generate_until request {index}: `until` must be a non-empty string or a list of them, "
            f"got {until!r}."
        )
    overrides = {_RENAMED.get(key, key): value for key, value in kwargs.items()}
    do_sample = overrides.pop("do_sample", None)
    if do_sample is False:
        overrides["temperature"] = 0.0
    elif do_sample is True and not overrides.get("temperature"):
        raise ValueError(
            f"generate_until request {index}: do_sample=True needs a temperature > 0 (got "
            f"{overrides.get('temperature')!r}); temperature 0 is greedy decoding."
        )
    return list(until), overrides


def cut_at_stop(text: str, until: Sequence[str]) -> str:
    """`text` up to the earliest occurrence of any stop string (the stop string itself removed).

    Examples:
        >>> cut_at_stop("12\\nQ: next", ["Q:", "\\n"])
        '12'
    """
    cut = len(text)
    for stop in until:
        found = text.find(stop)
        if found != -1:
            cut = min(cut, found)
    return text[:cut]


def group_key(overrides: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable key: requests with equal overrides decode in the same batches."""
    return tuple(sorted((key, repr(value)) for key, value in overrides.items()))
