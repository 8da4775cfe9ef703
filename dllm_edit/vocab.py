"""How many token ids a model reads and how many it scores, and the strategies' check against them.

Two sizes, which most checkpoints make equal and some do not (LLaDA pads its output head):

- `input_vocab_size`: the ids the model embeds. Token ids the loop writes into the canvas (mask,
  EOS, pad) must be below it, or the embedding lookup fails deep inside the model.
- `logits_vocab_size`: the entries of each logits row. Anything indexed by a logits entry (a
  PC-Sampler token prior) must have this size.

Either is None for a model that tells neither (a bare callable in a test); then nothing is checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def _config_vocab_size(model: Any) -> int | None:
    for holder in (getattr(model, "config", None), model):
        size = getattr(holder, "vocab_size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    return None


def input_vocab_size(model: Any) -> int | None:
    """The number of token ids `model` embeds: its input embedding's rows, else `config.vocab_size`,
    else a `vocab_size` attribute; None when the model tells none of them.

    Examples:
        >>> import torch
        >>> from types import SimpleNamespace as NS
        >>> input_vocab_size(NS(get_input_embeddings=lambda: torch.nn.Embedding(10, 2)))
        10
        >>> input_vocab_size(NS(config=NS(vocab_size=32))), input_vocab_size(object())
        (32, None)
    """
    get = getattr(model, "get_input_embeddings", None)
    if callable(get):
        try:
            rows = getattr(get(), "num_embeddings", None)
        except (NotImplementedError, AttributeError):
            rows = None
        if isinstance(rows, int):
            return rows
    return _config_vocab_size(model)


def logits_vocab_size(model: Any) -> int | None:
    """The size of `model`'s logits rows: its output embedding's rows, else `config.vocab_size`, else
    a `vocab_size` attribute; None when the model tells none of them.

    Examples:
        >>> import torch
        >>> model = torch.nn.Module(); model.get_output_embeddings = lambda: torch.nn.Linear(4, 3)
        >>> logits_vocab_size(model)
        3
    """
    get = getattr(model, "get_output_embeddings", None)
    try:
        head = get() if callable(get) else None
    except (NotImplementedError, AttributeError):
        head = None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0])
    return _config_vocab_size(model)


def check_strategies_vocab(model: Any, strategies: Iterable[Any]) -> None:
    """Call every strategy's `check_vocab(V)` hook with the size of `model`'s logits, before the loop.

    `Strategy.check_vocab` accepts any size; a strategy holding something vocabulary-sized (a
    PC-Sampler prior) refuses a model whose logits have another size.

    Raises:
        ValueError: a strategy's hook refuses the size.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import PCSampler
        >>> model = torch.nn.Module(); model.get_output_embeddings = lambda: torch.nn.Linear(4, 3)
        >>> check_strategies_vocab(model, [PCSampler(prior=[0.5, 0.25, 0.25])])  # 3 == 3: accepted
    """
    size = logits_vocab_size(model)
    if size is None:
        return
    for strategy in strategies:
        hook = getattr(strategy, "check_vocab", None)
        if callable(hook):
            hook(size)
