"""The strategy protocol: what a strategy sees at one step and what it returns.

A decoding step covers a *span* of positions: the active block, preceded (with multi-block
editing) by a window of recently finished blocks. Strategies receive a read-only
`StepContext` and return a frozen `StepResult`; the decoding loop unions the
results of all strategies and writes the candidate tokens at once. Strategies never mutate the
context and keep no per-block progress of their own (that lives in the loop's state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from .schedules import Schedule, as_schedule

#: Per-position statistics a strategy may ask the candidate pass for (`Strategy.needs_stats`).
STATS = ("current", "second", "entropy", "kl")


@dataclass(frozen=True)
class StepContext:
    """Read-only view of one decoding step, batched over rows.

    Attributes:
        tokens: LongTensor `[B, S]`, the span's tokens at the top of the step (the "old" tokens).
        masked: BoolTensor `[B, S]`, positions holding the mask token at the top of the step.
        editable: BoolTensor `[B, S]`, generated (non-prompt, non-padding) positions that were not
            masked at the top of the step: the positions T2T may rewrite.
        in_block: BoolTensor `[S]`, True on the active block, False on the multi-block-edit window.
        cand_tokens: LongTensor `[B, S]`, the proposed token at every position.
        cand_probs: FloatTensor `[B, S]`, its probability.
        step: LongTensor `[B]`, forwards already spent by each row in this block (0 on the first step).
        block_index: index of the active block among the generated blocks (0 for the first).
        active: BoolTensor `[B]`, rows that are still decoding this block.
        block_masked: LongTensor `[B]`, masked positions of the active block at its first step
            (what LLaDA-1's quota spreads over the steps); None where a caller does not track it.
        current_probs: FloatTensor `[B, S]`, the probability of the token at each position (`tokens`)
            under the distribution `cand_probs` comes from (meaningless at masked positions); set by
            the loop only when a strategy declares `needs_current_probs`, else None.
        mask_token_id: the mask token id (for strategies that write it, e.g. `LowConfidenceRemask`);
            the decoding loop always sets it.
        top_probs: FloatTensor `[B, S]`, the largest probability of the same (filtered,
            temperature-scaled) distribution: `cand_probs` when decoding greedily, not when sampling;
            set only when a strategy's `needs_stats` holds `"second"`, else None.
        second_probs: FloatTensor `[B, S]`, the second largest probability of that distribution
            (`top_probs - second_probs` is the top-1/top-2 margin; equal values when the top two
            tie); set with `top_probs`, else None.
        entropy: FloatTensor `[B, S]`, the entropy (nats) of that distribution; set only for
            `"entropy"`, else None.
        kl_prev: FloatTensor `[B, S]`, `KL(p_t || p_{t-1})` at each position, `p_{t-1}` being the
            distribution of the previous forward of the same block at the same slot; `+inf` at a
            block's first step (no previous distribution); set only for `"kl"`, else None.
        positions: LongTensor `[B, S]`, each span slot's offset from the row's first completion
            slot (0 for the first generated token, negative on the prompt); always set by the loop.
        generator: the `torch.Generator` of the call (strategies that draw, e.g. Dream's `alg_temp`
            or LLaDA's random remasking, draw from it), or None.
        state: this strategy's own per-row state, as it returned it in `StepResult.state` at the
            previous step of the block (tensors with the batch as first dim); empty at a block's
            first step. The loop owns it and resets it at every block; a row that stops being
            active stays inactive for the rest of the block, so its state is never read again.
        shadow_probs: FloatTensor `[B, S]`, on the active block, the probability of each slot's token
            (`tokens`) under the shadow block's distribution at that slot (a masked copy of the block
            that sees the canvas without the slot itself; WINO's verification); set only when a
            strategy's `needs_shadow_block` is True (`dllm_edit.adapters.shadow`), else None.
    """

    tokens: torch.Tensor
    masked: torch.Tensor
    editable: torch.Tensor
    in_block: torch.Tensor
    cand_tokens: torch.Tensor
    cand_probs: torch.Tensor
    step: torch.Tensor
    block_index: int
    active: torch.Tensor
    block_masked: torch.Tensor | None = None
    mask_token_id: int | None = None
    current_probs: torch.Tensor | None = None
    top_probs: torch.Tensor | None = None
    second_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    kl_prev: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    generator: torch.Generator | None = None
    state: Mapping[str, torch.Tensor] = field(default_factory=dict)
    shadow_probs: torch.Tensor | None = None


@dataclass(frozen=True)
class StepResult:
    """What one strategy decided at one step.

    Attributes:
        commit: BoolTensor `[B, S]`, masked positions to unmask (the set Γ).
        edit: BoolTensor `[B, S]`, written positions to rewrite (the set Δ).
        tokens: LongTensor `[B, S]`, the tokens to write where `commit | edit`.
        state: the strategy's per-row state after this step (tensors with the batch as first dim),
            handed back as `StepContext.state` at the next step of the block; None keeps no state.
    """

    commit: torch.Tensor
    edit: torch.Tensor
    tokens: torch.Tensor
    state: Mapping[str, torch.Tensor] | None = None

    @staticmethod
    def empty(ctx: StepContext) -> StepResult:
        """A result that writes nothing (for strategies that skip a step)."""
        none = torch.zeros_like(ctx.masked)  # [B, S]
        return StepResult(commit=none, edit=none, tokens=ctx.tokens)


class Strategy:
    """Base class of decoding strategies.

    Subclasses are frozen dataclasses whose fields are validated in `__post_init__`, with a pure
    `step`. Class attributes declare what they need, checked before the loop starts:

    Attributes:
        name: registry name (defaults to the class name).
        unmasks: True if the strategy fills masked positions (a run needs at least one).
        needs_window: number of finished blocks before the active one that must be in the span
            (multi-block editing); 0 for single-block strategies.
        extra_forwards_per_block: forwards a block may need beyond `block_length + max_post_steps`
            (strategies that put masks back); 0 for the others.
        needs_current_probs: True if `step` reads `StepContext.current_probs`; the loop then reads
            the current token's probability in the same pass over the logits (`edit_candidates`).
        sweep: `(field, values)`, the setting `dllm-edit bench --strategies` varies to trace the
            rule's speed / accuracy curve (its threshold, γ, ...), from the most careful value to
            the most aggressive; None: the rule is measured at its defaults only.
        remasks: True if `step` may put the mask back on written tokens (WINO, `LowConfidenceRemask`).
        needs_stats: the per-position statistics `step` reads, a subset of `STATS`
            (`"current"`, `"second"`, `"entropy"`, `"kl"`); the candidate pass computes only what
            some strategy of the run asks for.
    """

    name: ClassVar[str] = ""
    unmasks: ClassVar[bool] = False
    sweep: ClassVar[tuple[str, tuple[Any, ...]] | None] = None
    remasks: ClassVar[bool] = False

    @property
    def progress_every_step(self) -> bool:
        """Whether every step fills at least one mask while masks remain (the invariant the property
        suite checks); False for rules whose schedule may fill none at a step (Dream's), which
        bound a block's forwards by `extra_forwards_per_block` instead."""
        return not self.remasks

    @property
    def batch_independent(self) -> bool:
        """Whether a row decodes the same in a batch as alone, draw for draw; False for rules drawing
        one `[B, S]` sample per step from the call's generator (equal in distribution only)."""
        return True

    @property
    def needs_window(self) -> int:
        return 0

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse a model whose logits rows have `vocab_size` entries, before the first forward.

        The loop calls it on every strategy (`dllm_edit.vocab.check_strategies_vocab`). The default
        accepts any size; a strategy holding something vocabulary-sized (PC-Sampler's prior)
        overrides it and raises a `ValueError` naming the field when the sizes differ."""
        return None

    @property
    def needs_shadow_block(self) -> bool:
        """Whether `step` reads `StepContext.shadow_probs` (the adapter must build the shadow block)."""
        return False

    @property
    def needs_current_probs(self) -> bool:
        """Whether `step` reads `StepContext.current_probs` (the loop computes it only then)."""
        return False

    @property
    def needs_stats(self) -> frozenset[str]:
        """Statistics of `STATS` that `step` reads; the default derives `"current"` from
        `needs_current_probs`."""
        return frozenset({"current"}) if self.needs_current_probs else frozenset()

    @property
    def extra_forwards_per_block(self) -> int:
        """Forwards a block may need beyond `block_length + max_post_steps` because of this strategy
        (e.g. remasking puts masks back); the config refuses a hard cap below the sum."""
        return 0

    def step(self, ctx: StepContext) -> StepResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (schedules become dicts), reloaded by `strategy_from_dict`."""
        out: dict[str, Any] = {"type": self.registry_name()}
        for key, value in self.__dict__.items():
            out[key] = value.to_dict() if isinstance(value, Schedule) else value
        return out

    @classmethod
    def registry_name(cls) -> str:
        return cls.name or cls.__name__


def threshold_field(name: str, value: Any) -> Schedule:
    """Validate and normalise a threshold-valued strategy field."""
    return as_schedule(value, name=name)
