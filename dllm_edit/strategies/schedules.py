"""Threshold schedules: a threshold as a function of the step within a block and of the block index.

A bare float anywhere a threshold is accepted means `Constant`. Schedules are evaluated on
per-row step counters, so rows of a batch that are at different steps get their own thresholds
without a Python loop.

Examples:
    >>> import torch
    >>> from dllm_edit.strategies import Cosine, as_schedule
    >>> sched = Cosine(start=0.9, end=0.5, num_steps=4)
    >>> [round(v, 3) for v in sched(torch.tensor([0, 4]), block_index=0).tolist()]
    [0.9, 0.5]
    >>> as_schedule(0.7)
    Constant(value=0.7)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

import torch

Axis = Literal["step", "block"]
_AXES = ("step", "block")


# What to suggest when a threshold is out of range: values the field accepts (the presets' own).
_RANGE_HINTS = {
    "threshold": "Use a value such as 0.5 (the speedy preset's) or 0.7 (the quality preset's).",
    "editing_threshold": "Use a value such as 0.0 (the speedy preset's: edit whenever the argmax differs) "
    "or 0.5 (the quality preset's), or None to turn editing off.",
    "multi_block_threshold": "Use a value such as 0.9, or None to follow editing_threshold.",
}


def _check_probability(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a float in [0, 1], got {type(value).__name__} {value!r}.")
    if not (0.0 <= float(value) <= 1.0) or math.isnan(value):
        hint = _RANGE_HINTS.get(name, "Use a value such as 0.5.")
        raise ValueError(f"`{name}` must be in [0, 1] (a probability threshold), got {value!r}. {hint}")


def _check_axis(axis: str) -> None:
    if axis not in _AXES:
        raise ValueError(f"`over` must be one of {_AXES}, got {axis!r}.")


class Schedule:
    """Base class of threshold schedules.

    Subclasses are frozen dataclasses implementing `value_at`, which maps a float tensor of
    positions along the schedule's axis (`over="step"`: the step within the block, `over="block"`:
    the index of the block among the generated blocks) to thresholds.
    """

    registry: ClassVar[dict[str, type[Schedule]]] = {}
    over: Axis

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Schedule.registry[cls.__name__] = cls

    def value_at(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, step: torch.Tensor, block_index: int | torch.Tensor = 0) -> torch.Tensor:
        """Thresholds for each row.

        Args:
            step: LongTensor `[B]`, the step within the current block of each row (0-based).
            block_index: index of the current block among the generated blocks (0-based).

        Returns:
            FloatTensor `[B]` of thresholds.
        """
        if self.over == "step":
            x = step.to(torch.float32)  # [B]
        else:
            x = torch.as_tensor(block_index, dtype=torch.float32, device=step.device).expand(step.shape)
        return self.value_at(x)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description, reloaded by `schedule_from_dict`."""
        return {"type": type(self).__name__, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True)
class Constant(Schedule):
    """The same threshold at every step and block.

    Examples:
        >>> import torch
        >>> Constant(0.5)(torch.tensor([0, 3])).tolist()
        [0.5, 0.5]
    """

    value: float
    over: Axis = field(default="step", repr=False)

    def __post_init__(self) -> None:
        _check_probability("Constant.value", self.value)
        _check_axis(self.over)

    def value_at(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, float(self.value))  # [B]


@dataclass(frozen=True)
class Linear(Schedule):
    """Linear interpolation from `start` (at 0) to `end` (at `num_steps`), constant afterwards.

    Examples:
        >>> import torch
        >>> [round(v, 3) for v in Linear(0.9, 0.5, num_steps=4)(torch.tensor([0, 2, 9])).tolist()]
        [0.9, 0.7, 0.5]
    """

    start: float
    end: float
    num_steps: int
    over: Axis = "step"

    def __post_init__(self) -> None:
        _check_probability("Linear.start", self.start)
        _check_probability("Linear.end", self.end)
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ValueError(f"`Linear.num_steps` must be a positive int, got {self.num_steps!r}.")
        _check_axis(self.over)

    def value_at(self, x: torch.Tensor) -> torch.Tensor:
        frac = (x / self.num_steps).clamp(0.0, 1.0)  # [B]
        return self.start + (self.end - self.start) * frac


@dataclass(frozen=True)
class Cosine(Schedule):
    """Cosine interpolation from `start` to `end` over `num_steps`, constant afterwards.

    Examples:
        >>> import torch
        >>> round(Cosine(0.9, 0.5, num_steps=2)(torch.tensor([1])).item(), 3)
        0.7
    """

    start: float
    end: float
    num_steps: int
    over: Axis = "step"

    def __post_init__(self) -> None:
        _check_probability("Cosine.start", self.start)
        _check_probability("Cosine.end", self.end)
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ValueError(f"`Cosine.num_steps` must be a positive int, got {self.num_steps!r}.")
        _check_axis(self.over)

    def value_at(self, x: torch.Tensor) -> torch.Tensor:
        frac = (x / self.num_steps).clamp(0.0, 1.0)  # [B]
        weight = 0.5 * (1.0 + torch.cos(math.pi * frac))  # 1 -> 0
        return self.end + (self.start - self.end) * weight


@dataclass(frozen=True)
class Stepwise(Schedule):
    """Piecewise-constant: `values[j]` applies from `boundaries[j-1]` (inclusive) to `boundaries[j]`.

    `len(values) == len(boundaries) + 1`; boundaries strictly increasing.

    Examples:
        >>> import torch
        >>> s = Stepwise(values=(0.9, 0.7, 0.5), boundaries=(1, 3), over="block")
        >>> [round(v, 3) for v in s(torch.tensor([0]), block_index=2).tolist()]
        [0.7]
    """

    values: tuple[float, ...]
    boundaries: tuple[int, ...]
    over: Axis = "step"

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        object.__setattr__(self, "boundaries", tuple(self.boundaries))
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError(
                "`Stepwise` needs len(values) == len(boundaries) + 1, got "
                f"{len(self.values)} values and {len(self.boundaries)} boundaries."
            )
        for v in self.values:
            _check_probability("Stepwise.values[...]", v)
        if any(b2 <= b1 for b1, b2 in zip(self.boundaries, self.boundaries[1:])):
            raise ValueError(f"`Stepwise.boundaries` must be strictly increasing, got {self.boundaries}.")
        _check_axis(self.over)

    def value_at(self, x: torch.Tensor) -> torch.Tensor:
        bounds = torch.tensor(self.boundaries, dtype=torch.float32, device=x.device)  # [K]
        values = torch.tensor(self.values, dtype=torch.float32, device=x.device)  # [K+1]
        idx = torch.bucketize(x.contiguous(), bounds, right=True)  # [B]
        return values[idx]


def as_schedule(value: float | Schedule | dict[str, Any], name: str = "threshold") -> Schedule:
    """Normalise a float, a `Schedule` or its dict form into a `Schedule`.

    Raises:
        TypeError: if `value` is none of these.
        ValueError: if a float is outside [0, 1].
    """
    if isinstance(value, Schedule):
        return value
    if isinstance(value, dict):
        return schedule_from_dict(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"`{name}` must be a float in [0, 1] or a Schedule (Constant, Linear, Cosine, Stepwise), "
            f"got {type(value).__name__} {value!r}."
        )
    _check_probability(name, value)
    return Constant(float(value))


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    """Rebuild a schedule from `Schedule.to_dict` output."""
    data = dict(data)
    kind = data.pop("type", None)
    if kind not in Schedule.registry:
        raise ValueError(f"Unknown schedule type {kind!r}; known: {sorted(Schedule.registry)}.")
    return Schedule.registry[kind](**data)
