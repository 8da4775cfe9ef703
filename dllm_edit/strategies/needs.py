"""`Needs`: the one declaration of what a strategy needs of the decoding loop.

A strategy states, in one frozen value, every input it reads beyond the span and its candidates and
everything the loop must allow for: the candidate statistics, the finished blocks in its span, the
shadow block, the forwards it may add to a block, whether it puts masks back, the vocabulary its
fields are sized for, and the two claims the property suite holds it to. The loop reads the merged
`Needs` of the whole run once, refuses before the first forward what the model's adapter cannot
give (`check_needs`), and then guarantees every declared input: a strategy's `step` never checks
for one.

A combinator (a rule holding other rules, e.g. `Prophet(base=...)`) never forwards its parts'
declarations by hand: `Strategy.needs` merges the rule's own `requires()` with the needs of every
strategy among its fields (`merge_needs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from dllm_edit.kernels import STAT_NAMES, StatName, resolve_stats


@dataclass(frozen=True)
class Needs:
    """What one strategy (or a whole run, merged) needs of the decoding loop.

    Attributes:
        stats: candidate statistics `step` reads through `StepContext.stat(name)`, names of
            `dllm_edit.kernels.STAT_NAMES` (`"current_prob"`, `"top_prob"`, `"second_prob"`,
            `"entropy"`, `"kl"`); the candidate pass computes only what some strategy asks for.
            Earlier names (`"current"`, `"second"`) are accepted and resolved. The candidate pass
            computes the top-2 statistics together, so a strategy may find more in the context
            than it declared; it reads only what it declared.
        window: finished blocks before the active one that must be in the span (multi-block
            editing); the adapter must support multi-block editing when > 0.
        shadow_block: `step` reads `StepContext.stat("shadow_prob")`, WINO's leave-one-out
            verification; the adapter must build the shadow block, and no KV cache is used.
        extra_forwards: forwards a block may need beyond `block_length + max_post_steps` (rules
            that put masks back or run a fixed number of steps); the config refuses a hard cap
            below the sum.
        remasks: `step` may put the mask back on written tokens.
        vocab_size: the logits size the strategy's fields are built for (PC-Sampler's prior);
            a model whose logits rows have another size is refused before the first forward.
        progress_every_step: every step fills at least one mask while masks remain (None: True
            unless `remasks`); False for rules whose schedule may fill none at a step.
        batch_independent: a row decodes the same in a batch as alone, draw for draw; False for
            rules that draw one `[B, S]` sample per step (equal in distribution only).
        across_blocks: the rule's history spans the whole run, not one block (opt-in; KLASS's
            `history="canvas"`): (1) the per-row `state` it returns is handed back at the row's next
            step even across a block boundary (at a block's first step, the state of the row's last
            *active* step of the previous block; steps where a row is frozen never change its
            state, so a row decodes the same in a batch as alone); (2) with `"kl"`, a block's first
            forward is compared with the row's previous forward wherever that forward predicted the
            slot: on adapters whose forwards see the blocks ahead (bidirectional, shifted, masked
            LM, the approximate prefix cache) the loop keeps the previous forward's distribution of
            the next block too; elsewhere (block-causal, dual cache, WINO's shadow block) no earlier
            forward predicted the block and `"kl"` is `+inf` at its first step, as without it.
        whole_canvas: `step` reads the step's forward over the whole completion
            (`StepContext.canvas`: the candidates and declared statistics of every slot from the
            first generated block to the canvas's end) and may finish a row from it
            (`StepResult.finish` without `fill`). Only adapters whose forwards predict the blocks
            ahead give it (bidirectional, shifted, masked LM, the approximate prefix cache, which
            then caches the prompt only); block-causal models, the dual cache and WINO's shadow
            block are refused before the first forward. Not with `"kl"`.
        top_p_first: with both `top_k` and `top_p` set, the candidate pass filters top-p first,
            then top-k (Dream's `sample_tokens`); otherwise top-k first (transformers' order).

    Examples:
        >>> a = Needs(stats={"entropy"}, extra_forwards=2)
        >>> b = Needs(stats={"top_prob"}, window=1)
        >>> merged = a | b
        >>> sorted(merged.stats), merged.window, merged.extra_forwards
        (['entropy', 'top_prob'], 1, 2)
    """

    stats: Collection[StatName] = frozenset()
    window: int = 0
    shadow_block: bool = False
    extra_forwards: int = 0
    remasks: bool = False
    vocab_size: int | None = None
    progress_every_step: bool | None = None
    batch_independent: bool = True
    across_blocks: bool = False
    top_p_first: bool = False
    whole_canvas: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "stats", resolve_stats("Needs", self.stats, companions=False))
        for name in ("window", "extra_forwards"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"`{name}` of Needs must be an int >= 0, got {value!r}.")
        size = self.vocab_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"`vocab_size` of Needs must be None or an int >= 1, got {size!r}.")
        for name in (
            "shadow_block",
            "remasks",
            "batch_independent",
            "across_blocks",
            "top_p_first",
            "whole_canvas",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"`{name}` of Needs must be a bool, got {getattr(self, name)!r}.")
        if self.progress_every_step is None:
            object.__setattr__(self, "progress_every_step", not self.remasks)
        elif not isinstance(self.progress_every_step, bool):
            raise TypeError(
                f"`progress_every_step` of Needs must be a bool or None, got {self.progress_every_step!r}."
            )

    def __or__(self, other: Needs) -> Needs:
        """The needs of running both: see `merge_needs`."""
        if not isinstance(other, Needs):
            return NotImplemented
        return merge_needs((self, other))

    def replace(self, **changes: Any) -> Needs:
        """A copy with `changes` (field names of `Needs`)."""
        return dataclasses.replace(self, **changes)


def merge_needs(needs: Iterable[Needs]) -> Needs:
    """The needs of running several strategies in one loop (or one rule and its parts).

    Statistics are united, the window is the largest, the shadow block, re-masking, a history
    across blocks, the whole canvas and Dream's filter order are needed if any part needs them,
    extra forwards add up (each part may spend its own), the claims hold only if every part makes
    them, and vocabulary sizes must agree.

    Raises:
        ValueError: two parts are sized for different vocabularies.

    Examples:
        >>> merge_needs([Needs(window=1), Needs(remasks=True)]).progress_every_step
        False
        >>> merge_needs([]) == Needs()
        True
    """
    parts = list(needs)
    sizes = sorted({n.vocab_size for n in parts if n.vocab_size is not None})
    if len(sizes) > 1:
        raise ValueError(
            f"The strategies are sized for different vocabularies ({sizes}): a run decodes one model, so "
            "every vocabulary-sized field (e.g. a PC-Sampler prior) must match its logits; rebuild them "
            "for one vocabulary."
        )
    stats: set[StatName] = set()
    for n in parts:
        stats.update(n.stats)
    return Needs(
        stats=frozenset(stats),
        window=max((n.window for n in parts), default=0),
        shadow_block=any(n.shadow_block for n in parts),
        extra_forwards=sum(n.extra_forwards for n in parts),
        remasks=any(n.remasks for n in parts),
        vocab_size=sizes[0] if sizes else None,
        progress_every_step=all(bool(n.progress_every_step) for n in parts),
        batch_independent=all(n.batch_independent for n in parts),
        across_blocks=any(n.across_blocks for n in parts),
        top_p_first=any(n.top_p_first for n in parts),
        whole_canvas=any(n.whole_canvas for n in parts),
    )


__all__ = ["STAT_NAMES", "Needs", "merge_needs"]
