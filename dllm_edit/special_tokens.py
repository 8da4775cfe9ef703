"""Resolution of the mask / EOS / pad token ids. No id is ever hard-coded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dllm_edit.vocab import input_vocab_size


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
    vocab = input_vocab_size(model)
    sources = token_id_sources(model, config, tokenizer)
    for name in ("mask_token_id", "eos_token_id", "pad_token_id"):
        check_token_ids(name, ladder(name), vocab, _source_name(name, sources))
    check_token_ids(
        "suppress_tokens", getattr(config, "suppress_tokens", None), vocab, "the generation config"
    )
    eos = _as_ids(ladder("eos_token_id"))
    pad = ladder("pad_token_id")
    if pad is None:
        pad = eos[0] if eos else int(mask)
    return SpecialTokens(mask=int(mask), eos=eos, pad=int(pad))


_SOURCE_NAMES = (
    "the generation config",
    "the model's generation_config",
    "the tokenizer",
    "the model config",
)


def _source_name(name: str, sources: tuple[Any, ...]) -> str:
    for label, source in zip(_SOURCE_NAMES, sources, strict=True):
        if getattr(source, name, None) is not None:
            return label
    return "the generation config"


def check_token_ids(name: str, value: Any, vocab: int | None, source: str = "the generation config") -> None:
    """Refuse token ids (`name` as the config spells it) that are not ints in `[0, vocab)`.

    An id outside the vocabulary would fail deep inside the embedding lookup (mask, EOS, pad are
    written into the canvas; suppressed ids index the logits), or never match a decoded token.

    Args:
        name: the field, e.g. `"mask_token_id"`.
        value: None, an id, or a list of ids.
        vocab: the ids the model embeds (`dllm_edit.vocab.input_vocab_size`); None checks only that ids
            are ints >= 0.
        source: where the value was read, for the message.

    Raises:
        TypeError: an id that is not an int.
        ValueError: an id < 0 or >= `vocab`.

    Examples:
        >>> check_token_ids("eos_token_id", [1, 2], vocab=48)
        >>> check_token_ids("mask_token_id", 5000, vocab=48)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `mask_token_id`=5000 (from the generation config) is outside the model's vocabulary ...
    """
    if value is None:
        return
    single = not isinstance(value, (list, tuple, set, frozenset, torch.Tensor))
    ids = [value] if single else list(value.tolist() if isinstance(value, torch.Tensor) else value)
    for token in ids:
        if isinstance(token, bool) or not hasattr(token, "__index__"):
            raise TypeError(
                f"`{name}` (from {source}) must hold int token ids, got {type(token).__name__} {token!r}."
            )
    bad = [int(token) for token in ids if token < 0 or (vocab is not None and token >= vocab)]
    if not bad:
        return
    limit = f"of {vocab} ids (0..{vocab - 1})" if vocab is not None else "(ids are >= 0)"
    example = f"tokenizer.{name}" if name.endswith("_token_id") else "ids of the tokenizer's vocabulary"
    raise ValueError(
        f"`{name}`={bad[0] if single else bad!r} (from {source}) is outside the model's vocabulary {limit}. "
        f"Set it to the model's own token id{'' if single else 's'}, e.g. {example}."
    )


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
