"""Pure torch log-likelihoods of targets: the naive ground truth and the chunked CPU path.

`masked_logprob_reference` is the obvious implementation (full float32 log-softmax, autograd): the
tests compare the dispatcher with it. `logprob_forward` / `logprob_backward` are the per-chunk
pieces the dispatcher's autograd function runs on the torch path; `triton.py` has the same two
functions as Triton kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_logprob_reference(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """`log softmax(logits)[target]` through the full float32 log-softmax (materialises `[..., V]`).

    Args:
        inputs: logits `[..., V]`, or hidden states `[..., H]` when `weight` is given.
        targets: LongTensor `[...]`.
        mask: BoolTensor `[...]` selecting positions, or None for all.
        weight: `[V, H]` output projection (logits = inputs @ weight.T + bias), or None.
        bias: `[V]` or None.

    Returns:
        float32 `[M]` (the selected positions, row-major) or `[...]` when `mask` is None.

    Examples:
        >>> import torch
        >>> out = masked_logprob_reference(torch.tensor([[0.0, 0.0], [0.0, 3.0]]), torch.tensor([0, 1]))
        >>> [round(v, 4) for v in out.tolist()]
        [-0.6931, -0.0486]
    """
    logits = inputs if weight is None else F.linear(inputs, weight, bias)  # [..., V]
    logp = torch.log_softmax(logits.float(), dim=-1)  # [..., V]
    if mask is not None:
        logp, targets = logp[mask], targets[mask]  # [M, V], [M]
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def logprob_forward(
    x: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of `targets` and the log-sum-exp of rows of logits `x` `[N, V]`.

    Args:
        x: logits `[N, V]` (any float dtype; computed in float32).
        targets: LongTensor `[n]` (valid ids).
        rows: LongTensor `[n]` of rows of `x` to use, or None for all `N = n` rows.

    Returns:
        `(logprob, lse)`: float32 `[n]` and `[n]`.

    Examples:
        >>> import torch
        >>> logp, lse = logprob_forward(torch.tensor([[0.0, 0.0]]), torch.tensor([1]))
        >>> round(logp.item(), 4), round(lse.item(), 4)
        (-0.6931, 0.6931)
    """
    z = (x if rows is None else x[rows]).float()  # [n, V]
    lse = torch.logsumexp(z, dim=-1)  # [n]
    return z.gather(-1, targets[:, None]).squeeze(-1) - lse, lse


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

    `x` may be a column slice `[n, C]` of the logits starting at vocabulary id `offset`, with `lse`
    the log-sum-exp of the whole rows.

    Args:
        x: logits `[N, C]`.
        targets: LongTensor `[n]`.
        lse: float32 `[n]`, from `logprob_forward`.
        grad: float32 `[n]`, the incoming gradient of each log-probability.
        rows: LongTensor `[n]` of rows of `x` (and of `out`), or None for all rows.
        out: tensor `[N, C]` the gradient rows are written into (its dtype), or None for a new
            float32 `[n, C]`.
        offset: vocabulary id of column 0 of `x`.

    Returns:
        `out`, or the new float32 `[n, C]` gradient.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[0.0, 0.0]])
        >>> logp, lse = logprob_forward(x, torch.tensor([1]))
        >>> logprob_backward(x, torch.tensor([1]), lse, torch.ones(1)).tolist()
        [[-0.5, 0.5]]
    """
    z = x if rows is None else x[rows]  # [n, C]
    direct = out is not None and rows is None and out.dtype == torch.float32
    # float32 lse promotes a lower-precision z: the difference is float32 without a float32 copy of z
    d = torch.sub(z, lse[:, None], out=out) if direct else torch.sub(z, lse[:, None])  # [n, C]
    d.exp_().mul_(-grad[:, None])
    local = targets - offset  # [n]
    hit = (local >= 0) & (local < z.shape[-1])  # [n], the target falls in this column slice
    d.scatter_add_(1, local.clamp(0, z.shape[-1] - 1)[:, None], (grad * hit)[:, None])
    if out is None or direct:
        return d if out is None else out
    if rows is None:
        out.copy_(d)
    else:
        out.index_copy_(0, rows, d.to(out.dtype))
    return out
