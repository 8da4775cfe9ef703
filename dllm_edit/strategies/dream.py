"""Dream's unmasking orders (`diffusion_generate`, Ye et al., arXiv 2508.15487): how many masks a step
fills from the timestep schedule, and which ones by `alg`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .selection import confidence, confidence_stats, masked_in_block, top_k_masked

#: Dream's `alg` values: `origin` (each mask independently with probability 1 - s/t), and three
#: confidence orders (`maskgit_plus`: top-1 probability, `topk_margin`: top-1 minus top-2,
#: `entropy`: minus the entropy).
DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")

#: The order of the top-k and top-p filters: Dream's `sample_tokens` (top-p, then top-k), or the
#: candidate kernel's and transformers' (top-k, then top-p).
DREAM_FILTER_ORDERS = ("top_p_first", "top_k_first")

#: Dream's confidence orders as the shared confidence kinds (`dllm_edit.strategies.selection`).
DREAM_CONFIDENCE = {"maskgit_plus": "confidence", "topk_margin": "margin", "entropy": "entropy"}


@functools.lru_cache(maxsize=16)
def _timestep_table(size: int, eps: float, device: torch.device) -> torch.Tensor:
    """FloatTensor `[size + 1, size + 1]`: row `n` is `torch.linspace(1, eps, n + 1)`, zero-padded.

    Built with `torch.linspace` itself so the values are the reference's bit for bit on this device.
    """
    table = torch.zeros(size + 1, size + 1, device=device)
    for n in range(1, size + 1):
        table[n, : n + 1] = torch.linspace(1, eps, n + 1, device=device)
    return table


def dream_fraction(steps: int | torch.Tensor, step: torch.Tensor, eps: float, size: int) -> torch.Tensor:
    """`1 - s / t` of Dream's schedule at each row's step, `t, s` = `linspace(1, eps, steps + 1)[j : j + 2]`.

    Args:
        steps: the number of steps, an int or a LongTensor `[B]` (per row, each in `[1, size]`).
        step: LongTensor `[B]`, the step `j` (clamped to `steps - 1`).
        eps: the final timestep.
        size: the largest per-row `steps` (the width of the table).

    Returns:
        FloatTensor `[B]` (float32, as the reference computes it).

    Examples:
        >>> import torch
        >>> [round(v, 4) for v in dream_fraction(4, torch.tensor([0, 3]), 1e-3, 4).tolist()]
        [0.2498, 0.996]
    """
    if isinstance(steps, int):
        ts = torch.linspace(1, eps, steps + 1, device=step.device)  # [steps + 1]
        j = step.clamp(max=steps - 1)  # [B]
        return 1 - ts[j + 1] / ts[j]  # [B]
    table = _timestep_table(size, eps, step.device)  # [size + 1, size + 1]
    j = torch.minimum(step, steps - 1)  # [B]
    return 1 - table[steps, j + 1] / table[steps, j]  # [B]


def dream_confidence(ctx: StepContext, alg: str) -> torch.Tensor:
    """FloatTensor `[B, S]`: Dream's confidence for `alg` (larger is committed first)."""
    return confidence(ctx, DREAM_CONFIDENCE[alg])  # [B, S]


@dataclass(frozen=True)
class DreamUnmask(Strategy):
    """Dream's `diffusion_generate` unmasking, applied to each block.

    With timesteps `t_j = linspace(1, eps, steps + 1)[j]`, step `j` of a block holding `m` masks
    fills `k_j = floor(m * (1 - t_{j+1} / t_j))` of them, and all the rest at the last step
    (`j = steps - 1`). With a confidence order a block takes exactly `steps` forwards (a step may
    fill none; every step before the last leaves at least one mask, `m - floor(m (1 - s/t)) >= 1`).
    With `alg="origin"` a block ends at the step that draws its last mask, as every block ends once
    it holds no mask (after `max_post_steps` post steps), while Dream's code spends its remaining
    forwards on a canvas without masks, writing nothing: the same tokens, fewer forwards. Which ones:

    * `alg="origin"`: each mask independently with probability `1 - t_{j+1} / t_j` (1 at the last
      step), drawn from `ctx.generator`;
    * otherwise the `k_j` masks of highest confidence `c` (`maskgit_plus`: the candidate's
      probability; `topk_margin`: top-1 minus top-2 probability; `entropy`: minus the entropy),
      ties to the lower slot; with `alg_temp > 0`, `k_j` masks drawn without replacement from
      `softmax(c / alg_temp)` (`torch.multinomial`'s draw: the top-`k_j` of `p / E`, `E ~ Exp(1)`
      from `ctx.generator`).

    Matches `Dream-org/Dream-v0-*-7B:generation_utils.py` `DreamGenerationMixin._sample`, as copied
    in `ZHZisZZ/dllm:dllm/pipelines/dream/models/generation_utils.py` (@ca17675) and
    `NVlabs/Fast-dLLM:dream/model/generation_utils.py` (@24cc59e), which decode the whole
    completion as one block: `block_length = max_new_tokens` reproduces it. Differences: the
    reference counts the masks of the whole batch divided by its size (equal to each row's count
    when every row has the same number of new tokens, as in Dream); here each row counts its own.
    The reference draws from the global RNG (only at masked slots for `origin`, over the canvas for
    `alg_temp`); here from `ctx.generator`, one draw per slot of the span. `torch.multinomial`
    raises when fewer masks than `k_j` have a non-zero probability; here they are taken by slot.

    Sampling (temperature > 0) with both `top_k` and `top_p` filters as Dream's `sample_tokens`
    does, top-p first, then top-k (`filter_order="top_p_first"`, declared in `Needs.top_p_first`);
    the candidate kernel's order, top-k first (transformers'), keeps fewer tokens (`"top_k_first"`).
    Exact ties at the cut are common with a filter: a slot whose nucleus is one token has confidence
    exactly 1 and entropy exactly 0, so with Dream's README settings (temperature 0.2, top-p 0.95,
    `entropy`) many slots tie. They go to the lower slot, deterministic and the same in a batch as
    alone; the reference's `torch.topk` leaves their order unspecified (it is not even the same in
    float32 and float64), so no rule reproduces it on every tie.

    Args:
        alg: one of `DREAM_ALGS` (default `"entropy"`, Dream's README setting; its code defaults to
            `"origin"`).
        alg_temp: None or 0: deterministic top-`k_j`; > 0: sample positions (not with `origin`).
        steps: forwards per block (>= 1); None: the block's masks at its first step (one token per
            step on average: Dream's `steps = max_new_tokens` setting).
        eps: the final timestep, in (0, 1) (default 1e-3, Dream's).
        filter_order: with both `top_k` and `top_p` set, `"top_p_first"` (Dream's) or
            `"top_k_first"` (the kernel's and transformers', the behaviour before this field).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import DreamUnmask, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9, 9]]), masked=torch.ones(1, 4, dtype=torch.bool),
        ...     editable=torch.zeros(1, 4, dtype=torch.bool), in_block=torch.ones(4, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3, 4]]), cand_probs=torch.tensor([[0.5, 0.9, 0.8, 0.1]]),
        ...     step=torch.tensor([1]), block_index=0, active=torch.tensor([True]))
        >>> # steps=4, j=1: floor(4 * (1 - 0.5005 / 0.75025)) = 1, the most confident
        >>> DreamUnmask(alg="maskgit_plus", steps=4).step(ctx).commit.tolist()
        [[False, True, False, False]]
        >>> DreamUnmask(alg="maskgit_plus", steps=2).step(ctx).commit.tolist()  # the last step: all
        [[True, True, True, True]]
    """

    alg: str = "entropy"
    alg_temp: float | None = None
    steps: int | None = None
    eps: float = 1e-3
    filter_order: str = "top_p_first"

    unmasks = True
    sweep = ("steps", (None, 16, 8, 4))

    def __post_init__(self) -> None:
        fields.choice("DreamUnmask", "alg", self.alg, DREAM_ALGS, "Dream's unmasking orders")
        alg_temp = fields.optional_real(
            "DreamUnmask",
            "alg_temp",
            self.alg_temp,
            minimum=0.0,
            hint="None or 0: deterministic; > 0: a sampled order",
        )
        object.__setattr__(self, "alg_temp", alg_temp)
        if alg_temp and self.alg == "origin":
            raise ValueError(
                f"`alg_temp`={alg_temp} has no effect with alg='origin' (each mask is drawn independently); "
                "use a confidence order (alg='maskgit_plus', 'topk_margin' or 'entropy') "
                "or alg_temp=None."
            )
        fields.optional_int(
            "DreamUnmask", "steps", self.steps, 1, "None: one per mask; else forwards per block"
        )
        eps = fields.real(
            "DreamUnmask",
            "eps",
            self.eps,
            minimum=0.0,
            maximum=1.0,
            strict_minimum=True,
            strict_maximum=True,
            hint="Dream's final timestep, 1e-3 by default",
        )
        object.__setattr__(self, "eps", eps)
        fields.choice("DreamUnmask", "filter_order", self.filter_order, DREAM_FILTER_ORDERS)

    def requires(self) -> Needs:
        """The statistics of the confidence order; a block takes up to `steps` forwards, possibly
        more than its masks, and the schedule can fill no mask at a step (e.g. the first of
        `steps = masks`: floor(n (1 - eps) / n) = 0); the drawn orders (`origin`, `alg_temp > 0`)
        draw over the batch's `[B, S]`; Dream's filter order."""
        stats = confidence_stats(DREAM_CONFIDENCE[self.alg]) if self.alg != "origin" else frozenset()
        return Needs(
            stats=stats,
            extra_forwards=self.steps or 0,
            progress_every_step=False,
            batch_independent=self.alg != "origin" and not self.alg_temp,
            top_p_first=self.filter_order == "top_p_first",
        )

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        if self.steps is None:
            width = ctx.masked.shape[-1]
            steps: int | torch.Tensor = ctx.block_masked.clamp(1, width)  # [B]
            last = ctx.step >= ctx.block_masked - 1  # [B]
        else:
            steps, width = self.steps, self.steps
            last = ctx.step >= self.steps - 1  # [B]
        frac = dream_fraction(steps, ctx.step, self.eps, width)  # [B]
        if self.alg == "origin":
            u = torch.rand(masked.shape, generator=ctx.generator, device=masked.device)  # [B, S]
            return StepResult.unmasking(ctx, masked & ((u < frac[:, None]) | last[:, None]))  # [B, S]
        m = masked.sum(-1)  # [B]
        k = torch.where(last, m, (m.to(torch.float32) * frac).floor().long())  # [B]
        conf = dream_confidence(ctx, self.alg)  # [B, S]
        neg = torch.full_like(conf, -float("inf"))  # [B, S]
        if self.alg_temp:
            p = torch.softmax(torch.where(masked, conf / self.alg_temp, neg), dim=-1)  # [B, S]
            e = torch.empty_like(p).exponential_(1, generator=ctx.generator)  # [B, S]
            scores = torch.where(masked, p / e, neg)  # [B, S]
        else:
            scores = conf  # [B, S]
        return StepResult.unmasking(ctx, top_k_masked(scores, masked, k))
