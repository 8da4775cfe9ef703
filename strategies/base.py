"""The strategy protocol: what a strategy sees at one step and what it returns.

A decoding step covers a *span* of positions: the active block, preceded (with multi-block
editing) by a window of recently finished blocks. Strategies receive a read-only
`StepContext` and return a frozen `StepResult`; the decoding loop unions the
results of all strategies and writes the candidate tokens at once. Strategies never mutate the
context and keep no per-block progress of their own (that lives in the loop's state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from .schedules import Schedule, as_schedule


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


@dataclass(frozen=True)
class StepResult:
    """What one strategy decided at one step.

    Attributes:
        commit: BoolTensor `[B, S]`, masked positions to unmask (the set Γ).
        edit: BoolTensor `[B, S]`, written positions to rewrite (the set Δ).
        tokens: LongTensor `[B, S]`, the tokens to write where `commit | edit`.
    """

    commit: torch.Tensor
    edit: torch.Tensor
    tokens: torch.Tensor

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
    """

    name: ClassVar[str] = ""
    unmasks: ClassVar[bool] = False

    @property
    def needs_window(self) -> int:
        return 0

    @property
    def needs_current_probs(self) -> bool:
        """Whether `step` reads `StepContext.current_probs` (the loop computes it only then)."""
        return False

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
