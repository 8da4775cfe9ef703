"""Prophet (Li et al., "Diffusion Language Models Know the Answer Before Decoding", arXiv 2508.19982):
early commit-all when the top-1/top-2 gap says the answer has converged, around any unmasking rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .registry import get_strategy, strategy_from_dict
from .selection import masked_in_block
from .unmask import ThresholdUnmask


def _base_strategy(value: Any) -> Strategy:
    if value is None:
        return ThresholdUnmask(threshold=1.0, num_to_transfer=1)
    if isinstance(value, str):
        value = get_strategy(value)()
    elif isinstance(value, dict):
        value = strategy_from_dict(value)
    if not isinstance(value, Strategy) or not value.unmasks:
        raise TypeError(
            "`base` must be None (LLaDA's one-token low-confidence rule), a registered unmasking strategy's "
            f"name or dict, or a Strategy with unmasks=True, got {value!r}."
        )
    return value


def logit_gap(ctx: StepContext) -> torch.Tensor:
    """FloatTensor `[B, S]`: the top-1 minus top-2 logit of each slot's distribution, read off the
    logits by the candidate pass (the statistic `"logit_gap"`), so it stays finite where
    `log p1 - log p2` from float32 probabilities would be `+inf` (a gap past about 104)."""
    return ctx.stat("logit_gap")  # [B, S]


@dataclass(frozen=True)
class Prophet(Strategy):
    """Prophet early commit: when the mean top-1/top-2 logit gap `ḡ` over the watched slots reaches
    `θ(progress)`, commit every mask of the active block at once; otherwise run the `base` rule.

    `ḡ = mean_{i ∈ R} (x1_i - x2_i)`, the top-1 minus top-2 logit (the statistic `"logit_gap"`,
    read off the logits, so it stays finite where `log p1 - log p2` from float32 probabilities
    would overflow to `+inf` past a gap of about 104): at temperature 0 the raw logit gap the
    reference reads (at temperature T it is that gap / T). `R` is the answer region: the span's generated
    slots at completion offsets `[answer_start, answer_start + answer_length)`, or, with
    `answer_start=None`, the active block's masked slots. `progress = (step + 1) / steps` and
    `θ = thresholds[0]` while `progress < phase_bounds[0]`, `thresholds[1]` while
    `< phase_bounds[1]`, else `thresholds[2]` (comparison `ḡ >= θ`). A row whose region is not in
    the span never fires.

    Matches `pixeli99/Prophet:generate_earlyexit.py` (`generate` and `should_early_exit`,
    @460afe4; defaults 7.5 / 5.0 / 2.5 at 33 % / 67 %, `answer_length` 5, base LLaDA's
    low-confidence quota) when the completion is one block (`block_length = max_new_tokens`).
    Across several blocks the reference differs: its progress counts the steps of all blocks, its
    region is read from the whole canvas (here from the span: a region in a later block is not
    seen before that block, and one in an earlier block no longer), and firing fills every mask of
    the canvas and stops (here those of the active block; later blocks decode with the rule again:
    with `answer_start=None` a block that has converged fires at its first step).

    Composition: `base` is any unmasking strategy (its needs are merged into Prophet's by
    `Strategy.needs`, its state passes through); editing strategies compose beside Prophet as with
    any unmasking rule.

    Args:
        base: the rule run when Prophet does not fire (a Strategy, a registered name or a dict);
            None: `ThresholdUnmask(threshold=1.0)`, LLaDA's low-confidence one-token-per-step rule.
        thresholds: the early, mid and late gap thresholds (logits; default `(7.5, 5.0, 2.5)`).
        phase_bounds: the progress bounds of the phases (default `(0.33, 0.67)`).
        answer_start: the first watched completion offset (None: the block's masks).
        answer_length: the watched slots (>= 1, default 5).
        steps: the progress horizon in forwards per block (None: the base's `steps` when it has
            one, else the block's masks at its first step).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import Prophet, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.ones(1, 3, dtype=torch.bool),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.9, 0.99, 0.8]]),
        ...     logit_gap=torch.tensor([[0.9, 0.99, 0.8]]).log() - torch.tensor([[0.01, 1e-4, 1e-3]]).log(),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> # progress 1/10: early phase; mean gap (4.50 + 9.20 + 6.68) / 3 = 6.79 < 7.5: the base's top-1
        >>> Prophet(steps=10).step(ctx).commit.tolist()
        [[False, True, False]]
        >>> Prophet(steps=10, thresholds=(6.0, 5.0, 2.5)).step(ctx).commit.tolist()  # fires: all
        [[True, True, True]]
    """

    base: Any = None
    thresholds: tuple[float, float, float] = (7.5, 5.0, 2.5)
    phase_bounds: tuple[float, float] = (0.33, 0.67)
    answer_start: int | None = None
    answer_length: int = 5
    steps: int | None = None

    unmasks = True
    sweep = ("thresholds", ((10.0, 7.5, 5.0), (7.5, 5.0, 2.5), (5.0, 2.5, 1.0)))

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _base_strategy(self.base))
        object.__setattr__(self, "thresholds", fields.reals("Prophet", "thresholds", self.thresholds, 3))
        bounds = fields.reals("Prophet", "phase_bounds", self.phase_bounds, 2)
        if not 0.0 <= bounds[0] <= bounds[1] <= 1.0:
            raise ValueError(
                f"`phase_bounds` must satisfy 0 <= early_end <= mid_end <= 1, got {self.phase_bounds!r}."
            )
        object.__setattr__(self, "phase_bounds", bounds)
        fields.optional_int(
            "Prophet", "answer_start", self.answer_start, 0, "the first watched completion offset"
        )
        fields.optional_int("Prophet", "steps", self.steps, 1, "the progress horizon in forwards per block")
        fields.positive_int("Prophet", "answer_length", self.answer_length, "slots watched")

    def requires(self) -> Needs:
        """The top-1 / top-2 logit gap (the base's needs are merged in by `needs`)."""
        return Needs(stats={"logit_gap"})

    def _horizon(self, ctx: StepContext) -> torch.Tensor:
        steps = self.steps if self.steps is not None else getattr(self.base, "steps", None)
        if isinstance(steps, int) and not isinstance(steps, bool):
            return torch.full_like(ctx.step, steps)  # [B]
        return ctx.block_masked.clamp(min=1)  # [B]

    def step(self, ctx: StepContext) -> StepResult:
        base = self.base.step(ctx)
        masked = masked_in_block(ctx)  # [B, S]
        if self.answer_start is None:
            region = masked  # [B, S]
        else:
            offset = ctx.positions - self.answer_start  # [B, S]
            region = (ctx.masked | ctx.editable) & (offset >= 0) & (offset < self.answer_length)  # [B, S]
        gap = torch.where(region, logit_gap(ctx), torch.zeros_like(ctx.cand_probs))  # [B, S]
        count = region.sum(-1)  # [B]
        mean_gap = gap.sum(-1) / count.clamp(min=1)  # [B]
        progress = (ctx.step + 1).to(torch.float64) / self._horizon(ctx).to(torch.float64)  # [B]
        early, mid, late = self.thresholds
        theta = torch.where(
            progress < self.phase_bounds[0],
            early,
            torch.where(progress < self.phase_bounds[1], mid, late),
        )  # [B] float64
        fire = (count > 0) & masked.any(-1) & (mean_gap.to(torch.float64) >= theta)  # [B]
        fire_2d = fire[:, None]  # [B, 1]
        return StepResult(
            commit=torch.where(fire_2d, masked, base.commit),  # [B, S]
            edit=base.edit & ~fire_2d,  # [B, S]
            tokens=torch.where(fire_2d, ctx.cand_tokens, base.tokens),  # [B, S]
            state=base.state,
        )
