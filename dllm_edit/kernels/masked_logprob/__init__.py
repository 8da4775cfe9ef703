"""Log-likelihood of target tokens at selected positions, without the full log-softmax.

`masked_logprob(...)` is what a masked-diffusion training loss needs: `log p(target)` at the masked
positions, over a large vocabulary, differentiable. It never materialises the float32 `[M, V]`
log-softmax (M selected positions) nor, given the output projection (`weight`), the `[M, V]`
logits: a custom autograd function computes the logits chunk by chunk in the forward pass, keeps
only the per-row log-sum-exp (`[M]` floats), and recomputes the logits chunk by chunk in the
backward pass, in the spirit of Liger's fused linear cross-entropy.

Dispatch (see `dllm_edit.kernels._dispatch`): the softmax part runs as Triton kernels (`triton.py`)
on CUDA tensors when triton is installed, and as chunked torch (`reference.py`) otherwise; the
matrix products are torch (`F.linear`, cuBLAS on GPU) on both paths. With `weight`, the forward
pass runs over vocabulary chunks (the weight is read once; a running log-sum-exp in torch, on both
backends) and so does the backward pass (each weight-gradient slice is one product; the gradient
of the logits chunk is the Triton kernel on the Triton path).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from .._dispatch import Backend, use_triton
from .reference import masked_logprob_reference

#: Default chunk, in logits elements: rows per chunk = budget // V (16 MiB of float32 on the CPU,
#: 128 MiB on CUDA, where larger matrix products run faster).
_CPU_ELEMENTS = 2**22
_CUDA_ELEMENTS = 2**25


def _ops(fused: bool) -> ModuleType:
    if fused:
        from . import triton

        return triton
    from . import reference

    return reference


def _linear_forward(
    flat: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    rows: torch.Tensor | None,
    chunk_rows: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused linear forward over vocabulary chunks, so that the weight is read once: `(logp, lse)`.

    Torch on both backends: each chunk is one matrix product and one log-sum-exp, merged into the
    running log-sum-exp with `logaddexp`.
    """
    h = flat if rows is None else flat[rows]  # [M, H]
    n, vocab = targets.shape[0], weight.shape[0]
    cols = max(1, chunk_rows * vocab // max(n, 1))
    lse = torch.full((n,), -float("inf"), dtype=torch.float32, device=h.device)  # [M]
    picked = torch.zeros(n, dtype=torch.float32, device=h.device)  # [M], the target's logit
    for v0 in range(0, vocab, cols):
        v1 = min(vocab, v0 + cols)
        z = F.linear(h, weight[v0:v1], None if bias is None else bias[v0:v1]).float()  # [M, c]
        lse = torch.logaddexp(lse, torch.logsumexp(z, dim=-1))
        local = targets - v0  # [M]
        hit = (local >= 0) & (local < v1 - v0)  # [M]
        at = z.gather(1, local.clamp(0, v1 - v0 - 1)[:, None]).squeeze(1)  # [M]
        picked = torch.where(hit, at, picked)
    return picked - lse, lse


class _MaskedLogprob(torch.autograd.Function):
    """`log softmax(logits)[target]` for rows of `flat` (`[N, V]` logits or `[N, H]` hidden states)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        flat: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        rows: torch.Tensor | None,
        chunk_rows: int,
        fused: bool,
    ) -> torch.Tensor:
        ops = _ops(fused)
        n = targets.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=flat.device)  # [M]
        lse = torch.empty(n, dtype=torch.float32, device=flat.device)  # [M]
        if weight is not None:
            logp, lse = _linear_forward(flat, weight, bias, targets, rows, chunk_rows)
        elif fused:
            # one launch: the kernel reads the selected rows in place
            logp, lse = ops.logprob_forward(flat, targets, rows)
        else:
            for s in range(0, n, chunk_rows):
                e = min(n, s + chunk_rows)
                x = flat[s:e] if rows is None else flat[rows[s:e]]  # [c, V]
                logp[s:e], lse[s:e] = ops.logprob_forward(x, targets[s:e])
        ctx.save_for_backward(flat, weight, bias, targets, rows, lse)
        ctx.chunk_rows = chunk_rows
        ctx.fused = fused
        return logp

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        flat, weight, bias, targets, rows, lse = ctx.saved_tensors
        ops = _ops(ctx.fused)
        g = grad.float().contiguous()  # [M]
        n = targets.shape[0]
        need_in, need_w, need_b = ctx.needs_input_grad[:3]
        grad_in = grad_w = grad_b = None
        if weight is None:
            if not need_in:
                return None, None, None, None, None, None, None
            grad_in = torch.zeros(flat.shape, dtype=flat.dtype, device=flat.device)  # [N, V]
            if ctx.fused:
                ops.logprob_backward(flat, targets, lse, g, rows, out=grad_in)
            else:
                for s in range(0, n, ctx.chunk_rows):
                    e = min(n, s + ctx.chunk_rows)
                    if rows is None:
                        ops.logprob_backward(flat[s:e], targets[s:e], lse[s:e], g[s:e], out=grad_in[s:e])
                    else:
                        ops.logprob_backward(flat, targets[s:e], lse[s:e], g[s:e], rows[s:e], out=grad_in)
            return grad_in, None, None, None, None, None, None
        # fused linear: chunks over the vocabulary, so that each weight-gradient slice is one product
        h = flat if rows is None else flat[rows]  # [M, H]
        vocab = weight.shape[0]
        cols = max(1, ctx.chunk_rows * vocab // max(n, 1))
        dh = torch.zeros(h.shape, dtype=torch.float32, device=h.device) if need_in else None  # [M, H]
        grad_w = torch.empty_like(weight) if need_w else None  # [V, H]
        grad_b = torch.empty_like(bias) if need_b and bias is not None else None  # [V]
        for v0 in range(0, vocab, cols):
            v1 = min(vocab, v0 + cols)
            wc = weight[v0:v1]  # [c, H]
            x = F.linear(h, wc, None if bias is None else bias[v0:v1])  # [M, c]
            d = ops.logprob_backward(x, targets, lse, g, offset=v0)  # [M, c] float32
            del x
            if grad_b is not None:
                grad_b[v0:v1] = d.sum(0)
            dc = d.to(weight.dtype)  # [M, c]
            if grad_w is not None:
                grad_w[v0:v1] = dc.t() @ h
            if dh is not None:
                if dc.dtype == torch.float32:
                    dh.addmm_(dc, wc)
                else:
                    dh += dc @ wc
        if dh is not None:
            if rows is None:
                grad_in = dh.to(flat.dtype)
            else:
                grad_in = torch.zeros(flat.shape, dtype=flat.dtype, device=flat.device)  # [N, H]
                grad_in.index_copy_(0, rows, dh.to(flat.dtype))
        return grad_in, grad_w, grad_b, None, None, None, None


def _check(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    chunk_size: int | None,
) -> int:
    """Validate the arguments of `masked_logprob`; returns the vocabulary size."""
    op = "masked_logprob"
    if not isinstance(inputs, torch.Tensor) or not inputs.is_floating_point() or inputs.dim() == 0:
        got: object = (
            f"{inputs.dtype} {tuple(inputs.shape)}" if isinstance(inputs, torch.Tensor) else type(inputs)
        )
        raise TypeError(
            f"{op}: inputs must be a floating tensor [..., V] (logits) or [..., H] (hidden states with "
            f"weight=), got {got}; pass the model's logits or last hidden states"
        )
    lead = inputs.shape[:-1]
    if not isinstance(targets, torch.Tensor) or targets.dtype not in (torch.int64, torch.int32):
        got = targets.dtype if isinstance(targets, torch.Tensor) else type(targets)
        raise TypeError(f"{op}: targets must be a LongTensor, got {got}; pass token ids (.long())")
    if targets.shape != lead:
        raise ValueError(
            f"{op}: targets must have the shape of inputs without the last dimension, {tuple(lead)}, "
            f"got {tuple(targets.shape)}; pass one target per position"
        )
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask)
            raise TypeError(f"{op}: mask must be a BoolTensor, got {got}; pass e.g. `noisy == mask_id`")
        if mask.shape != lead:
            raise ValueError(
                f"{op}: mask must have the shape of targets, {tuple(lead)}, got {tuple(mask.shape)}; "
                "pass one flag per position"
            )
    for name, t in (("targets", targets), ("mask", mask), ("weight", weight), ("bias", bias)):
        if t is not None and t.device != inputs.device:
            raise ValueError(
                f"{op}: {name} is on {t.device} but inputs on {inputs.device}; "
                "move it with .to(inputs.device)"
            )
    if weight is None:
        if bias is not None:
            raise ValueError(f"{op}: bias was given without weight; pass weight= too, or no bias")
        vocab = inputs.shape[-1]
    else:
        if weight.dim() != 2 or weight.shape[1] != inputs.shape[-1]:
            raise ValueError(
                f"{op}: weight must be [V, H] with H = inputs.shape[-1] = {inputs.shape[-1]}, got "
                f"{tuple(weight.shape)}; pass lm_head.weight"
            )
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and t.dtype != inputs.dtype:
                raise TypeError(
                    f"{op}: {name} dtype {t.dtype} differs from inputs dtype {inputs.dtype}; "
                    "cast one to the other"
                )
        vocab = weight.shape[0]
        if bias is not None and bias.shape != (vocab,):
            raise ValueError(
                f"{op}: bias must be [V] = [{vocab}], got {tuple(bias.shape)}; pass lm_head.bias"
            )
    if vocab == 0:
        raise ValueError(f"{op}: the vocabulary is empty (V = 0); pass logits over at least one token")
    bad_chunk = isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    if chunk_size is not None and bad_chunk:
        raise ValueError(
            f"{op}: chunk_size must be a positive int or None, got {chunk_size!r}; pass None for auto"
        )
    return vocab


def masked_logprob(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    chunk_size: int | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """`log p(target)` at the selected positions, without materialising the full log-softmax.

    Computes `log_softmax(logits.float())[..., target]` where `logits = inputs` or, with `weight`,
    `logits = inputs @ weight.T + bias` (computed chunk by chunk, in the inputs' dtype, then softmaxed
    in float32). Differentiable with respect to `inputs`, `weight` and `bias`; gradients come back in
    their dtypes. The backward pass recomputes the logits chunk by chunk from the saved inputs; what
    is kept between the passes is the inputs and one float32 log-sum-exp per selected position.

    Args:
        inputs: logits `[..., V]`, or hidden states `[..., H]` when `weight` is given.
        targets: LongTensor `[...]` (the shape of `inputs` without its last dimension). Values where
            `mask` is False are ignored (e.g. -100); selected ones must lie in `[0, V)`.
        mask: BoolTensor `[...]` selecting positions, or None for all.
        weight: `[V, H]` output projection (e.g. `lm_head.weight`), or None when `inputs` are logits.
        bias: `[V]` output bias, or None.
        chunk_size: rows of logits computed at once (default: about 16 MiB of float32 logits on the
            CPU, 128 MiB on CUDA). The fused-linear backward pass chunks the vocabulary instead, with
            the same element budget.
        backend: `"auto"` (Triton kernels on CUDA tensors when triton is installed, chunked torch
            otherwise), `"triton"` (CUDA, or CPU under `TRITON_INTERPRET=1`) or `"torch"`.
            `DLLM_EDIT_DISABLE_TRITON=1` forces torch.

    Returns:
        float32 `[M]`: the selected positions in row-major order (like `t[mask]`), or `[...]` when
        `mask` is None.

    Raises:
        TypeError: wrong dtypes (non-float inputs, non-integer targets, non-bool mask, weight dtype
            different from the inputs').
        ValueError: mismatched shapes or devices, selected targets outside `[0, V)`, bad chunk_size.

    Examples:
        >>> import torch
        >>> hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)  # [N=2, H=2]
        >>> weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # [V=3, H=2]
        >>> logp = masked_logprob(hidden, torch.tensor([0, -100]), torch.tensor([True, False]), weight=weight)
        >>> [round(v, 4) for v in logp.tolist()]
        [-0.5514]
        >>> logp.sum().backward()
        >>> [[round(v, 4) for v in row] for row in hidden.grad.tolist()]
        [[0.4239, -0.2119], [0.0, 0.0]]
    """
    vocab = _check(inputs, targets, mask, weight, bias, chunk_size)
    lead = inputs.shape[:-1]
    flat = inputs.reshape(-1, inputs.shape[-1])  # [N, V] or [N, H]
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    flat_targets = targets.reshape(-1)  # [N]
    rows = None
    if mask is not None:
        rows = mask.reshape(-1).nonzero().squeeze(1)  # [M]
        flat_targets = flat_targets[rows]  # [M]
    flat_targets = flat_targets.long().contiguous()
    bad = (flat_targets < 0) | (flat_targets >= vocab)  # [M]
    if bool(bad.any()):
        first = int(flat_targets[bad][0])
        raise ValueError(
            f"masked_logprob: targets at selected positions must lie in [0, V) = [0, {vocab}), got {first}; "
            "exclude ignored positions (e.g. -100) with mask="
        )
    if chunk_size is None:
        budget = _CUDA_ELEMENTS if inputs.is_cuda else _CPU_ELEMENTS
        chunk_size = max(1, budget // vocab)
    fused = use_triton(inputs, backend, op="masked_logprob")
    logp = _MaskedLogprob.apply(flat, weight, bias, flat_targets, rows, chunk_size, fused)  # [M]
    return logp if mask is not None else logp.reshape(lead)


__all__ = ["masked_logprob", "masked_logprob_reference"]
