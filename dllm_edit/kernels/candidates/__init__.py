"""Candidate selection over the vocabulary: the per-step vocabulary work of decoding.

`candidates(...)` is the dispatcher the decoding loop calls; `edit_candidates(...)` also returns
the probability of the token currently at each position. Both choose, per call:

* the fused Triton kernel (`triton.py`) for CUDA tensors when triton is installed, greedy or
  temperature sampling, with or without suppressed ids;
* the chunked torch path (`reference.py`) otherwise: CPU tensors, triton missing,
  `DLLM_EDIT_DISABLE_TRITON=1`, `backend="torch"`, and any call with `top_k` or `top_p` (top-k /
  top-p are not fused; they need a sort or a selection over the row that the single streaming pass
  does not do).
"""

from __future__ import annotations

import torch

from .._dispatch import Backend, use_triton
from .reference import (
    candidate_stats_reference,
    candidates_reference,
    check_in_place,
    edit_candidates_reference,
    filter_top_k,
    filter_top_p,
)
from .stats import STAT_ALIASES, STAT_NAMES, CandidateStats, StatName, resolve_stats


def _check(
    op: str,
    logits: torch.Tensor,
    temperature: float,
    current: torch.Tensor | None = None,
    *,
    in_place: bool = False,
) -> None:
    check_in_place(in_place)
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() == 0:
        got = f"{logits.dtype} {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else type(logits)
        raise TypeError(
            f"{op}: logits must be a floating tensor [..., V], got {got}; pass the model's logits"
        )
    if temperature < 0:
        raise ValueError(f"{op}: temperature must be >= 0, got {temperature}; use 0 for greedy")
    if current is not None:
        if current.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{op}: current must be an integer tensor, got {current.dtype}; pass token ids")
        if current.shape != logits.shape[:-1]:
            raise ValueError(
                f"{op}: current must have the shape of logits without the vocabulary, "
                f"{tuple(logits.shape[:-1])}, got {tuple(current.shape)}; pass canvas[:, span]"
            )


def _fused(op: str, logits: torch.Tensor, top_k: int | None, top_p: float | None, backend: Backend) -> bool:
    # top-k / top-p: not fused, the torch path handles them on every device
    return use_triton(logits, backend, op=op) and top_k is None and top_p is None


def candidates(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    backend: Backend = "auto",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate token and its probability for every row of `logits` `[..., V]`.

    The semantics are those of `candidates_reference`. Greedy decoding gives the same tokens on
    every backend (ties: the lowest id) and probabilities equal to float rounding; temperature
    sampling on the Triton path draws from the same distribution with another random stream
    (Philox seeded from `generator`), so its tokens differ from the torch path's.

    Args:
        logits: `[..., V]` logits (float32, float16 or bfloat16).
        temperature: 0 for greedy (argmax); > 0 scales the logits and samples (Gumbel-max).
        top_k: keep only the k largest logits (None: off). Runs the torch path.
        top_p: nucleus filtering (None: off). Runs the torch path.
        generator: torch.Generator for the sampling noise (the Triton path draws one seed from it).
        suppress_ids: token ids never proposed (their logit set to -inf), e.g. the mask token.
        backend: `"auto"` (Triton on CUDA tensors when triton is installed, torch otherwise),
            `"triton"` (CUDA tensors, or CPU tensors under `TRITON_INTERPRET=1`) or `"torch"`.
            `DLLM_EDIT_DISABLE_TRITON=1` forces the torch path.
        in_place: lend `logits` for the call, so the torch path reads greedy float32 logits without
            a working copy (the suppressed ids set to -inf in them and restored bit for bit before
            the call returns; the Triton kernel never writes them). Only for logits nothing else
            reads meanwhile and autograd has not saved, such as those of your own forward under
            `torch.no_grad()`; the default, False, never writes them.

    Returns:
        `(token, prob)`: LongTensor `[...]` and FloatTensor `[...]` (float32).

    Examples:
        >>> import torch
        >>> tok, p = candidates(torch.tensor([[0.0, 2.0, 1.0], [5.0, 5.0, 0.0]]), suppress_ids=(2,))
        >>> tok.tolist(), [round(v, 4) for v in p.tolist()]
        ([1, 0], [0.8808, 0.5])
    """
    _check("candidates", logits, temperature, in_place=in_place)
    if _fused("candidates", logits, top_k, top_p, backend):
        from .triton import candidates_triton

        token, prob, _ = candidates_triton(logits, temperature, generator, suppress_ids)
        return token, prob
    return candidates_reference(
        logits,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        suppress_ids=suppress_ids,
        in_place=in_place,
    )


def edit_candidates(
    logits: torch.Tensor,
    current: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    backend: Backend = "auto",
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`candidates` plus the probability of the token currently at each position, in one pass.

    M2T needs the candidate's probability at masked positions, T2T compares it with the current
    token's at generated ones; this gives both from one read of the logits. The semantics are
    those of `edit_candidates_reference`; dispatch as in `candidates`.

    Args:
        logits: `[..., V]` logits.
        current: LongTensor `[...]`, the token at each position (ids outside `[0, V)`, and
            suppressed ids, get probability 0).
        temperature: as in `candidates`.
        top_k: as in `candidates`.
        top_p: as in `candidates`.
        generator: as in `candidates`.
        suppress_ids: as in `candidates`.
        backend: as in `candidates`.
        in_place: as in `candidates`.

    Returns:
        `(token, prob, current_prob)`: LongTensor `[...]` and two FloatTensors `[...]` (float32).

    Examples:
        >>> import torch
        >>> logits = torch.tensor([[0.0, 2.0, 1.0]])
        >>> tok, p, cur = edit_candidates(logits, current=torch.tensor([0]))
        >>> tok.tolist(), round(p.item(), 4), round(cur.item(), 4)
        ([1], 0.6652, 0.09)
    """
    _check("edit_candidates", logits, temperature, current, in_place=in_place)
    if _fused("edit_candidates", logits, top_k, top_p, backend):
        from .triton import candidates_triton

        token, prob, current_prob = candidates_triton(logits, temperature, generator, suppress_ids, current)
        assert current_prob is not None
        return token, prob, current_prob
    return edit_candidates_reference(
        logits,
        current.long(),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        suppress_ids=suppress_ids,
        in_place=in_place,
    )


def candidate_stats(
    logits: torch.Tensor,
    stats: frozenset[str] | set[str] = frozenset(),
    current: torch.Tensor | None = None,
    prev: tuple[torch.Tensor, torch.Tensor] | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    backend: Backend = "auto",
    in_place: bool = False,
) -> CandidateStats:
    """`candidates` plus the statistics named in `stats`, from the same pass over the logits.

    The semantics are those of `candidate_stats_reference`; dispatch as in `candidates` (the Triton
    kernel accumulates the top-2, the entropy and the KL in its single streaming pass).

    Args:
        logits: `[..., V]` logits.
        stats: a subset of `STAT_NAMES`: `"current_prob"` (needs `current`), `"top_prob"` /
            `"second_prob"` (computed together), `"entropy"`, `"kl"` (against `prev`; keeps this
            step's logits). The names of `STAT_ALIASES` are accepted too.
        current: LongTensor `[...]`, the token at each position.
        prev: the previous result's `(kept_logits, kept_lse)` for `"kl"` (None: KL is `+inf`).
        temperature: as in `candidates`.
        top_k: as in `candidates`.
        top_p: as in `candidates`.
        generator: as in `candidates`.
        suppress_ids: as in `candidates`.
        backend: as in `candidates`.
        in_place: as in `candidates`.

    Returns:
        `CandidateStats` (fields not asked for are None).

    Examples:
        >>> import torch
        >>> out = candidate_stats(torch.tensor([[0.0, 2.0, 1.0]]), {"second_prob", "entropy"})
        >>> round(out.prob.item() - out.second_prob.item(), 4), round(out.entropy.item(), 4)
        (0.4205, 0.8324)
    """
    stats = resolve_stats("candidate_stats", stats)
    current_read = current if "current_prob" in stats else None
    _check("candidate_stats", logits, temperature, current_read, in_place=in_place)
    if _fused("candidate_stats", logits, top_k, top_p, backend):
        from .triton import candidate_stats_triton

        return candidate_stats_triton(logits, stats, current, prev, temperature, generator, suppress_ids)
    return candidate_stats_reference(
        logits,
        stats,
        current,
        prev,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        suppress_ids=suppress_ids,
        in_place=in_place,
    )


__all__ = [
    "STAT_ALIASES",
    "STAT_NAMES",
    "CandidateStats",
    "StatName",
    "candidate_stats",
    "candidate_stats_reference",
    "candidates",
    "candidates_reference",
    "edit_candidates",
    "edit_candidates_reference",
    "filter_top_k",
    "filter_top_p",
    "resolve_stats",
]
