"""Token-frequency priors for PC-Sampler's content calibration: estimate, load, validate.

A prior is a FloatTensor `[V]` of token frequencies in a reference corpus, `f[t] = count(t) / N`,
with the tokens the corpus never holds at `1 / N` (as PC-Sampler's `load_baseline` fills them),
so `log f` is finite everywhere. Values must lie in [0, 1]: counts are refused, not normalised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

PriorLike = torch.Tensor | Sequence[float] | str | os.PathLike[str]


def check_prior(values: torch.Tensor, name: str = "prior") -> torch.Tensor:
    """Validate a prior vector; returns it as float32 `[V]` on the CPU.

    Raises:
        ValueError: not 1-D, empty, non-finite, outside [0, 1], or all zero.

    Examples:
        >>> check_prior(torch.tensor([0.5, 0.25, 0.25])).dtype
        torch.float32
    """
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(
            f"`{name}` must be a non-empty 1-D vector of token frequencies (one per vocabulary id), "
            f"got shape {tuple(values.shape)}."
        )
    values = values.detach().to("cpu", torch.float32)
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"`{name}` holds NaN or inf; pass token frequencies (counts / total) in [0, 1].")
    low, high = float(values.min()), float(values.max())
    if low < 0 or high > 1:
        raise ValueError(
            f"`{name}` must hold token frequencies in [0, 1] (counts / total), "
            f"got values in [{low}, {high}]; "
            "divide counts by the total, or build it with estimate_token_prior(...)."
        )
    if high == 0:
        raise ValueError(
            f"`{name}` is all zeros; pass token frequencies, e.g. from estimate_token_prior(...)."
        )
    return values


def _from_counts(data: Mapping[str, Any], path: str) -> torch.Tensor:
    """PC-Sampler's count file (`utils/calculate_p_baseline.py` output, plus a `vocab_size` key)."""
    counts = data.get("token_frequency_dict", data.get("p_baseline_dict"))
    total, vocab = data.get("num_token"), data.get("vocab_size")
    if not isinstance(counts, Mapping) or not isinstance(total, int) or total <= 0:
        raise ValueError(
            f"{path}: a JSON prior is a list of frequencies, {{'frequencies': [...]}}, or PC-Sampler's count "
            "file ({'num_token': N, 'token_frequency_dict': {id: count}, 'vocab_size': V})."
        )
    if not isinstance(vocab, int) or vocab < 1:
        raise ValueError(
            f'{path}: PC-Sampler\'s count file does not say the vocabulary size; add "vocab_size": V '
            "(the size of the model's logits) to it."
        )
    prior = torch.full((vocab,), 1.0 / total, dtype=torch.float64)  # [V] unseen tokens: 1 / N
    ids = torch.tensor([int(k) for k in counts], dtype=torch.long)  # [n]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"{path}: token ids outside [0, vocab_size={vocab}).")
    prior[ids] = torch.tensor([float(v) for v in counts.values()], dtype=torch.float64) / total
    return prior.to(torch.float32)


def load_token_prior(path: str | os.PathLike[str]) -> torch.Tensor:
    """Read a prior from `.pt` / `.pth` (a tensor or list), `.npy`, or `.json`.

    A JSON file holds a list of frequencies, `{"frequencies": [...]}`, or PC-Sampler's count file
    (`{"num_token": N, "token_frequency_dict": {id: count}}`, with a `"vocab_size"` key added).

    Raises:
        ValueError: a missing file, an unknown suffix, or a bad prior (see `check_prior`).

    Examples:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); p = os.path.join(d, "prior.json")
        >>> _ = open(p, "w").write('{"num_token": 4, "token_frequency_dict": {"0": 3}, "vocab_size": 3}')
        >>> load_token_prior(p).tolist()
        [0.75, 0.25, 0.25]
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"`prior`: no file at {str(path)!r}; pass a .pt, .npy or .json prior, or a tensor.")
    suffix = file.suffix.lower()
    if suffix in (".pt", ".pth"):
        data: Any = torch.load(file, map_location="cpu", weights_only=True)
    elif suffix == ".npy":
        import numpy as np

        data = torch.from_numpy(np.load(file))
    elif suffix == ".json":
        data = json.loads(file.read_text())
        if isinstance(data, Mapping):
            data = data["frequencies"] if "frequencies" in data else _from_counts(data, str(path))
    else:
        raise ValueError(
            f"`prior`: unknown file type {suffix!r} of {str(path)!r}; use .pt, .pth, .npy or .json."
        )
    return check_prior(torch.as_tensor(data, dtype=torch.float64), name=f"prior ({path})")


def as_prior(value: PriorLike) -> torch.Tensor:
    """A tensor, a sequence of floats or a path -> a validated float32 prior `[V]`."""
    if isinstance(value, (str, os.PathLike)):
        return load_token_prior(value)
    if isinstance(value, torch.Tensor):
        return check_prior(value)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        try:
            tensor = torch.tensor([float(v) for v in value], dtype=torch.float64)
        except (TypeError, ValueError):
            raise TypeError(
                "`prior` must be a sequence of floats (token frequencies), got non-numbers."
            ) from None
        return check_prior(tensor)
    raise TypeError(
        "`prior` must be None, a 1-D tensor or sequence of token frequencies, or a path to a .pt / .npy / "
        f".json prior, got {type(value).__name__}."
    )


def estimate_token_prior(
    source: Iterable[Any],
    tokenizer: Any = None,
    *,
    vocab_size: int | None = None,
    field: str = "text",
) -> torch.Tensor:
    """Estimate a token-frequency prior from a corpus, as PC-Sampler's `calculate_p_baseline.py`.

    Every text is encoded without special tokens; `f[t] = count(t) / N` over the `N` tokens, and
    tokens that never occur get `1 / N` (PC-Sampler's fill for unseen tokens).

    Args:
        source: an iterable of texts, of rows with a `field` (a HF `datasets.Dataset`, dicts), or,
            with `tokenizer=None`, of token-id sequences (lists or 1-D tensors).
        tokenizer: a tokenizer with `encode(text, add_special_tokens=False)`, or None for ids.
        vocab_size: the prior's size; default `len(tokenizer)`. Use the size of the model's logits
            when it differs (LLaDA pads its vocabulary): `PCSampler.check_vocab` compares them.
        field: the text column of dict rows.

    Returns:
        FloatTensor `[vocab_size]`.

    Raises:
        ValueError / TypeError: an empty corpus, texts without a tokenizer, ids outside the vocabulary.

    Examples:
        >>> estimate_token_prior([[0, 0, 1], [0]], vocab_size=3).tolist()
        [0.75, 0.25, 0.25]
    """
    if vocab_size is None:
        if tokenizer is None:
            raise ValueError(
                "estimate_token_prior: pass `vocab_size` with token ids (no tokenizer to read it from)."
            )
        vocab_size = len(tokenizer)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"estimate_token_prior: `vocab_size` must be an int >= 1, got {vocab_size!r}.")
    counts = torch.zeros(vocab_size, dtype=torch.float64)  # [V]
    total = 0
    if isinstance(source, (str, bytes)):
        raise TypeError(
            "estimate_token_prior: `source` must be an iterable of texts, not one string; wrap it in a list."
        )
    for row in source:
        if isinstance(row, Mapping):
            if field not in row:
                raise ValueError(
                    f"estimate_token_prior: a row has no {field!r} field (keys {sorted(row)}); set field=..."
                )
            row = row[field]
        if isinstance(row, str):
            if tokenizer is None:
                raise TypeError(
                    "estimate_token_prior: got texts but no tokenizer; pass tokenizer=... or token ids."
                )
            row = tokenizer.encode(row, add_special_tokens=False)
        ids = torch.as_tensor(row, dtype=torch.long).flatten()  # [n]
        if ids.numel() == 0:
            continue
        if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise ValueError(
                f"estimate_token_prior: token id {int(ids.max())} outside [0, vocab_size={vocab_size}); "
                "set vocab_size to the size of the model's logits."
            )
        counts += torch.bincount(ids, minlength=vocab_size).to(torch.float64)
        total += ids.numel()
    if total == 0:
        raise ValueError(
            "estimate_token_prior: the corpus holds no tokens; pass a non-empty iterable of texts."
        )
    prior = torch.where(counts > 0, counts / total, torch.full_like(counts, 1.0 / total))  # [V]
    return prior.to(torch.float32)
