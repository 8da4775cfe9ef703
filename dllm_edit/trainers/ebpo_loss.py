"""The EBPO clipped surrogate (LLaDA2.1 equations 4-5) on ELBO token summands.

Given per-token ELBO summands of the current policy (`logp`, differentiable), of the rollout policy
(`old_logp`, computed on the same noise) and a per-sample advantage `Â`, the log-ratio is

    log ρ = Σ_{tokens in the group} (logp − old_logp) / (supervised tokens in the group)

over one of three groupings (`ratio_level`):

- `"sequence"` (the paper's ρ(y|x); normalised by the completion's supervised tokens, so long and
  short completions have comparable ratios), one ratio per sample;
- `"block"`: one ratio per block of the completion (equation 5 before the sum over blocks);
- `"token"`: one ratio per token.

Each group contributes `min(ρ Â, clip(ρ, 1 − ε_low, 1 + ε_high) Â)`; the loss is minus the mean over
groups (over samples for `"sequence"`). With `beta > 0` and reference summands, a per-group KL
penalty `β (exp(Δ) − Δ − 1)` with `Δ = log ρ_ref` (the k3 estimator) is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RATIO_LEVELS = ("sequence", "block", "token")


@dataclass(frozen=True)
class SurrogateTerms:
    """The EBPO loss and what to log about it.

    Attributes:
        loss: scalar, differentiable.
        ratio: FloatTensor `[G]` (detached), ratio of each group.
        clipped_low: BoolTensor `[G]`, ratio below `1 − ε_low` with a negative advantage.
        clipped_high: BoolTensor `[G]`, ratio above `1 + ε_high` with a positive advantage.
        kl: scalar (detached), mean KL estimate (0 without a reference).
    """

    loss: torch.Tensor
    ratio: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor
    kl: torch.Tensor


def _groups(supervised: torch.Tensor, level: str, block_length: int) -> torch.Tensor:
    """Group membership `[B, T, G']` (one-hot over the groups of each sample)."""
    length = supervised.shape[1]
    if level == "sequence":
        return supervised[:, :, None].float()  # [B, T, 1]
    if level == "block":
        blocks = -(-length // block_length)
        block_of = torch.arange(length, device=supervised.device) // block_length  # [T]
        one_hot = torch.nn.functional.one_hot(block_of, blocks).float()  # [T, nb]
        return supervised[:, :, None].float() * one_hot[None]  # [B, T, nb]
    return torch.diag_embed(supervised.float())  # [B, T, T]


def ebpo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    supervised: torch.Tensor,
    *,
    ratio_level: str = "sequence",
    block_length: int = 32,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> SurrogateTerms:
    """The clipped surrogate loss (see the module docstring).

    Args:
        logp: FloatTensor `[B, T]`, ELBO summands of the current policy.
        old_logp: FloatTensor `[B, T]`, the same under the rollout policy (same noise).
        advantages: FloatTensor `[B]`.
        supervised: BoolTensor `[B, T]`, completion tokens.
        ratio_level: `"sequence"`, `"block"` or `"token"`.
        block_length: tokens per block (for `"block"`).
        epsilon_low: ε_low of the clip.
        epsilon_high: ε_high of the clip.
        ref_logp: FloatTensor `[B, T]`, summands of the reference policy (for the KL term).
        beta: KL coefficient.

    Returns:
        `SurrogateTerms`.

    Examples:
        >>> import torch
        >>> logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
        >>> supervised = torch.ones(1, 2, dtype=torch.bool)
        >>> terms = ebpo_surrogate(logp, logp.detach(), torch.tensor([0.5]), supervised)
        >>> terms.ratio.tolist(), terms.loss.item()  # θ = θ_old: ratio 1, loss -Â
        ([1.0], -0.5)
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"`ratio_level` must be one of {list(RATIO_LEVELS)}, got {ratio_level!r}.")
    groups = _groups(supervised.bool(), ratio_level, block_length)  # [B, T, G']
    sizes = groups.sum(dim=1)  # [B, G']
    present = sizes > 0  # [B, G']
    delta = (logp - old_logp).float()  # [B, T]
    log_ratio = torch.einsum("bt,btg->bg", delta, groups) / sizes.clamp_min(1)  # [B, G']
    ratio = torch.exp(log_ratio)  # [B, G']
    adv = advantages.float()[:, None].expand_as(ratio)  # [B, G']
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv
    per_group = -torch.minimum(unclipped, clipped)  # [B, G']
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None and beta > 0:
        ref_delta = torch.einsum("bt,btg->bg", (ref_logp - logp).float(), groups) / sizes.clamp_min(1)
        kl_group = torch.exp(ref_delta) - ref_delta - 1  # [B, G'] k3 estimator
        per_group = per_group + beta * kl_group
        kl = kl_group[present].mean().detach() if present.any() else kl
    loss = per_group[present].mean() if present.any() else (logp.sum() * 0.0)
    low = (ratio < 1 - epsilon_low) & (adv < 0)
    high = (ratio > 1 + epsilon_high) & (adv > 0)
    return SurrogateTerms(
        loss=loss,
        ratio=ratio[present].detach(),
        clipped_low=low[present],
        clipped_high=high[present],
        kl=kl,
    )
