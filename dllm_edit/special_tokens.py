"""Resolution of the mask / EOS / pad token ids. No id is ever hard-coded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SpecialTokens:
    mask: int
    eos: tuple[int, ...]
    pad: int


def _as_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def resolve_special_tokens(model: Any, config: Any) -> SpecialTokens:
    """Find the ids: the generation config passed in, then the model's generation config, then its config.

    Raises:
        ValueError: when no mask token id is found anywhere.
    """
    model_gen = getattr(model, "generation_config", None)
    model_cfg = getattr(model, "config", None)
    mask = _first(
        config.mask_token_id,
        getattr(model_gen, "mask_token_id", None),
        getattr(model_cfg, "mask_token_id", None),
    )
    if mask is None:
        raise ValueError(
            "No mask token id could be resolved: `mask_token_id` is unset in the generation config, the "
            "model's generation_config and the model config. Pass mask_token_id=tokenizer.mask_token_id "
            "(or set model.generation_config.mask_token_id)."
        )
    eos = _as_ids(
        _first(
            config.eos_token_id,
            getattr(model_gen, "eos_token_id", None),
            getattr(model_cfg, "eos_token_id", None),
        )
    )
    pad = _first(
        config.pad_token_id,
        getattr(model_gen, "pad_token_id", None),
        getattr(model_cfg, "pad_token_id", None),
    )
    if pad is None:
        pad = eos[0] if eos else int(mask)
    return SpecialTokens(mask=int(mask), eos=eos, pad=int(pad))
