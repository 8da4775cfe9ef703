"""Reward functions with TRL's calling convention, and group-relative advantages.

A reward function is a plain callable

    reward(prompts, completions, completion_ids, **kwargs) -> list[float | None]

called with keyword arguments: `prompts` and `completions` (strings, or lists of chat messages for
conversational datasets), `completion_ids` (lists of token ids), every other dataset column (one
value per completion) and `trainer_state`. `None` means "no opinion" on that completion: with several
functions, the weighted sum skips it; a completion no function scores gets reward 0 (counted).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

RewardFunc = Callable[..., Sequence[float | None]]
SCALE_REWARDS = ("group", "batch", "none")
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


def reward_name(func: Any) -> str:
    """A readable name for logs and errors."""
    return getattr(func, "__name__", None) or type(func).__name__


def load_reward_func(spec: str | RewardFunc) -> RewardFunc:
    """A callable, or one named `"package.module:function"` (as in YAML recipes).

    Raises:
        ValueError: a string that is not `module:function`, or names nothing callable.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(
            f"A reward function must be a callable or a 'package.module:function' string, got {spec!r}."
        )
    module_name, _, attr = spec.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"Cannot load reward function {spec!r}: {err}.") from err
    if not callable(func):
        raise ValueError(f"{spec!r} is not callable.")
    return func


def check_reward_func(func: RewardFunc) -> None:
    """Raise a TypeError naming `func` unless it can take TRL's keyword arguments."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return  # builtins and C callables: trust them
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = {
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    required = {
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    known = {"prompts", "completions", "completion_ids", "trainer_state"}
    if not takes_kwargs and not {"completions"} <= named:
        raise TypeError(
            f"Reward function {reward_name(func)!r} takes {sorted(named)}; a reward function is called with "
            "keyword arguments prompts=, completions=, completion_ids=, trainer_state= and the dataset "
            "columns. Give it the signature `(prompts, completions, **kwargs)`."
        )
    unknown_required = required - known
    if unknown_required and not takes_kwargs:
        raise TypeError(
            f"Reward function {reward_name(func)!r} requires {sorted(unknown_required)}, which are "
            "not passed unless they are dataset columns; add **kwargs and read them from there."
        )


def compute_rewards(
    funcs: Sequence[RewardFunc],
    *,
    prompts: list[Any],
    completions: list[Any],
    completion_ids: list[list[int]],
    columns: dict[str, list[Any]],
    trainer_state: Any = None,
) -> torch.Tensor:
    """Call every reward function; FloatTensor `[B, F]` with NaN where a function returned None.

    Raises:
        ValueError: a function that returns something other than one value per completion.
    """
    batch = len(completions)
    out = torch.full((batch, len(funcs)), float("nan"))
    for j, func in enumerate(funcs):
        values = func(
            prompts=prompts,
            completions=completions,
            completion_ids=completion_ids,
            trainer_state=trainer_state,
            **columns,
        )
        if values is None or not hasattr(values, "__len__") or len(values) != batch:
            got = (
                "None"
                if values is None
                else f"{type(values).__name__} of length {len(values)}"
                if hasattr(values, "__len__")
                else type(values).__name__
            )
            raise ValueError(
                f"Reward function {reward_name(func)!r} must return one value (float or None) per "
                f"completion: expected {batch}, got {got}."
            )
        out[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
    return out


def combine_rewards(
    rewards: torch.Tensor, weights: Sequence[float] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted sum over functions ignoring None (NaN); `(total [B], unscored [B] bool)`."""
    w = torch.ones(rewards.shape[1]) if weights is None else torch.tensor(list(weights), dtype=torch.float32)
    unscored = torch.isnan(rewards).all(dim=1)  # [B]
    total = torch.nansum(rewards * w[None], dim=1)  # [B] (0 when unscored)
    return total, unscored


def group_advantages(rewards: torch.Tensor, num_generations: int, scale: str = "group") -> torch.Tensor:
    """Group-relative advantages: reward minus its group's mean, divided by a std (`scale`).

    Args:
        rewards: FloatTensor `[B]`, consecutive groups of `num_generations` completions per prompt.
        num_generations: group size.
        scale: `"group"` (divide by the group std), `"batch"` (by the batch std) or `"none"`.

    Examples:
        >>> import torch
        >>> group_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2, scale="none").tolist()
        [0.5, -0.5, 0.0, 0.0]
    """
    if scale not in SCALE_REWARDS:
        raise ValueError(f"`scale_rewards` must be one of {list(SCALE_REWARDS)}, got {scale!r}.")
    grouped = rewards.view(-1, num_generations)  # [P, G]
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)  # [B]
    if scale == "group":
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)  # [B]
        return centred / (std + 1e-4)
    if scale == "batch":
        return centred / (rewards.std() + 1e-4)
    return centred


def _nanstd(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Sample standard deviation over `dim` ignoring NaN (keepdim); NaN where fewer than 2 values."""
    count = (~torch.isnan(values)).sum(dim=dim, keepdim=True)
    centred = values - torch.nanmean(values, dim=dim, keepdim=True)
    return (torch.nansum(centred**2, dim=dim, keepdim=True) / (count - 1)).sqrt()


def policy_advantages(
    rewards: torch.Tensor,
    weights: Sequence[float] | None,
    num_generations: int,
    scale: str = "group",
    aggregation: str = "sum_then_normalize",
) -> torch.Tensor:
    """Advantages `[B]` from the per-function rewards `[B, F]` (NaN = no opinion), as TRL's GRPO forms them.

    - `"sum_then_normalize"`: the weighted sum of the rewards (`combine_rewards`), then
      `group_advantages` with `scale`.
    - `"normalize_then_sum"` (GDPO): each function's rewards are normalised within their group
      (mean 0, std 1, ignoring None), summed with the weights, and the sum normalised over the
      batch (`scale` does not apply, as in TRL).

    Examples:
        >>> import torch
        >>> r = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 10.0], [0.0, 0.0]])  # 2 groups, 2 functions
        >>> policy_advantages(r, None, 2, scale="none").tolist()  # the larger reward scale dominates
        [0.5, -0.5, 5.0, -5.0]
        >>> [round(a, 2) for a in policy_advantages(r, None, 2, aggregation="normalize_then_sum").tolist()]
        [0.87, -0.87, 0.87, -0.87]
    """
    if aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
        raise ValueError(
            f"`multi_objective_aggregation` must be one of {list(MULTI_OBJECTIVE_AGGREGATIONS)}, got "
            f"{aggregation!r}."
        )
    if aggregation == "sum_then_normalize":
        total, _ = combine_rewards(rewards, weights)  # [B]
        return group_advantages(total, num_generations, scale)
    w = torch.ones(rewards.shape[1]) if weights is None else torch.tensor(list(weights), dtype=torch.float32)
    grouped = rewards.view(-1, num_generations, rewards.shape[1])  # [P, G, F]
    std = _nanstd(grouped, dim=1) if num_generations > 1 else torch.zeros_like(grouped[:, :1])  # [P, 1, F]
    z = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (std.nan_to_num(0.0) + 1e-4)  # [P, G, F]
    total = torch.nansum(z.view(rewards.shape) * w[None], dim=1)  # [B] (0 when unscored)
    spread = total.std() if total.numel() > 1 else torch.zeros(())
    return (total - total.mean()) / (spread + 1e-4)  # [B]


def _text(completion: Any) -> str:
    if isinstance(completion, list):  # conversational: the assistant message(s)
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def exact_match_reward(
    completions: list[Any],
    answer: list[str] | None = None,
    completion: list[str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """1.0 where the completion equals the reference (whitespace-stripped), else 0.0.

    The reference is the dataset's `answer` column, or its `completion` column (the SFT format,
    e.g. `dllm_edit.data.synthetic_examples`).

    Raises:
        ValueError: the dataset has neither column.

    Examples:
        >>> exact_match_reward(["42", " 7"], answer=["42", "8"])
        [1.0, 0.0]
    """
    reference = answer if answer is not None else completion
    if reference is None:
        raise ValueError(
            "exact_match_reward needs the reference answers in an 'answer' (or 'completion') dataset column."
        )
    return [float(_text(c).strip() == str(a).strip()) for c, a in zip(completions, reference, strict=True)]
