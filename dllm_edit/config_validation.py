"""The value checks of `EditGenerationConfig`'s own fields (run by `EditGenerationConfig.validate`).

Each check raises a `ValueError` (a bad value) or a `TypeError` (a wrong type) naming the field.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from dllm_edit.config_fields import describe_refused, refused_fields_set
from dllm_edit.config_reconcile import is_number
from dllm_edit.layout import BLOCK_STARTS
from dllm_edit.strategies import Strategy, as_schedule
from dllm_edit.strategies import fields as checks

if TYPE_CHECKING:
    from dllm_edit.config import EditGenerationConfig


def validate_edit_fields(config: EditGenerationConfig) -> None:
    """Check the fields of ours (not transformers'), raising on a bad value."""
    check_int("block_length", config.block_length, minimum=1)
    check_block_start(config.block_start)
    as_schedule(config.threshold, name="threshold")
    for key in ("editing_threshold", "multi_block_threshold"):
        if getattr(config, key) is not None:
            as_schedule(getattr(config, key), name=key)
    check_int("max_post_steps", config.max_post_steps, minimum=0)
    check_int("num_to_transfer", config.num_to_transfer, minimum=1)
    check_int("multi_block_window", config.multi_block_window, minimum=1)
    if config.max_new_tokens is not None:
        check_int(
            "max_new_tokens", config.max_new_tokens, minimum=0
        )  # 0: infilling only (refused without masks)
    if config.steps is not None:
        check_int("steps", config.steps, minimum=1)
        if config.steps > config.block_length:
            raise ValueError(
                f"`steps` ({config.steps}) must be <= `block_length` ({config.block_length}) in the "
                "fixed-steps quota mode; use steps=None for threshold decoding."
            )
    if config.mask_token_id is not None:
        check_int("mask_token_id", config.mask_token_id, minimum=0)
    if config.max_steps_per_block not in (None, "auto"):
        check_int("max_steps_per_block", config.max_steps_per_block, minimum=1)
    validate_sampling(config)
    refused = refused_fields_set(config)
    if refused:
        raise ValueError(
            f"Unsupported generation option(s) for diffusion decoding: {describe_refused(refused)}. "
            "Unset them (the full table is dllm_edit.config_fields)."
        )
    if not isinstance(config.repeat_penalty, (int, float)) or config.repeat_penalty < 0:
        raise ValueError(f"`repeat_penalty` must be a float >= 0 (0 = off), got {config.repeat_penalty!r}.")
    for key in (
        "eos_early_stop",
        "eos_fill",
        "multi_block_edit",
        "suppress_mask_token",
        "output_trace",
        "compile",
    ):
        if not isinstance(getattr(config, key), bool):
            raise TypeError(f"`{key}` must be a bool, got {getattr(config, key)!r}.")
    if config.strategies is not None:
        if not config.strategies:
            raise ValueError("`strategies` must be None or a non-empty list of Strategy objects.")
        if not any(s.unmasks for s in config.strategies):
            raise ValueError(
                "`strategies` must contain an unmasking strategy (e.g. ThresholdUnmask): "
                "otherwise masked positions are never filled."
            )
        check_cap_fits(config, config.strategies)
    if config.unmasking is not None:
        if not isinstance(config.unmasking, Strategy) or not config.unmasking.unmasks:
            raise TypeError(
                "`unmasking` must be None, a registered unmasking strategy's name or dict, or a "
                f"Strategy with unmasks=True, got {config.unmasking!r}; see "
                "dllm_edit.strategies.available_strategies()."
            )
        if config.steps is not None:
            raise ValueError(
                f"`unmasking`={config.unmasking.registry_name()!r} and `steps`={config.steps} are both set: "
                "`steps` selects LLaDA's fixed-steps quota rule, itself an unmasking rule. "
                "Set steps=None to use the unmasking strategy, or unmasking=None for the quota mode."
            )
        if config.strategies is not None:
            raise ValueError(
                "`unmasking` and `strategies` are both set: an explicit `strategies` list replaces "
                "every built strategy. Put the unmasking strategy into `strategies`, or set "
                "strategies=None."
            )
        check_cap_fits(config, config.build_strategies())


def check_cap_fits(config: EditGenerationConfig, strategies: list[Strategy]) -> None:
    """Refuse a hard cap too small for the extra forwards a strategy may add to a block (e.g.
    `LowConfidenceRemask`): the cap would end a block with masks left."""
    extra = max(s.extra_forwards_per_block for s in strategies)
    cap = config.steps_cap()
    if cap is not None and extra and cap < config.block_length + config.max_post_steps + extra:
        needed = config.block_length + config.max_post_steps + extra
        raise ValueError(
            f"`max_steps_per_block`={cap} is below the {needed} forwards a block may need "
            f"(block_length {config.block_length} + max_post_steps {config.max_post_steps} + {extra} for "
            "the strategies' extra steps, e.g. LowConfidenceRemask.max_steps): a block could end with a "
            f"mask left. Raise max_steps_per_block to >= {needed}, or lower the strategy's max_steps."
        )


def validate_sampling(config: EditGenerationConfig) -> None:
    """Check the sampling fields: temperature, do_sample, top_k, top_p, repetition_penalty."""
    temperature = config.temperature if config.temperature is not None else 0.0
    if not is_number(temperature) or temperature < 0:
        raise ValueError(f"`temperature` must be a float >= 0 (0 = greedy), got {config.temperature!r}.")
    if config.do_sample is not None and bool(config.do_sample) != (temperature > 0):
        raise ValueError(
            f"`do_sample`={config.do_sample!r} contradicts `temperature`={config.temperature!r}: "
            "temperature 0 is greedy and > 0 samples. Set only `temperature` (do_sample follows it)."
        )
    if config.top_k is not None:
        check_int("top_k", config.top_k, minimum=0)
    if config.top_p is not None and not (0.0 < float(config.top_p) <= 1.0):
        raise ValueError(f"`top_p` must be in (0, 1], got {config.top_p!r}.")
    if config.repetition_penalty is not None and (
        not is_number(config.repetition_penalty) or config.repetition_penalty <= 0
    ):
        raise ValueError(
            f"`repetition_penalty` must be a float > 0 (1.0 = off), got {config.repetition_penalty!r}."
        )


def refuse_unread_unmask_fields(config: EditGenerationConfig, fields: dict[str, Any]) -> None:
    """`threshold` / `num_to_transfer` configure the default M2T rule: setting them next to an
    `unmasking` strategy, which replaces that rule, would be silently ignored."""
    if config.unmasking is None:
        return
    unread = [key for key in ("threshold", "num_to_transfer") if key in fields]
    if unread:
        name = config.unmasking.registry_name()
        raise ValueError(
            f"{unread} set while `unmasking`={name!r} replaces the threshold rule they configure, so they "
            f"would be ignored. Set the strategy's own fields instead (e.g. unmasking={{'type': {name!r}, "
            "...}), or unmasking=None to use the threshold rule."
        )


def check_block_start(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(
            f"`block_start` must be None (the adapter's default), 'absolute' or 'prompt_end', "
            f"got {type(value).__name__} {value!r}."
        )
    if value not in BLOCK_STARTS:
        close = difflib.get_close_matches(value, BLOCK_STARTS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"`block_start` must be None (the adapter's default), 'absolute' (LLaDA2.x: blocks at "
            f"absolute positions) or 'prompt_end' (LLaDA-1, Dream: blocks from the end of the prompt), "
            f"got {value!r}.{hint}"
        )


def check_int(name: str, value: Any, minimum: int) -> None:
    """The shared int validator (`dllm_edit.strategies.fields.integer`), for a field of the config."""
    checks.integer("", name, value, minimum)
