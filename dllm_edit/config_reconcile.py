"""Reconciling transformers' `GenerationConfig` conventions with `EditGenerationConfig`.

transformers and dllm_edit read some fields differently: `do_sample=False` is greedy whatever
`temperature` says, `top_k=0` / `top_p=1.0` mean off, bookkeeping keys ride along in saved files,
and a model's own saved config carries fields (beam search, `max_length`, `use_cache`) that mean
something else or nothing for diffusion decoding. This module holds those rules, so the config
class itself stays a schema: its fields, defaults and validation.
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from transformers import GenerationConfig

from dllm_edit.config_fields import METADATA, REFUSED, describe_refused, is_off

logger = logging.getLogger("dllm_edit.config")

# Filters of the sampling distribution, with the value that means "off" (transformers' conventions).
SAMPLING_FILTERS: dict[str, Any] = {
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}

# transformers' bookkeeping keys, passed to the constructor by `from_dict` / `from_pretrained` on 4.57
# and 5.x (`GenerationConfig.__init__` pops them); never generation options.
BOOKKEEPING = frozenset(
    {"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash"}
)


def close_matches(unknown: list[str], valid: set[str]) -> dict[str, list[str]]:
    """The closest valid names of each unknown key (for error messages)."""
    return {key: difflib.get_close_matches(key, sorted(valid), n=3) for key in unknown}


def refuse_unknown_keys(kwargs: dict[str, Any], valid: set[str]) -> None:
    """Refuse constructor keys that are no field (a typo such as `treshold` would otherwise be kept as
    an attribute, saved, and never read), in place.

    transformers' bookkeeping keys pass. `from_model_config` (`_from_model_config=True`) hands over
    every key of a model config (`hidden_size`, ...): those that are no generation field are dropped.

    Raises:
        TypeError: a key that is neither a field nor bookkeeping, with the closest valid names.
    """
    unknown = sorted(key for key in kwargs if key not in valid and key not in BOOKKEEPING)
    if not unknown:
        return
    if kwargs.get("_from_model_config"):
        for key in unknown:
            del kwargs[key]
        return
    raise TypeError(
        f"Unknown generation option(s) {unknown}: not fields of EditGenerationConfig. Closest valid "
        f"names: {close_matches(unknown, valid)}. For a generation_config.json written by another tool, "
        "load it with transformers.GenerationConfig.from_pretrained and pass it to "
        "EditGenerationConfig.from_generation_config(config, strict=False), which drops unknown keys "
        "with a warning."
    )


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reconcile_sampling(fields: dict[str, Any]) -> None:
    """Fill whichever of `temperature` / `do_sample` is missing from the other, in place.

    Temperature 0 is greedy (the reference decoder's convention); `do_sample=True` alone means
    temperature 1.0 (transformers' default). A contradiction is left for `validate` to refuse.
    """
    temperature, do_sample = fields.get("temperature"), fields.get("do_sample")
    if temperature is None:
        temperature = 1.0 if do_sample else 0.0
    if do_sample is None and is_number(temperature):
        do_sample = temperature > 0
    fields["temperature"], fields["do_sample"] = temperature, do_sample


def plain_config_updates(
    config: GenerationConfig, base: Any, valid: set[str], ours: set[str], strict: bool
) -> dict[str, Any]:
    """The fields a plain `GenerationConfig` sets, as updates of `base` (an `EditGenerationConfig`);
    see `EditGenerationConfig.from_generation_config` for the rules, `valid` being its field names
    and `ours` the names dllm_edit adds."""
    fields = {key: value for key, value in config.to_diff_dict().items() if key not in METADATA}
    refused = {key: fields.pop(key) for key in list(fields) if key in REFUSED}
    refused = {key: value for key, value in refused.items() if not is_off(key, value)}
    if refused and strict:
        raise ValueError(
            "GenerationConfig field(s) with no meaning for diffusion decoding: "
            f"{describe_refused(refused)}. Unset them, or pass an EditGenerationConfig (see "
            "EditGenerationConfig.from_mode)."
        )
    if refused:
        logger.warning(
            "Ignoring the model's generation_config field(s) %s: they have no meaning for diffusion "
            "decoding (see dllm_edit.config_fields).",
            sorted(refused),
        )
    unknown = sorted(set(fields) - valid)
    if unknown and strict:
        raise TypeError(
            f"Unknown generation option(s) {unknown} in the GenerationConfig: not fields of "
            f"EditGenerationConfig. Closest valid names: {close_matches(unknown, valid)}. "
            "Fix or remove them; pass strict=False to drop them with a warning."
        )
    if unknown:
        logger.warning(
            "Ignoring unknown generation_config field(s) %s: not fields of EditGenerationConfig "
            "(written by another tool?).",
            unknown,
        )
    updates = {key: value for key, value in fields.items() if key in valid}
    updates.pop("do_sample", None)
    if not strict and not set(fields) & ours:
        # a model's own config not written by dllm_edit: its `use_cache` (True in nearly every
        # model config) is transformers' left-to-right cache switch, not a choice of block cache
        updates.pop("use_cache", None)
    for key, off in SAMPLING_FILTERS.items():
        if updates.get(key) == off:
            updates[key] = None
    if config.do_sample:
        updates["temperature"] = float(config.temperature if config.temperature is not None else 1.0)
    elif "do_sample" in fields or "temperature" in fields:
        updates["temperature"] = 0.0  # transformers: not sampling means greedy
    if not updates.get("temperature", base.temperature):
        dropped = sorted(key for key in SAMPLING_FILTERS if updates.get(key) is not None)
        if dropped:
            logger.warning(
                "Greedy decoding (do_sample off): the sampling filter(s) %s do not apply.", dropped
            )
        for key in SAMPLING_FILTERS:
            updates[key] = None
    return updates
