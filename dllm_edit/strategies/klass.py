"""KLASS (Kim et al., NeurIPS 2025, arXiv 2511.05664): KL-adaptive stability sampling.

A masked slot is *ready* when its prediction is confident and has stopped moving: its candidate
probability is above `conf_threshold` (strict `>`) and the KL divergence between its distributions
at consecutive forwards, `KL(p_t || p_{t-1})`, has been below `kl_threshold` (strict `<`) at each of
the last `history_length` forwards. Every ready slot is unmasked (`unmask_strategy="all"`), or only
one of them; when no slot is ready, the `k` most confident masked slots are, `k` being LLaDA-1's
quota. The KL values come from the candidate pass (`needs_stats` holds `"kl"`); the last
`history_length` of them live in the per-row state. With `history="canvas"` (the authors' code) the
previous distribution lives across blocks (`Needs.across_blocks`), so a block's first forward is
compared with the last forward of the block before; `history="block"` restarts it at every block.
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

#: How far KLASS's history reaches: the whole run (the authors' code) or one block.
KLASS_HISTORIES = ("canvas", "block")


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


def block_history(ctx: StepContext, kl: torch.Tensor) -> torch.Tensor | None:
    """The KL history KLASS reads at this step: the state's, restarted (`+inf`) on the rows whose
    history was written in an earlier block (`state["kl_block"]`). With `history="canvas"` the loop
    hands the state back across blocks; the authors' gate reads no entry of an earlier block, so
    neither does KLASS.

    Args:
        ctx: the step's context (`state["kl_history"]`: FloatTensor `[B, S, h]`, and
            `state["kl_block"]`: LongTensor `[B]`, the block it was written in; either may be absent).
        kl: FloatTensor `[B, S]`, this step's KL (its shape is the span's).

    Returns:
        FloatTensor `[B, S, h]`, or None when there is no history of this span's width.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.zeros(2, 1, dtype=torch.long), masked=torch.ones(2, 1, dtype=torch.bool),
        ...     editable=torch.zeros(2, 1, dtype=torch.bool), in_block=torch.ones(1, dtype=torch.bool),
        ...     cand_tokens=torch.zeros(2, 1, dtype=torch.long), cand_probs=torch.ones(2, 1),
        ...     step=torch.tensor([0, 3]), block_index=1, active=torch.ones(2, dtype=torch.bool),
        ...     state={"kl_history": torch.full((2, 1, 2), 0.5), "kl_block": torch.tensor([0, 1])})
        >>> block_history(ctx, torch.zeros(2, 1))[:, 0].tolist()  # row 0's history is of block 0
        [[inf, inf], [0.5, 0.5]]
    """
    history = ctx.state.get("kl_history")
    if history is None or history.shape[:-1] != kl.shape:  # none yet, or a span of another width
        return None
    written = ctx.state.get("kl_block")  # [B]
    if written is None:  # a hand-built state: of this block
        return history
    earlier = (written != ctx.block_index)[:, None, None]  # [B, 1, 1]
    return torch.where(earlier, torch.inf, history)  # [B, S, h]


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
    gen_length, i.e. one token per fallback step), tokens and forwards, over every block. The
    reference keeps its previous distribution over the whole canvas: a block's first forward is
    compared with the last forward of the block before (where the slots were still masks ahead).
    `history="canvas"` (the default) does the same, on adapters whose forwards see the blocks ahead
    (bidirectional, shifted, masked LM); `history="block"` restarts the comparison at every block
    (the first forward of a block has no previous one), the behaviour of releases before it. The
    reference also carries its KL history across blocks, but reads it only from a block's step
    `h - 1` on, when all `h` entries come from the block's own forwards: so the history restarts at
    every block in both variants, with the same decisions.

    Where it differs: the reference compares the run's first forward (with `carry_across_blocks`
    off, every block's) with an all-zero distribution, whose KL is `Σ p log(p + 1e-12) + 27.63 ≈
    27.63 − H(p) ≥ 27.63 − log V`; dllm_edit counts a missing previous forward as `+inf`, the same
    decision whenever `κ ≤ 27.63 − log V` (15.9 for LLaDA's 126,464 tokens, 15.7 for Dream's
    152,064), i.e. for any κ in use (the paper's is 0.015). When the fallback's quota exceeds the
    masks left (ready steps committed more than the quota), the reference's top-k picks slots of
    confidence `-inf` too and rewrites written (even prompt) tokens with their argmax; dllm_edit
    commits only masks, since an unmasking rule never rewrites text. The reference ends a block
    after `steps` forwards even with masks left (they stay masks), dllm_edit keeps filling it.

    Args:
        conf_threshold: τ_c in [0, 1] (float or Schedule); ready needs `c > τ_c`.
        kl_threshold: κ > 0; stable needs `KL < κ` at each of the last `history_length` forwards.
        history_length: h >= 1.
        unmask_strategy: `"all"`, `"max_conf"`, `"min_kl"` or `"random"`.
        steps: None (one token per fallback step) or the forwards per block LLaDA-1's quota spreads
            the block's masks over (the reference's `steps // num_blocks`).
        history: `"canvas"` (the authors' code: a block's first forward is compared with the last
            forward of the previous block) or `"block"` (every block starts without a previous
            forward, so no slot is KL-stable before its block's forward `h + 1`).

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
    history: str = "canvas"

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
        fields.choice("KLASS", "history", self.history, KLASS_HISTORIES)
        fields.optional_int(
            "KLASS",
            "steps",
            self.steps,
            1,
            "forwards per block of the fallback quota, or None for 1 per step",
        )

    def requires(self) -> Needs:
        return Needs(stats={"kl"}, across_blocks=self.history == "canvas")

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        conf = ctx.cand_probs  # [B, S]
        kl = ctx.stat("kl").to(torch.float32)  # [B, S]
        history = stable_history(block_history(ctx, kl), kl, self.history_length)  # [B, S, h]
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
            state={"kl_history": history, "kl_block": torch.full_like(ctx.step, ctx.block_index)},
        )
