"""Candidate selection over the vocabulary: the per-step vocabulary work of decoding.

`candidates(...)` is the dispatcher the decoding loop calls. Today it runs the chunked torch
reference (`reference.py`) on every device; a fused Triton kernel for CUDA tensors is planned
(the Triton kernels issue) and will plug in here, behind the same signature.
"""

from __future__ import annotations

import torch

from .reference import candidates_reference, filter_top_k, filter_top_p


def candidates(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate token and its probability for every row of `logits` `[..., V]`.

    Dispatches to the best available implementation; the semantics are those of
    `candidates_reference`.
    """
    return candidates_reference(
        logits,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        suppress_ids=suppress_ids,
    )


__all__ = ["candidates", "candidates_reference", "filter_top_k", "filter_top_p"]
