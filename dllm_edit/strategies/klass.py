"""KLASS (Kim et al., NeurIPS 2025, arXiv 2511.05664): KL-adaptive stability sampling.

A masked slot is *ready* when its prediction is confident and has stopped moving: its candidate
probability is above `conf_threshold` (strict `>`) and the KL divergence between its distributions
at consecutive forwards, `KL(p_t || p_{t-1})`, has been below `kl_threshold` (strict `<`) at each of
the last `history_length` forwards. Every ready slot is unmasked (`unmask_strategy="all"`), or only
one of them; when no slot is ready, the `k` most confident masked slots are, `k` being LLaDA-1's
quota. The KL values come from the candidate pass (`needs_stats` holds `"kl"`); the last
`history_length` of them live in the per-row state, which the loop resets at every block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .schedules import Schedule
from .selection import at_step, llada_quota, masked_in_block, masked_ranks, top_k_masked

#: How KLASS picks among the ready slots (the official code's `unmask_strategy`).
KLASS_UNMASK_STRATEGIES = ("all", "max_conf", "min_kl", "random")


def stable_history(history: torch.Tensor | None, kl: torch.Tensor, length: int) -> torch.Tensor:
    """The last `length` KL values of each slot after this step, oldest first.

    Args:
        history: FloatTensor `[B, S, length]` from the previous step of the block, or None at its
            first step (missing entries count as `+inf`: not stable).
        kl: FloatTensor `[B, S]`, `KL(p_t || p_{t-1})` of this step.
        length: `history_length`.

    Returns:
        FloatTensor `[B, S, length]`.

    Examples:
        >>> import torch
        >>> h = stable_history(None, torch.tensor([[0.5]]), 2)
        >>> stable_history(h, torch.tensor([[0.1]]), 2).tolist()
        [[[0.5, 0.10000000149011612]]]
    """
    if history is None:
        history = torch.full((*kl.shape, length), math.inf, dtype=kl.dtype, device=kl.device)  # [B, S, h]
    return torch.cat([history[..., 1:], kl[..., None]], dim=-1)  # [B, S, h]


@dataclass(frozen=True)
class KLASS(Strategy):
    """KLASS: unmask the masked slots that are confident and KL-stable; else LLaDA-1's top-k.

    With `c_i` the candidate probability and `D_i^t = KL(p_i^t || p_i^{t-1})` (the loop's
    `kl_prev`, `+inf` at a block's first forward), the ready set at step `t` is
    `R = {i masked : c_i > τ_c and D_i^s < κ for s = t-h+1 .. t}`. If `R` is not empty, commit `R`
    (`"all"`), its most confident slot (`"max_conf"`), its slot of smallest `D_i^t` (`"min_kl"`), or
    one slot drawn uniformly from it with the call's generator (`"random"`); ties go to the lower
    slot. If `R` is empty, commit the `k` most confident masked slots, `k = 1` (`steps=None`) or
    LLaDA-1's quota of the block's masks spread over `steps` (at least 1).

    Matches `shkim0116/KLASS:src/model/llada_klass.py:stable_confident_decode` (@ad87ecb) with
    `alg="klass"` and the defaults of its `scripts/*.sh` (τ_c = 0.6, κ = 0.015, h = 2, steps =
    gen_length, i.e. one token per fallback step), tokens and forwards, on the first block. Where it
    differs: the reference keeps its KL history and previous distribution across blocks (the first
    forward of a block is compared with the last forward of the previous one), while dllm_edit's
    loop only sees the active block's distributions and resets the history per block, so a slot of
    a later block can be ready one forward later than there; the reference ends a block after
    `steps` forwards even with masks left (they stay masks), dllm_edit keeps filling it.

    Args:
        conf_threshold: τ_c in [0, 1] (float or Schedule); ready needs `c > τ_c`.
        kl_threshold: κ > 0; stable needs `KL < κ` at each of the last `history_length` forwards.
        history_length: h >= 1.
        unmask_strategy: `"all"`, `"max_conf"`, `"min_kl"` or `"random"`.
        steps: None (one token per fallback step) or the forwards per block LLaDA-1's quota spreads
            the block's masks over (the reference's `steps // num_blocks`).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import KLASS, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.tensor([[True, True, True]]),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.9, 0.95, 0.5]]),
        ...     kl_prev=torch.tensor([[0.001, 0.2, 0.001]]),
        ...     step=torch.tensor([1]), block_index=0, active=torch.tensor([True]),
        ...     state={"kl_history": torch.tensor([[[0.01, 0.01], [0.01, 0.01], [0.01, 0.01]]])})
        >>> KLASS().step(ctx).commit.tolist()  # slot 1 moved (KL 0.2), slot 2 is unsure (0.5)
        [[True, False, False]]
    """

    conf_threshold: float | Schedule = 0.6
    kl_threshold: float = 0.015
    history_length: int = 2
    unmask_strategy: str = "all"
    steps: int | None = None

    unmasks = True
    sweep = ("conf_threshold", (0.9, 0.8, 0.7, 0.6, 0.5))

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "conf_threshold", fields.threshold_field("conf_threshold", self.conf_threshold)
        )
        kappa = fields.real(
            "KLASS",
            "kl_threshold",
            self.kl_threshold,
            minimum=0.0,
            strict_minimum=True,
            hint="κ: stable means KL < κ; the paper uses 0.01-0.015",
        )
        object.__setattr__(self, "kl_threshold", kappa)
        fields.positive_int(
            "KLASS", "history_length", self.history_length, "forwards a slot must stay KL-stable, e.g. 2"
        )
        fields.choice("KLASS", "unmask_strategy", self.unmask_strategy, KLASS_UNMASK_STRATEGIES)
        fields.optional_int(
            "KLASS",
            "steps",
            self.steps,
            1,
            "forwards per block of the fallback quota, or None for 1 per step",
        )

    def requires(self) -> Needs:
        return Needs(stats={"kl"})

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        conf = ctx.cand_probs  # [B, S]
        kl = ctx.stat("kl").to(torch.float32)  # [B, S]
        history = stable_history(ctx.state.get("kl_history"), kl, self.history_length)  # [B, S, h]
        stable = (history < self.kl_threshold).all(-1)  # [B, S]
        ready = masked & stable & (conf > at_step(self.conf_threshold, ctx)[:, None])  # [B, S]
        if self.unmask_strategy == "all":
            chosen = ready  # [B, S]
        else:
            if self.unmask_strategy == "max_conf":
                key = conf  # [B, S]
            elif self.unmask_strategy == "min_kl":
                key = -kl  # [B, S]
            else:  # "random": a uniform draw, the largest wins
                key = torch.rand(conf.shape, generator=ctx.generator, device=conf.device)  # [B, S]
            chosen = ready & (masked_ranks(key, ready) == 0)  # [B, S]
        top = top_k_masked(conf, masked, llada_quota(ctx, self.steps))  # [B, S]
        commit = torch.where(ready.any(-1, keepdim=True), chosen, top)  # [B, S]
        return StepResult(
            commit=commit,
            edit=torch.zeros_like(commit),
            tokens=ctx.cand_tokens,
            state={"kl_history": history},
        )
