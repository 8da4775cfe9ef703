"""Field validators shared by every strategy and by `EditGenerationConfig`.

Each validator takes the owner's name (the class or config the field belongs to), the field's name,
its value and, where it helps, a hint (the paper's default, what the field means); it returns the
normalised value or raises a `TypeError` (wrong kind) or `ValueError` (out of range) that names the
field, the owner, the constraint, the value and the hint:

    `gamma` of EBSampler must be a finite float >= 0 (EB-Sampler's entropy bound, 1e-3 by default), got -1.0.

Examples:
    >>> positive_int("Demo", "steps", 4)
    4
    >>> real("Demo", "gamma", 1, minimum=0.0)
    1.0
    >>> choice("Demo", "alg", "entropi", ("origin", "entropy"))
    Traceback (most recent call last):
    ...
    ValueError: `alg` of Demo must be one of ['origin', 'entropy'], got 'entropi'. Did you mean 'entropy'?
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any, overload

from .schedules import Schedule, as_schedule


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _hint(hint: str) -> str:
    return f" ({hint})" if hint else ""


def _subject(owner: str, name: str) -> str:
    return f"`{name}` of {owner}" if owner else f"`{name}`"


def integer(owner: str, name: str, value: Any, minimum: int = 0, hint: str = "") -> int:
    """An int `>= minimum` (bools refused).

    Raises:
        TypeError: not an int.
        ValueError: below `minimum`.
    """
    if not _is_int(value):
        raise TypeError(
            f"{_subject(owner, name)} must be an int >= {minimum}{_hint(hint)}, "
            f"got {type(value).__name__} {value!r}."
        )
    if value < minimum:
        raise ValueError(f"{_subject(owner, name)} must be an int >= {minimum}{_hint(hint)}, got {value}.")
    return int(value)


def positive_int(owner: str, name: str, value: Any, hint: str = "") -> int:
    """An int `>= 1`."""
    return integer(owner, name, value, 1, hint)


@overload
def optional_int(owner: str, name: str, value: None, minimum: int = 1, hint: str = "") -> None: ...
@overload
def optional_int(owner: str, name: str, value: Any, minimum: int = 1, hint: str = "") -> int | None: ...
def optional_int(owner: str, name: str, value: Any, minimum: int = 1, hint: str = "") -> int | None:
    """None, or an int `>= minimum`.

    Raises:
        ValueError: anything else (the message says None is allowed).
    """
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise ValueError(
            f"{_subject(owner, name)} must be None or an int >= {minimum}{_hint(hint)}, got {value!r}."
        )
    return int(value)


def real(
    owner: str,
    name: str,
    value: Any,
    minimum: float = -math.inf,
    maximum: float = math.inf,
    strict_minimum: bool = False,
    hint: str = "",
    strict_maximum: bool = False,
) -> float:
    """A finite float in `[minimum, maximum]` (an open end with `strict_minimum` /
    `strict_maximum`); ints are accepted and converted, bools refused.

    Raises:
        TypeError: not a real number.
        ValueError: not finite, or out of range.
    """
    low = "-inf" if minimum == -math.inf else f"{minimum:g}"
    if maximum < math.inf:
        bound = f"in {'(' if strict_minimum else '['}{low}, {maximum:g}{')' if strict_maximum else ']'}"
    elif minimum > -math.inf:
        bound = f"{'>' if strict_minimum else '>='} {low}"
    else:
        bound = ""
    what = f"a finite float {bound}".rstrip()
    if not _is_real(value):
        raise TypeError(
            f"{_subject(owner, name)} must be {what}{_hint(hint)}, got {type(value).__name__} {value!r}."
        )
    above = value > minimum if strict_minimum else value >= minimum
    below = value < maximum if strict_maximum else value <= maximum
    if not (math.isfinite(value) and above and below):
        raise ValueError(f"{_subject(owner, name)} must be {what}{_hint(hint)}, got {value!r}.")
    return float(value)


def optional_real(owner: str, name: str, value: Any, **bounds: Any) -> float | None:
    """None, or `real(...)` of the value."""
    return None if value is None else real(owner, name, value, **bounds)


def reals(owner: str, name: str, value: Any, count: int, hint: str = "") -> tuple[float, ...]:
    """A sequence of exactly `count` finite floats, as a tuple.

    Raises:
        ValueError: not a sequence of that length, or an entry is not a finite number.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != count:
        raise ValueError(
            f"{_subject(owner, name)} must be a sequence of {count} floats{_hint(hint)}, got {value!r}."
        )
    if not all(_is_real(v) and math.isfinite(v) for v in value):
        raise ValueError(
            f"{_subject(owner, name)} must hold {count} finite floats{_hint(hint)}, got {value!r}."
        )
    return tuple(float(v) for v in value)


def flag(owner: str, name: str, value: Any) -> bool:
    """A bool (not an int standing for one).

    Raises:
        TypeError: anything else.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{_subject(owner, name)} must be a bool, got {type(value).__name__} {value!r}.")
    return value


def choice(owner: str, name: str, value: Any, choices: Sequence[str], hint: str = "") -> str:
    """One of `choices`; the error suggests the closest one.

    Raises:
        ValueError: not one of them.
    """
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        suggestion = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"{_subject(owner, name)} must be one of {list(choices)}{_hint(hint)}, got {value!r}.{suggestion}"
        )
    return str(value)


def threshold_field(name: str, value: Any) -> Schedule:
    """A threshold: a float in [0, 1] or a `Schedule` (a bare float is a `Constant`)."""
    return as_schedule(value, name=name)


__all__ = [
    "choice",
    "flag",
    "integer",
    "optional_int",
    "optional_real",
    "positive_int",
    "real",
    "reals",
    "threshold_field",
]
