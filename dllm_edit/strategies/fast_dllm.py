"""Fast-dLLM's confidence-aware parallel decoding (Wu et al., arXiv 2505.22618): threshold and factor rules.

Both rules rank the masked positions of the active block by the candidate's probability `c_i` and
always commit the most confident one, so every step makes progress. Ties go to the lower position
(`rank_descending`); the references take `torch.topk`, whose order among equal values is
unspecified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .schedules import Schedule
from .selection import at_step, masked_in_block, masked_ranks


def confidence_ranks(ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked slots of the active block and each slot's rank among them by `cand_probs`.

    Returns:
        `(masked [B, S] bool, rank [B, S] long)`: rank 0 is the most confident masked slot (ties to
        the lower slot); unmasked slots rank after every masked one.
    """
    masked = masked_in_block(ctx)  # [B, S]
    return masked, masked_ranks(ctx.cand_probs, masked)  # [B, S], [B, S]


@dataclass(frozen=True)
class FastDLLMThreshold(Strategy):
    """Fast-dLLM threshold rule: commit `{i : c_i >= τ} ∪ {argmax_i c_i}` among the block's masks.

    `c_i` is the candidate's probability at masked slot `i` of the active block. The comparison is
    `>=` (not the strict `>` of `ThresholdUnmask`), and the top-1 is committed even below τ, so a
    step always commits at least one token. Matches `NVlabs/Fast-dLLM:llada/generate.py`
    (`get_transfer_index` with `threshold=`, @24cc59e and @f6b35ec) and
    `ZHZisZZ/dllm:dllm/pipelines/fastdllm/llada/sampler.py` (`_get_transfer_index`, threshold mode,
    @ca17675). The reference compares float64 probabilities; here they are the float32 candidate
    probabilities and τ a float32 schedule value, which differ only within float32 rounding of τ.

    Args:
        threshold: τ, a float in [0, 1] or a `Schedule` (default 0.9, the paper's LLaDA setting).
            τ = 0 commits the whole block at once; τ = 1 commits the top-1 and any slot at exactly 1.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import FastDLLMThreshold, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9, 9]]), masked=torch.tensor([[True, True, True, False]]),
        ...     editable=torch.tensor([[False, False, False, True]]),
        ...     in_block=torch.ones(4, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3, 4]]), cand_probs=torch.tensor([[0.5, 0.9, 0.95, 0.99]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> FastDLLMThreshold(threshold=0.9).step(ctx).commit.tolist()  # 0.9 >= 0.9 passes
        [[False, True, True, False]]
        >>> FastDLLMThreshold(threshold=0.99).step(ctx).commit.tolist()  # none passes: the top-1
        [[False, False, True, False]]
    """

    threshold: float | Schedule = 0.9

    unmasks = True
    sweep = ("threshold", (0.95, 0.9, 0.8, 0.7, 0.5))

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", fields.threshold_field("threshold", self.threshold))

    def step(self, ctx: StepContext) -> StepResult:
        tau = at_step(self.threshold, ctx)  # [B]
        masked, rank = confidence_ranks(ctx)  # [B, S], [B, S]
        confident = masked & (ctx.cand_probs >= tau[:, None])  # [B, S]
        return StepResult.unmasking(ctx, confident | (masked & (rank == 0)))


@dataclass(frozen=True)
class FastDLLMFactor(Strategy):
    """Fast-dLLM factor rule: commit the `n` most confident masks, `n` the largest count with
    `c_(k) >= 1 - f / (k + 1)` for every rank `k = 2..n` (rank 1 is always committed).

    `c_(1) >= c_(2) >= ...` are the candidate probabilities of the active block's masked slots,
    sorted. Equivalently `(k + 1)(1 - c_(k)) <= f`: the paper's bound that greedy parallel
    decoding of `n` tokens matches sequential decoding when `(n + 1) ε < 1` (Theorem 1), with the
    factor `f` loosening it. The thresholds are computed in float64 from the float32 probabilities.

    Matches `ZHZisZZ/dllm:dllm/pipelines/fastdllm/llada/sampler.py` (`_get_transfer_index`, factor
    mode, @ca17675), which commits exactly that prefix. `NVlabs/Fast-dLLM:llada/generate.py`
    (`get_transfer_index_dynamic`, @f6b35ec) breaks at the first failing rank and then adds one when
    the break index is the last one (`top_i == len - 1`): when every rank but the last passes, it
    commits the last mask too (so a block's last two masks are always committed together).
    `nvlabs_last_rank=True` reproduces that off-by-one; the default follows the paper.

    Args:
        factor: `f > 0` (default 1.0, the code's default). Larger commits more per step.
        nvlabs_last_rank: reproduce NVlabs' off-by-one at the last rank (see above).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import FastDLLMFactor, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.tensor([[True, True, True]]),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.7, 0.95, 0.2]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> # rank 2: 0.7 >= 1 - 1/3 passes; rank 3: 0.2 < 1 - 1/4 fails
        >>> FastDLLMFactor(factor=1.0).step(ctx).commit.tolist()
        [[True, True, False]]
        >>> FastDLLMFactor(factor=1.0, nvlabs_last_rank=True).step(ctx).commit.tolist()
        [[True, True, True]]
    """

    factor: float = 1.0
    nvlabs_last_rank: bool = False

    unmasks = True
    sweep = ("factor", (0.25, 0.5, 1.0, 2.0, 4.0))

    def __post_init__(self) -> None:
        factor = fields.real(
            "FastDLLMFactor",
            "factor",
            self.factor,
            minimum=0.0,
            strict_minimum=True,
            hint="Fast-dLLM's f; 1.0 is the paper's default",
        )
        object.__setattr__(self, "factor", factor)
        fields.flag("FastDLLMFactor", "nvlabs_last_rank", self.nvlabs_last_rank)

    def step(self, ctx: StepContext) -> StepResult:
        masked, rank = confidence_ranks(ctx)  # [B, S], [B, S]
        n = (rank + 1).to(torch.float64)  # [B, S] 1-based rank
        thr = 1.0 - self.factor / (n + 1.0)  # [B, S]
        passes = masked & ((ctx.cand_probs.to(torch.float64) >= thr) | (rank == 0))  # [B, S]
        # thresholds rise and confidences fall with the rank: the passing slots are a prefix
        k = passes.sum(-1)  # [B]
        if self.nvlabs_last_rank:
            m = masked.sum(-1)  # [B]
            k = torch.where(k == m - 1, m, k)  # [B]
        return StepResult.unmasking(ctx, masked & (rank < k[:, None]))  # [B, S]
