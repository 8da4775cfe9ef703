"""EB-Sampler (Ben-Hamu et al., arXiv 2505.24857): entropy-bounded unmasking."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .selection import CONFIDENCE_KINDS, confidence, confidence_stats, masked_in_block, top_k_masked

#: Error proxies EB-Sampler can order the masked positions by (the larger, the safer to commit):
#: the confidence kinds of `dllm_edit.strategies.selection`.
EB_PROXIES = CONFIDENCE_KINDS


def proxy_scores(ctx: StepContext, proxy: str) -> torch.Tensor:
    """FloatTensor `[B, S]`: the error proxy of each slot, larger meaning more certain
    (`selection.confidence`: `"confidence"`, `"margin"` or `"entropy"`)."""
    return confidence(ctx, proxy)  # [B, S]


def entropy_bound_count(entropy_sorted: torch.Tensor, valid: torch.Tensor, gamma: float) -> torch.Tensor:
    """The largest `k` with `sum_{j<=k} H_j - max_{j<=k} H_j <= gamma` (at least 1 where any is valid).

    Args:
        entropy_sorted: FloatTensor `[B, S]`, entropies in the proxy's order (most certain first).
        valid: BoolTensor `[B, S]`, the sorted slots that are masks (a prefix of each row).
        gamma: the bound γ.

    Returns:
        LongTensor `[B]`.

    Examples:
        >>> import torch
        >>> h = torch.tensor([[0.5, 1e-4, 1e-4, 0.2]])
        >>> entropy_bound_count(h, torch.ones(1, 4, dtype=torch.bool), 1e-3).tolist()
        [3]
    """
    h = torch.where(valid, entropy_sorted, torch.zeros_like(entropy_sorted))  # [B, S]
    excess = h.cumsum(-1) - h.cummax(-1).values  # [B, S] the paper's running max: over the sorted slots
    k = (valid & (excess <= gamma)).sum(-1)  # [B]
    return torch.minimum(k.clamp(min=1), valid.sum(-1))  # [B]


@dataclass(frozen=True)
class EBSampler(Strategy):
    """EB-Sampler: commit the largest prefix, in error-proxy order, whose entropies stay within γ.

    Sort the active block's masked slots by the error proxy (most certain first) and commit the
    first `k`, the largest with `sum_{j<=k} H_(j) - max_{j<=k} H_(j) <= γ`, where `H` is the entropy
    of each slot's (filtered, temperature-scaled) distribution. The sum minus the max bounds the
    joint dependence error of committing them together (the paper's entropy bound); `k >= 1`
    always (the left side is 0 for `k = 1`), so every step makes progress. Ties in the proxy go to
    the lower slot.

    Matches `Kamichanw/d2Cache:src/generation/vanilla.py` (`confidence_unmasking` with `gamma`,
    @72feb60; the default γ = 1e-3 is its `configs/generation/eb_sampler.yaml`), with one
    difference: there the running max is `torch.cummax(entropy, dim=0)`, over the batch instead of
    the sorted slots. With one row it is the identity, so the reference's bound becomes
    `sum_{j<k} H_(j) <= γ` (the `k`-th slot's entropy left out instead of the largest: it commits
    fewer when a more confident slot has a larger entropy; the two agree with `proxy="entropy"`,
    where the `k`-th is the largest); in a batch it mixes rows. dllm_edit follows the paper
    (running max along the sorted slots, per row).

    Args:
        gamma: γ >= 0 (default 1e-3). 0 commits one token per step unless entropies are exactly 0.
        proxy: the order, `"confidence"` (d2Cache's default `alg="maskgit_plus"`), `"margin"`
            (`"topk_margin"`) or `"entropy"`.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import EBSampler, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.tensor([[True, True, True]]),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.99, 0.6, 0.98]]),
        ...     entropy=torch.tensor([[0.0006, 0.9, 0.0007]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> # order 0, 2, 1: k=2 gives 0.0006 + 0.0007 - 0.0007 <= 1e-3; k=3 gives 0.0013 > 1e-3
        >>> EBSampler(gamma=1e-3).step(ctx).commit.tolist()
        [[True, False, True]]
    """

    gamma: float = 1e-3
    proxy: str = "confidence"

    unmasks = True
    sweep = ("gamma", (1e-4, 1e-3, 1e-2, 1e-1, 1.0))

    def __post_init__(self) -> None:
        gamma = fields.real(
            "EBSampler", "gamma", self.gamma, minimum=0.0, hint="EB-Sampler's entropy bound, 1e-3 by default"
        )
        object.__setattr__(self, "gamma", gamma)
        fields.choice("EBSampler", "proxy", self.proxy, EB_PROXIES, "EB-Sampler's error proxy")

    def requires(self) -> Needs:
        return Needs(stats={"entropy", *confidence_stats(self.proxy)})

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        proxy = confidence(ctx, self.proxy)  # [B, S]
        scores = torch.where(masked, proxy, torch.full_like(proxy, -float("inf")))  # [B, S]
        order = torch.argsort(scores, dim=-1, descending=True, stable=True)  # [B, S] ties: lower slot first
        valid = masked.gather(-1, order)  # [B, S] a prefix of each row
        k = entropy_bound_count(ctx.stat("entropy").gather(-1, order), valid, self.gamma)  # [B]
        return StepResult.unmasking(ctx, top_k_masked(proxy, masked, k))
