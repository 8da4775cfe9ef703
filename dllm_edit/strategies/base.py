"""The strategy protocol: what a strategy sees at one step, what it returns, what it needs.

A decoding step covers a *span* of positions: the active block, preceded (with multi-block
editing) by a window of recently finished blocks. Strategies receive a read-only `StepContext` and
return a frozen `StepResult`; the decoding loop unions the results of all strategies and writes the
candidate tokens at once. A strategy declares what it needs of the loop once, in a `Needs` value
(`Strategy.requires`); the loop provides every declared input, so `step` never checks for one.
Strategies never mutate the context and keep nothing on themselves: per-row state a rule carries
from step to step goes back to the loop in `StepResult.state` and returns as `StepContext.state`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, overload

import torch

from dllm_edit.kernels import STAT_NAMES, StatName

from .canvas_view import CanvasView
from .fields import threshold_field
from .needs import Needs, merge_needs
from .schedules import Schedule

#: Per-slot inputs a strategy reads with `StepContext.stat(name)`: the candidate statistics of
#: `dllm_edit.kernels.STAT_NAMES`, and `"shadow_prob"` (WINO's shadow block, `Needs.shadow_block`).
InputName = StatName | Literal["shadow_prob"]

#: Kept for strategies written against earlier releases: the statistic names `Needs.stats` takes.
STATS = STAT_NAMES

# earlier releases' StepContext keywords -> the one name of each input
_CONTEXT_ALIASES: dict[str, InputName] = {
    "current_probs": "current_prob",
    "top_probs": "top_prob",
    "second_probs": "second_prob",
    "kl_prev": "kl",
    "shadow_probs": "shadow_prob",
}


class _EarlierName:
    """A read-only `StepContext` attribute under an earlier release's name: the input `name` of
    `StepContext.stats`, or None when the run did not compute it."""

    def __init__(self, name: InputName) -> None:
        self.name = name

    @overload
    def __get__(self, ctx: None, owner: type | None = None) -> _EarlierName: ...
    @overload
    def __get__(self, ctx: StepContext, owner: type | None = None) -> torch.Tensor | None: ...
    def __get__(self, ctx: StepContext | None, owner: type | None = None) -> Any:
        return self if ctx is None else ctx.stats.get(self.name)


@dataclass(frozen=True, init=False)
class StepContext:
    """Read-only view of one decoding step, batched over rows.

    Attributes:
        tokens: LongTensor `[B, S]`, the span's tokens at the top of the step (the "old" tokens).
        masked: BoolTensor `[B, S]`, positions holding the mask token at the top of the step.
        editable: BoolTensor `[B, S]`, positions the decoder wrote (the completion, and the prompt's
            masks when infilling; never a token the user gave, nor padding) that were not masked at
            the top of the step: the positions T2T may rewrite.
        in_block: BoolTensor `[S]`, True on the active block, False on the multi-block-edit window.
        cand_tokens: LongTensor `[B, S]`, the proposed token at every position.
        cand_probs: FloatTensor `[B, S]`, its probability.
        step: LongTensor `[B]`, forwards already spent by each row in this block (0 on the first step).
        block_index: index of the active block among the generated blocks (0 for the first).
        active: BoolTensor `[B]`, rows that are still decoding this block.
        block_masked: LongTensor `[B]`, masked positions of the active block at its first step
            (what LLaDA-1's quota spreads over the steps). A hand-built context without it takes the
            masks of the active block in `masked`.
        mask_token_id: the mask token id (for strategies that write it, e.g. `LowConfidenceRemask`).
        positions: LongTensor `[B, S]`, each span slot's offset from the row's first completion
            slot (0 for the first generated token, negative on the prompt). A hand-built context
            without it counts from the span's first slot.
        generator: the `torch.Generator` of the call (strategies that draw, e.g. Dream's `alg_temp`
            or LLaDA's random remasking, draw from it), or None.
        state: this strategy's own per-row state, as it returned it in `StepResult.state` at the
            previous step of the block (tensors with the batch as first dim); empty at a block's
            first step. The loop owns it and resets it at every block; a row that stops being
            active stays inactive for the rest of the block, so its state is never read again.
            A strategy whose `Needs` has `across_blocks=True` gets it back across blocks instead:
            at a block's first step, each row's state of its last active step (empty only at the
            run's first step); steps where a row is frozen never change it.
        stats: the per-slot inputs the run's strategies declared (`Needs.stats`,
            `Needs.shadow_block`), FloatTensors `[B, S]` by name; read them with `stat(name)`.
            Statistics are of the candidate's distribution (filtered, temperature-scaled):
            `"current_prob"`, the probability of the token at each position (`tokens`, meaningless
            at masks); `"top_prob"` / `"second_prob"`, the two largest probabilities (equal when
            they tie); `"entropy"` in nats; `"kl"`, `KL(p_t || p_{t-1})` to the row's previous forward
            at the slot (`+inf` at a block's first step, unless a strategy of the run declares
            `Needs(across_blocks=True)` and the previous forward predicted the slot);
            `"shadow_prob"`, the probability of each active-block slot's token under WINO's shadow
            block.
        canvas: the step's forward over the whole completion (`CanvasView`: tokens, masks,
            candidates and the declared statistics from the first generated block to the canvas's
            end) when a strategy of the run declares `Needs(whole_canvas=True)`, else None.

    The earlier keyword names `current_probs`, `top_probs`, `second_probs`, `entropy`, `kl_prev`
    and `shadow_probs` are still accepted by the constructor and readable as attributes (None
    when not computed).
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
    block_masked: torch.Tensor
    mask_token_id: int | None
    positions: torch.Tensor
    generator: torch.Generator | None
    state: Mapping[str, torch.Tensor]
    stats: Mapping[str, torch.Tensor]
    canvas: CanvasView | None

    def __init__(
        self,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        editable: torch.Tensor,
        in_block: torch.Tensor,
        cand_tokens: torch.Tensor,
        cand_probs: torch.Tensor,
        step: torch.Tensor,
        block_index: int,
        active: torch.Tensor,
        block_masked: torch.Tensor | None = None,
        mask_token_id: int | None = None,
        positions: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        state: Mapping[str, torch.Tensor] | None = None,
        stats: Mapping[str, torch.Tensor] | None = None,
        canvas: CanvasView | None = None,
        **inputs: torch.Tensor | None,
    ) -> None:
        values = dict(stats or {})
        for key, value in inputs.items():
            name = _CONTEXT_ALIASES.get(key, key)
            if name not in (*STAT_NAMES, "shadow_prob"):
                raise TypeError(
                    f"StepContext got an unexpected keyword {key!r}; per-slot inputs are "
                    f"{[*STAT_NAMES, 'shadow_prob']} (or pass them in `stats`)."
                )
            if value is not None:
                values[name] = value
        if block_masked is None:  # a hand-built context: the active block's masks in `masked`
            block_masked = (masked & in_block).sum(-1)  # [B]
        if positions is None:  # a hand-built context: offsets from the span's first slot
            positions = torch.arange(tokens.shape[-1], device=tokens.device).expand_as(tokens)  # [B, S]
        fields = dict(
            tokens=tokens,
            masked=masked,
            editable=editable,
            in_block=in_block,
            cand_tokens=cand_tokens,
            cand_probs=cand_probs,
            step=step,
            block_index=block_index,
            active=active,
            block_masked=block_masked,
            mask_token_id=mask_token_id,
            positions=positions,
            generator=generator,
            state=state if state is not None else {},
            stats=values,
            canvas=canvas,
        )
        for key, stored in fields.items():
            object.__setattr__(self, key, stored)

    def stat(self, name: InputName) -> torch.Tensor:
        """FloatTensor `[B, S]`: the per-slot input `name` the strategy declared in its `Needs`.

        Raises:
            LookupError: `name` was not declared (a strategy reading what it did not ask for), or
                a hand-built context does not hold it.
        """
        try:
            return self.stats[name]
        except KeyError:
            raise LookupError(
                f"StepContext holds no {name!r}: declare it in the strategy's Needs (stats={{{name!r}}}"
                + (", or shadow_block=True" if name == "shadow_prob" else "")
                + "), or pass it when building a context by hand "
                f"(StepContext(..., stats={{{name!r}: tensor}}))."
            ) from None

    @property
    def mask_id(self) -> int:
        """The mask token id, for rules that write it (the loop always sets `mask_token_id`).

        Raises:
            LookupError: a hand-built context without `mask_token_id`.
        """
        if self.mask_token_id is None:
            raise LookupError(
                "this StepContext has no mask_token_id: pass mask_token_id=... when building it by hand."
            )
        return self.mask_token_id

    def with_state(self, state: Mapping[str, torch.Tensor]) -> StepContext:
        """This context with another strategy's per-row `state` (the loop's hand-off)."""
        return dataclasses.replace(self, state=state)

    # earlier releases' names of the inputs, None when the input was not computed
    current_probs = _EarlierName("current_prob")
    top_probs = _EarlierName("top_prob")
    second_probs = _EarlierName("second_prob")
    entropy = _EarlierName("entropy")
    kl_prev = _EarlierName("kl")
    shadow_probs = _EarlierName("shadow_prob")


@dataclass(frozen=True)
class StepResult:
    """What one strategy decided at one step.

    Attributes:
        commit: BoolTensor `[B, S]`, masked positions to unmask (the set Γ).
        edit: BoolTensor `[B, S]`, written positions to rewrite (the set Δ).
        tokens: LongTensor `[B, S]`, the tokens to write where `commit | edit`.
        state: the strategy's per-row state after this step (tensors with the batch as first dim),
            handed back as `StepContext.state` at the next step of the block (and across blocks
            with `Needs(across_blocks=True)`); None keeps no state.
        finish: BoolTensor `[B]`, rows this step *finishes* (None: none). After the step's writes
            the loop fills every mask left in such a row's whole completion (the active block and
            every block after it) and freezes the row for the rest of the run, like a row stopped
            at EOS: it spends no more forwards. The fill is `fill` where given, else the step's
            candidates (`StepContext.canvas.cand_tokens`, which needs `Needs(whole_canvas=True)`).
        fill: LongTensor `[B]`, the token a finished row's masks take (e.g. EOS); None: the
            step's candidates.
    """

    commit: torch.Tensor
    edit: torch.Tensor
    tokens: torch.Tensor
    state: Mapping[str, torch.Tensor] | None = None
    finish: torch.Tensor | None = None
    fill: torch.Tensor | None = None

    @staticmethod
    def unmasking(ctx: StepContext, commit: torch.Tensor) -> StepResult:
        """The result of a rule that only unmasks: the candidates at `commit` (`[B, S]`), no edit."""
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)

    @staticmethod
    def empty(ctx: StepContext) -> StepResult:
        """A result that writes nothing (for strategies that skip a step)."""
        none = torch.zeros_like(ctx.masked)  # [B, S]
        return StepResult(commit=none, edit=none, tokens=ctx.tokens)


class Strategy:
    """Base class of decoding strategies.

    A strategy is a frozen dataclass whose fields are validated in `__post_init__` (with the
    validators of `dllm_edit.strategies.fields`), with a pure `step` and one declaration of what it
    needs of the loop, `requires()`. The loop merges the needs of the run (`needs`), refuses before
    the first forward what the model cannot give, and provides every declared input.

    Attributes:
        name: registry name (defaults to the class name).
        unmasks: True if the strategy fills masked positions (a run needs at least one; the
            comparison harness compares these).
        sweep: `(field, values)`, the setting `dllm-edit bench --strategies` varies to trace the
            rule's speed / accuracy curve (its threshold, γ, ...), from the most careful value to
            the most aggressive; None: the rule is measured at its defaults only.

    Examples:
        >>> from dataclasses import dataclass
        >>> import torch
        >>> from dllm_edit.strategies import Needs, StepResult, Strategy
        >>> @dataclass(frozen=True)
        ... class MostUncertainFirst(Strategy):
        ...     unmasks = True
        ...     def requires(self):
        ...         return Needs(stats={"entropy"})
        ...     def step(self, ctx):
        ...         score = torch.where(ctx.masked & ctx.in_block, ctx.stat("entropy"), -1.0)  # [B, S]
        ...         commit = ctx.masked & ctx.in_block & (score == score.max(-1, keepdim=True).values)
        ...         return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)
        >>> sorted(MostUncertainFirst().needs.stats)
        ['entropy']
    """

    name: ClassVar[str] = ""
    unmasks: ClassVar[bool] = False
    sweep: ClassVar[tuple[str, tuple[Any, ...]] | None] = None

    def requires(self) -> Needs:
        """What this rule itself needs of the loop (its parts' needs are added by `needs`).

        Override it to declare statistics, a window, the shadow block, extra forwards, re-masking,
        a vocabulary size or the property claims (`Needs`). The default needs nothing."""
        return Needs()

    def parts(self) -> tuple[Strategy, ...]:
        """The strategies this one holds in its fields (a combinator's base rules), in field order."""
        found: list[Strategy] = []
        for value in vars(self).values():
            if isinstance(value, Strategy):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found.extend(v for v in value if isinstance(v, Strategy))
        return tuple(found)

    @property
    def needs(self) -> Needs:
        """Everything running this strategy needs: its `requires()`, merged with the needs of its
        `parts()` (never forwarded by hand) and with hooks of earlier releases a subclass overrides."""
        return merge_needs((self.requires(), _legacy_needs(self), *(part.needs for part in self.parts())))

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse a model whose logits rows have `vocab_size` entries when `needs.vocab_size` differs.

        The loop calls it before the first forward (`dllm_edit.vocab.check_strategies_vocab`).

        Raises:
            ValueError: the strategy's vocabulary-sized fields have another size.
        """
        for part in self.parts():  # a part's own check names its field
            part.check_vocab(vocab_size)
        size = self.needs.vocab_size
        if size is not None and size != vocab_size:
            raise ValueError(
                f"{type(self).__name__} is built for a vocabulary of {size} entries but the model's logits "
                f"have {vocab_size}: rebuild its vocabulary-sized fields for this model."
            )

    # ---- the needs under the names of earlier releases (read-only views of `needs`)
    @property
    def needs_stats(self) -> frozenset[str]:
        return frozenset(self.needs.stats)

    @property
    def needs_current_probs(self) -> bool:
        return "current_prob" in self.needs.stats

    @property
    def needs_window(self) -> int:
        return self.needs.window

    @property
    def needs_shadow_block(self) -> bool:
        return self.needs.shadow_block

    @property
    def extra_forwards_per_block(self) -> int:
        return self.needs.extra_forwards

    @property
    def remasks(self) -> bool:
        return self.needs.remasks

    @property
    def progress_every_step(self) -> bool:
        return bool(self.needs.progress_every_step)

    @property
    def batch_independent(self) -> bool:
        return self.needs.batch_independent

    def step(self, ctx: StepContext) -> StepResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (schedules and held strategies become dicts, tuples lists),
        reloaded by `strategy_from_dict`."""
        out: dict[str, Any] = {"type": self.registry_name()}
        for key, value in self.__dict__.items():
            if key.startswith("_"):
                continue
            out[key] = _serialisable(value)
        return out

    @classmethod
    def registry_name(cls) -> str:
        return cls.name or cls.__name__


def _serialisable(value: Any) -> Any:
    if isinstance(value, (Schedule, Strategy)):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_serialisable(v) for v in value]
    return value


_LEGACY_HOOKS = (
    "needs_stats",
    "needs_current_probs",
    "needs_window",
    "needs_shadow_block",
    "extra_forwards_per_block",
    "remasks",
    "progress_every_step",
    "batch_independent",
)


def _legacy_needs(strategy: Strategy) -> Needs:
    """The needs a subclass written for an earlier release declares through the old hooks
    (properties or class attributes it overrides), as one `Needs`; `Needs()` for the others."""
    cls = type(strategy)
    overridden = {
        hook: getattr(strategy, hook)
        for hook in _LEGACY_HOOKS
        if getattr(cls, hook) is not getattr(Strategy, hook)
    }
    if not overridden:
        return Needs()
    stats = set(overridden.get("needs_stats", ()))
    if overridden.get("needs_current_probs"):
        stats.add("current_prob")
    changes: dict[str, Any] = dict(
        stats=frozenset(stats),
        window=int(overridden.get("needs_window", 0)),
        shadow_block=bool(overridden.get("needs_shadow_block", False)),
        extra_forwards=int(overridden.get("extra_forwards_per_block", 0)),
        remasks=bool(overridden.get("remasks", False)),
        batch_independent=bool(overridden.get("batch_independent", True)),
    )
    if "progress_every_step" in overridden:
        changes["progress_every_step"] = bool(overridden["progress_every_step"])
    return Needs(**changes)


__all__ = ["STATS", "InputName", "Needs", "StepContext", "StepResult", "Strategy", "threshold_field"]
