"""The fused-linear loss path: final hidden states and the output projection instead of logits.

A training loss needs `log p(clean token)` at the scored positions only. With the model's final
hidden states `[B, T, H]` and its output projection (`lm_head.weight` `[V, H]`, bias `[V]`),
`dllm_edit.kernels.masked_logprob(hidden, weight=...)` computes it chunk by chunk over the vocabulary
and never builds the `[B, T, V]` logits nor their gradient: at a 157k vocabulary these dominate a
step's memory (docs/benchmarks.md, "Trainer peak memory").

`DiffusionForward(..., fused_lm_head=True).scores(...)` returns `HiddenStates`; `token_logprob`
takes either form, so the objective and the ELBO are written once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dllm_edit.kernels import candidates, masked_logprob


@dataclass(frozen=True)
class HiddenStates:
    """Final hidden states with the output projection that turns them into logits.

    Attributes:
        hidden: `[B, T, H]`, differentiable through the model.
        weight: `[V, H]`, the output embedding (`model.get_output_embeddings().weight`).
        bias: `[V]` or None.

    Examples:
        >>> import torch
        >>> states = HiddenStates(torch.zeros(1, 2, 4), torch.zeros(8, 4), None)
        >>> token_logprob(states, torch.tensor([[3, 5]]), torch.tensor([[True, True]])).tolist()
        [-2.079441547393799, -2.079441547393799]
    """

    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None


def token_logprob(
    scores: torch.Tensor | HiddenStates, targets: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """`log p(target)` at the positions selected by `mask`, float32 `[M]` (row-major, like `t[mask]`).

    Args:
        scores: logits `[B, T, V]` or `HiddenStates`.
        targets: LongTensor `[B, T]`.
        mask: BoolTensor `[B, T]`.
    """
    if isinstance(scores, HiddenStates):
        return masked_logprob(scores.hidden, targets, mask, weight=scores.weight, bias=scores.bias)
    return masked_logprob(scores, targets, mask)


def greedy_tokens(
    scores: torch.Tensor | HiddenStates, suppress_ids: tuple[int, ...], chunk_rows: int = 256
) -> torch.Tensor:
    """The argmax token `[B, T]` of each position (detached), never building all the logits at once.

    Args:
        scores: logits `[B, T, V]` or `HiddenStates` (its logits are computed `chunk_rows` rows at a
            time, without gradient).
        suppress_ids: tokens never chosen (e.g. the mask token).
        chunk_rows: rows of logits per chunk for `HiddenStates`.
    """
    if not isinstance(scores, HiddenStates):
        return candidates(scores.detach(), suppress_ids=suppress_ids)[0]
    hidden = scores.hidden.detach()  # [B, T, H]
    flat = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
    out = torch.empty(flat.shape[0], dtype=torch.long, device=flat.device)  # [N]
    with torch.no_grad():
        for s in range(0, flat.shape[0], chunk_rows):
            logits = F.linear(flat[s : s + chunk_rows], scores.weight, scores.bias)  # [c, V]
            out[s : s + chunk_rows] = candidates(logits, suppress_ids=suppress_ids)[0]
    return out.view(hidden.shape[:-1])  # [B, T]
