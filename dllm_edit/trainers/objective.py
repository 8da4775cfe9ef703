"""The mixed M2T + T2T training objective on the logits of a corrupted batch.

Each supervised (response) position is scored by the log-likelihood of its clean token, and falls
in one of three terms according to what the model *saw* there:

- **drafting** (M2T): the input was the mask token; weight `1 / t` (the ELBO weighting of masked
  diffusion, `mask_loss_weighting="inverse_t"`) or 1 (`"none"`);
- **editing** (T2T): the input was a token different from the clean one; weight `λ_edit`;
- **clean**: the input was already right; weight `λ_clean`. This term teaches the model to keep
  tokens that are right with high confidence, which the T2T threshold rule relies on.

The loss is the weighted sum of negative log-likelihoods divided by the number of supervised
tokens (or `normalizer`, e.g. the count over a whole gradient-accumulation step). Log-likelihoods
come from `dllm_edit.kernels.masked_logprob`, which never materialises a full log-softmax (nor,
given `HiddenStates`, the logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .hidden_states import HiddenStates, token_logprob

MASK_LOSS_WEIGHTINGS = ("inverse_t", "none")


@dataclass(frozen=True)
class ObjectiveTerms:
    """The loss and its parts.

    Attributes:
        loss: scalar, differentiable: the weighted sum divided by the normalizer.
        nll_sums: FloatTensor `[3]` (detached), unweighted negative log-likelihood summed over the
            drafting, editing and clean positions.
        counts: FloatTensor `[3]` (detached), the number of drafting, editing and clean positions.
    """

    loss: torch.Tensor
    nll_sums: torch.Tensor
    counts: torch.Tensor


def edit_objective(
    logits: torch.Tensor | HiddenStates,
    noisy: torch.Tensor,
    clean: torch.Tensor,
    response: torch.Tensor,
    *,
    mask_token_id: int,
    mask_rate: torch.Tensor,
    mask_loss_weighting: str = "inverse_t",
    edit_loss_weight: float = 1.0,
    clean_loss_weight: float = 1.0,
    normalizer: torch.Tensor | float | None = None,
) -> ObjectiveTerms:
    """The drafting + editing + clean objective (see the module docstring).

    Args:
        logits: `[B, T, V]` logits at the noisy positions, or their `HiddenStates` (the fused-linear
            path: the same loss without the `[B, T, V]` logits).
        noisy: LongTensor `[B, T]`, the input the model saw.
        clean: LongTensor `[B, T]`, the targets.
        response: BoolTensor `[B, T]`, supervised positions.
        mask_token_id: the mask token.
        mask_rate: FloatTensor `[B, T]`, the mask rate `t` of each position's example or block.
        mask_loss_weighting: `"inverse_t"` or `"none"`.
        edit_loss_weight: `λ_edit`.
        clean_loss_weight: `λ_clean`.
        normalizer: divide the weighted sum by this (default: the number of supervised positions,
            at least 1).

    Returns:
        `ObjectiveTerms`.

    Examples:
        >>> import torch
        >>> logits = torch.zeros(1, 3, 4)  # uniform: every nll is log(4)
        >>> clean, noisy = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 2, 1]])  # mask id 0
        >>> terms = edit_objective(logits, noisy, clean, torch.ones(1, 3, dtype=torch.bool),
        ...     mask_token_id=0, mask_rate=torch.full((1, 3), 0.5), mask_loss_weighting="none")
        >>> terms.counts.tolist(), round(terms.loss.item(), 4)  # drafting, editing, clean
        ([1.0, 1.0, 1.0], 1.3863)
    """
    if mask_loss_weighting not in MASK_LOSS_WEIGHTINGS:
        raise ValueError(
            f"`mask_loss_weighting` must be one of {list(MASK_LOSS_WEIGHTINGS)}, got {mask_loss_weighting!r}."
        )
    response = response.bool()
    nll = -token_logprob(logits, clean, response)  # [M]
    seen = noisy[response]  # [M]
    drafting = seen == mask_token_id  # [M]
    editing = ~drafting & (seen != clean[response])  # [M]
    kept = ~drafting & ~editing  # [M]
    if mask_loss_weighting == "inverse_t":
        mask_weight = 1.0 / mask_rate[response].to(nll.dtype).clamp_min(1e-3)  # [M]
    else:
        mask_weight = torch.ones_like(nll)  # [M]
    weight = torch.where(
        drafting,
        mask_weight,
        torch.where(editing, torch.full_like(nll, edit_loss_weight), torch.full_like(nll, clean_loss_weight)),
    )  # [M]
    if normalizer is None:
        normalizer = max(int(response.sum()), 1)
    loss = (weight * nll).sum() / torch.as_tensor(normalizer, dtype=nll.dtype, device=nll.device).clamp_min(1)
    groups = torch.stack([drafting, editing, kept]).to(nll.dtype)  # [3, M]
    detached = nll.detach()  # [M]
    return ObjectiveTerms(loss=loss, nll_sums=groups @ detached, counts=groups.sum(dim=1))
