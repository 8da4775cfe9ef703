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

#: Prophet's regimes: the authors' whole-canvas rule, or the per-block rule.
REGIMES = ("canvas", "block")


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

    Two regimes (the field `regime`):

    - `"canvas"`, the authors' (`pixeli99/Prophet:generate_earlyexit.py`, `generate` and
      `should_early_exit`, @460afe4): progress counts the steps of all blocks,
      `progress = (block_index * steps + step + 1) / (steps * blocks)`; the region is read from
      the step's forward over the whole completion (`StepContext.canvas`, wherever the region lies:
      ahead of the block, in it or behind it; `answer_start=None`: every mask of the completion);
      on a hit every mask of the row's completion takes this forward's candidate and the row stops
      (`StepResult.finish`: the loop spends no more forwards on it). It declares
      `Needs(whole_canvas=True)`, so it runs only on adapters whose forwards predict the blocks
      ahead (bidirectional, shifted, masked LM, the approximate prefix cache); block-causal models
      and the dual cache are refused before the first forward. With the reference's settings
      (LLaDA's quota as `base` with `steps` per block, e.g. 256 new tokens in blocks of 32) it gives
      the reference's tokens and forward count.
    - `"block"` (the default): progress counts the block's steps, the region is read from the span
      (a region in a later block is not seen before that block, and one in an earlier block no
      longer), and a hit fills the active block's masks only (later blocks decode with the rule
      again: with `answer_start=None` a block that has converged fires at its first step). It runs
      on every adapter, block-causal models included, and equals the authors' regime when the
      completion is one block (`block_length = max_new_tokens`).

    The default stays `"block"`: a strategy's `Needs` is one static declaration, so a default that
    switched regime with the adapter would make one config decode differently by model; choose
    `"canvas"` for the authors' behaviour on a bidirectional model.

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
            one, else the block's masks at its first step); `"canvas"` multiplies it by the
            row's blocks.
        regime: `"block"` (default: per-block progress, region in the span, fills the block) or
            `"canvas"` (the authors': progress over all steps, region anywhere in the completion,
            fills the whole row and stops it; needs an adapter that sees the blocks ahead).

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
    regime: str = "block"

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
        fields.choice(
            "Prophet",
            "regime",
            self.regime,
            REGIMES,
            "'canvas' is the authors' (whole-canvas region and fill), 'block' the per-block rule",
        )

    def requires(self) -> Needs:
        """The top-1 / top-2 logit gap, and the whole canvas in the authors' regime (the base's needs
        are merged in by `needs`)."""
        return Needs(stats={"logit_gap"}, whole_canvas=self.regime == "canvas")

    def _horizon(self, ctx: StepContext) -> torch.Tensor:
        steps = self.steps if self.steps is not None else getattr(self.base, "steps", None)
        if isinstance(steps, int) and not isinstance(steps, bool):
            return torch.full_like(ctx.step, steps)  # [B]
        return ctx.block_masked.clamp(min=1)  # [B]

    def _theta(self, progress: torch.Tensor) -> torch.Tensor:
        """The phase threshold at `progress` (`[B]` float64)."""
        early, mid, late = self.thresholds
        return torch.where(
            progress < self.phase_bounds[0],
            early,
            torch.where(progress < self.phase_bounds[1], mid, late),
        )  # [B] float64

    def _fires_on_canvas(self, ctx: StepContext) -> torch.Tensor:
        """The authors' regime: BoolTensor `[B]`, rows whose gap over the region of the whole
        completion reaches the threshold of their progress over all steps."""
        view = ctx.canvas
        if view is None:
            raise LookupError(
                "Prophet(regime='canvas') reads StepContext.canvas, which the loop gives with "
                "Needs(whole_canvas=True); pass canvas=CanvasView(...) when building a context by hand."
            )
        if self.answer_start is None:
            region = view.masked  # [B, C]
        else:
            offset = view.positions - self.answer_start  # [B, C]
            region = view.generated & (offset >= 0) & (offset < self.answer_length)  # [B, C]
        gap = torch.where(region, view.stat("logit_gap"), torch.zeros_like(view.cand_probs))  # [B, C]
        count = region.sum(-1)  # [B]
        mean_gap = gap.sum(-1) / count.clamp(min=1)  # [B]
        per_block = self._horizon(ctx).to(torch.float64)  # [B]
        done = ctx.block_index * per_block + ctx.step.to(torch.float64)  # [B] steps before this one
        progress = (done + 1) / (per_block * view.row_blocks().clamp(min=1))  # [B]
        return (count > 0) & view.masked.any(-1) & (mean_gap.to(torch.float64) >= self._theta(progress))

    def step(self, ctx: StepContext) -> StepResult:
        base = self.base.step(ctx)
        masked = masked_in_block(ctx)  # [B, S]
        if self.regime == "canvas":
            fire = self._fires_on_canvas(ctx)  # [B]
            fire_2d = fire[:, None]  # [B, 1]
            return StepResult(
                commit=torch.where(fire_2d, masked, base.commit),  # [B, S]
                edit=base.edit & ~fire_2d,  # [B, S]
                tokens=torch.where(fire_2d, ctx.cand_tokens, base.tokens),  # [B, S]
                state=base.state,
                finish=fire,  # [B] the loop fills the rest of the row from this forward
            )
        if self.answer_start is None:
            region = masked  # [B, S]
        else:
            offset = ctx.positions - self.answer_start  # [B, S]
            region = (ctx.masked | ctx.editable) & (offset >= 0) & (offset < self.answer_length)  # [B, S]
        gap = torch.where(region, logit_gap(ctx), torch.zeros_like(ctx.cand_probs))  # [B, S]
        count = region.sum(-1)  # [B]
        mean_gap = gap.sum(-1) / count.clamp(min=1)  # [B]
        progress = (ctx.step + 1).to(torch.float64) / self._horizon(ctx).to(torch.float64)  # [B]
        fire = (count > 0) & masked.any(-1) & (mean_gap.to(torch.float64) >= self._theta(progress))  # [B]
        fire_2d = fire[:, None]  # [B, 1]
        return StepResult(
            commit=torch.where(fire_2d, masked, base.commit),  # [B, S]
            edit=base.edit & ~fire_2d,  # [B, S]
            tokens=torch.where(fire_2d, ctx.cand_tokens, base.tokens),  # [B, S]
            state=base.state,
        )
