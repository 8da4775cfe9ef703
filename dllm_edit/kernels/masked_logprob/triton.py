"""Triton kernels for the log-likelihood of targets: forward (one pass) and gradient.

`logprob_forward` streams each row once with an online log-sum-exp and reads the target's logit
with one extra load; `logprob_backward` writes `grad * (onehot - softmax)` tile by tile, straight
into the rows of the gradient tensor (no float32 intermediate). Both read rows through an optional
index (`rows`), so the masked positions of a `[N, V]` logits tensor are used in place, without
gathering them first. The matrix products of the fused linear path stay in torch (cuBLAS); these
kernels are the softmax part, as in Liger's fused linear cross-entropy.

Importing this module imports triton; the dispatcher imports it only when a kernel is about to run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Largest tile of the forward pass (ids per loop iteration).
MAX_BLOCK = 4096
#: Tile of the gradient kernel (one program per row and tile).
GRAD_BLOCK = 2048


@triton.jit
def _forward_kernel(
    x_ptr, stride, rows_ptr, t_ptr, logp_ptr, lse_ptr, vocab, HAS_ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    i = tl.program_id(0).to(tl.int64)
    if HAS_ROWS:  # noqa: SIM108 (a constexpr branch of the kernel)
        r = tl.load(rows_ptr + i).to(tl.int64)
    else:
        r = i
    base = x_ptr + r * stride
    lanes = tl.arange(0, BLOCK)
    neg_inf = float("-inf")
    m = tl.full([BLOCK], neg_inf, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        offs = start + lanes
        x = tl.load(base + offs, mask=offs < vocab, other=neg_inf).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == neg_inf, 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, 0)
    shift = tl.where(row_max == neg_inf, 0.0, row_max)
    lse = shift + tl.log(tl.sum(s * tl.exp(m - shift), 0))
    t = tl.load(t_ptr + i)
    xt = tl.load(base + t).to(tl.float32)
    tl.store(lse_ptr + i, lse)
    tl.store(logp_ptr + i, xt - lse)


@triton.jit
def _backward_kernel(
    x_ptr,
    stride_x,
    out_ptr,
    stride_out,
    rows_ptr,
    t_ptr,
    lse_ptr,
    g_ptr,
    cols,
    offset,
    HAS_ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64)
    if HAS_ROWS:  # noqa: SIM108 (a constexpr branch of the kernel)
        r = tl.load(rows_ptr + i).to(tl.int64)
    else:
        r = i
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < cols
    x = tl.load(x_ptr + r * stride_x + offs, mask=inside, other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + i)
    g = tl.load(g_ptr + i)
    t = tl.load(t_ptr + i)
    d = g * (tl.where(offs + offset == t, 1.0, 0.0) - tl.exp(x - lse))
    tl.store(out_ptr + r * stride_out + offs, d.to(out_ptr.dtype.element_ty), mask=inside)


def logprob_forward(
    x: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of `targets` and the log-sum-exp of rows of logits `x` `[N, V]`.

    Same contract as `reference.logprob_forward`; `x` must have unit stride along the vocabulary.

    Args:
        x: logits `[N, V]`.
        targets: LongTensor `[n]` (valid ids).
        rows: LongTensor `[n]` of rows of `x` to use, or None for all `N = n` rows.

    Returns:
        `(logprob, lse)`: float32 `[n]` and `[n]`.

    Examples:
        >>> import torch
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU needs TRITON_INTERPRET=1
        >>> x, t = torch.tensor([[0.0, 0.0]], device=device), torch.tensor([1], device=device)
        >>> logp, lse = logprob_forward(x, t)
        >>> round(logp.item(), 4), round(lse.item(), 4)
        (-0.6931, 0.6931)
    """
    n = targets.shape[0]
    vocab = x.shape[-1]
    logp = torch.empty(n, dtype=torch.float32, device=x.device)
    lse = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return logp, lse
    block = min(MAX_BLOCK, triton.next_power_of_2(vocab))
    _forward_kernel[(n,)](
        x,
        x.stride(0),
        rows if rows is not None else targets,
        targets,
        logp,
        lse,
        vocab,
        HAS_ROWS=rows is not None,
        BLOCK=block,
        num_warps=8 if block >= 2048 else 4,
    )
    return logp, lse


def logprob_backward(
    x: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    grad: torch.Tensor,
    rows: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    """Gradient of `sum(grad * logprob)` with respect to logits `x`: `grad * (onehot - softmax)`.

    Same contract as `reference.logprob_backward`: `x` `[N, C]` may be a column slice of the
    logits starting at vocabulary id `offset`; rows are read from `x` and written to `out` through
    `rows` when given.

    Args:
        x: logits `[N, C]`.
        targets: LongTensor `[n]`.
        lse: float32 `[n]`.
        grad: float32 `[n]`.
        rows: LongTensor `[n]` or None.
        out: `[N, C]` output (written in its dtype), required with `rows`; or None for a new float32
            `[n, C]`.
        offset: vocabulary id of column 0 of `x`.

    Returns:
        `out`, or the new float32 `[n, C]` gradient.

    Examples:
        >>> import torch
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU needs TRITON_INTERPRET=1
        >>> x, t = torch.tensor([[0.0, 0.0]], device=device), torch.tensor([1], device=device)
        >>> logp, lse = logprob_forward(x, t)
        >>> logprob_backward(x, t, lse, torch.ones(1, device=device)).tolist()
        [[-0.5, 0.5]]
    """
    n = targets.shape[0]
    cols = x.shape[-1]
    if out is None:
        if rows is not None:
            raise ValueError("logprob_backward: rows needs out, the [N, C] tensor the rows are written to")
        out = torch.empty(n, cols, dtype=torch.float32, device=x.device)
    if n == 0 or cols == 0:
        return out
    block = min(GRAD_BLOCK, triton.next_power_of_2(cols))
    _backward_kernel[(n, triton.cdiv(cols, block))](
        x,
        x.stride(0),
        out,
        out.stride(0),
        rows if rows is not None else targets,
        targets,
        lse,
        grad,
        cols,
        offset,
        HAS_ROWS=rows is not None,
        BLOCK=block,
        num_warps=4,
    )
    return out
