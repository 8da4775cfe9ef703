"""Candidate selection over the vocabulary: the per-step vocabulary work of decoding.

`candidates(...)` is the dispatcher the decoding loop calls. Today it runs the chunked torch
reference (`reference.py`) on every device; the fused Triton kernel (issue: Triton kernels) will
plug in here for CUDA tensors, with `DLLM_EDIT_DISABLE_TRITON=1` forcing the reference.
"""

from .reference import candidates_reference, filter_top_k, filter_top_p


def candidates(logits, temperature=0.0, top_k=None, top_p=None, generator=None, suppress_ids=()):
    """Dispatch to the best available implementation; see :func:`candidates_reference`."""
    return candidates_reference(
        logits,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        generator=generator,
        suppress_ids=suppress_ids,
    )


__all__ = ["candidates", "candidates_reference", "filter_top_k", "filter_top_p"]
