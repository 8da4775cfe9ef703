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

    def ladder(name: str) -> Any:
        return find_token_id(name, model, config, tokenizer)

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


def token_id_sources(model: Any, config: Any, tokenizer: Any = None) -> tuple[Any, ...]:
    """Where special token ids are looked up, in order: the config passed in (a generation config, or
    a trainer config with a `mask_token_id` field), the model's generation config, the tokenizer, the
    model config. Decoding (`resolve_special_tokens`) and the trainers share this order."""
    return (config, getattr(model, "generation_config", None), tokenizer, getattr(model, "config", None))


def find_token_id(name: str, model: Any, config: Any, tokenizer: Any = None) -> Any:
    """The first `name` (e.g. `"mask_token_id"`) set in `token_id_sources`, or None.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> model = NS(generation_config=NS(mask_token_id=None), config=NS(mask_token_id=5))
        >>> find_token_id("mask_token_id", model, NS(mask_token_id=None), NS(mask_token_id=7))
        7
    """
    return _first(*(getattr(source, name, None) for source in token_id_sources(model, config, tokenizer)))


def completion_lengths(completion: torch.Tensor, eos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens before the first EOS of each row, and whether the row has one.

    Args:
        completion: LongTensor `[B, N]`, generated tokens (no prompt).
        eos: LongTensor `[E]`, the EOS ids.

    Returns:
        `(lengths, has_eos)`: LongTensor `[B]` (N where no EOS) and BoolTensor `[B]`.

    Examples:
        >>> import torch
        >>> completion_lengths(torch.tensor([[4, 1, 5], [4, 4, 4]]), torch.tensor([1]))
        (tensor([1, 3]), tensor([ True, False]))
    """
    is_eos = torch.isin(completion, eos.to(completion.device))  # [B, N]
    has_eos = is_eos.any(dim=1)  # [B]
    first = is_eos.long().argmax(dim=1)  # [B] index of the first EOS (0 when none)
    return torch.where(has_eos, first, torch.full_like(first, completion.shape[1])), has_eos
