"""Resolution of the mask / EOS / pad token ids. No id is ever hard-coded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SpecialTokens:
    mask: int
    eos: tuple[int, ...]
    pad: int

    def eos_tensor(self, device: torch.device) -> torch.Tensor:
        """The EOS ids as a LongTensor `[E]` (for `torch.isin`)."""
        return torch.tensor(self.eos, dtype=torch.long, device=device)


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


def resolve_special_tokens(model: Any, config: Any, tokenizer: Any = None) -> SpecialTokens:
    """Find the ids, trying in order: the generation config passed in, the model's generation config,
    the tokenizer (if given), the model config.

    Raises:
        ValueError: when no mask token id is found anywhere.
    """
    sources = (config, getattr(model, "generation_config", None), tokenizer, getattr(model, "config", None))

    def ladder(name: str) -> Any:
        return _first(*(getattr(source, name, None) for source in sources))

    mask = ladder("mask_token_id")
    if mask is None:
        raise ValueError(
            "No mask token id could be resolved: `mask_token_id` is unset in the generation config, the "
            "model's generation_config, the tokenizer and the model config. Pass "
            "mask_token_id=tokenizer.mask_token_id (or set model.generation_config.mask_token_id)."
        )
    eos = _as_ids(ladder("eos_token_id"))
    pad = ladder("pad_token_id")
    if pad is None:
        pad = eos[0] if eos else int(mask)
    return SpecialTokens(mask=int(mask), eos=eos, pad=int(pad))
