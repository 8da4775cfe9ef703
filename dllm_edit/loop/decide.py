"""The rules decide: every strategy's `step` on the context (with its own state), their union over
the active rows, and the rows they finish (`Decision`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from dllm_edit.strategies import StepContext, StepResult

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.run import DecodeLoop


class Decision(NamedTuple):
    """What the rules decided at one step (active rows only)."""

    commit: torch.Tensor  # [B, S] masks to fill
    edit: torch.Tensor  # [B, S] written tokens to replace (or remask)
    tokens: torch.Tensor  # [B, S] the tokens written where commit | edit
    finish: torch.Tensor | None  # [B] rows to finish, or None
    fill: torch.Tensor | None  # [B] their fill tokens (-1: the step's candidates), with `finish`


def decide(run: DecodeLoop, ctx: StepContext, blk: BlockState) -> Decision:
    """Every strategy's step on the context (with its own state); their union, active rows only;
    the rows the strategies finish with their fill tokens."""
    results = [
        s.step(ctx if not blk.states[i] else ctx.with_state(blk.states[i]))
        for i, s in enumerate(run.strategies)
    ]
    blk.states = [
        carry_state(old, r.state, blk.active) if carry else (r.state if r.state is not None else {})
        for old, r, carry in zip(blk.states, results, run.carries)
    ]
    commit, edit, new = combine(results, ctx.tokens)
    finish = finishes(run, results, blk.active)
    live = blk.active[:, None]  # [B, 1]
    return Decision(commit & live, edit & live, new, *(finish if finish is not None else (None, None)))


def combine(
    results: list[StepResult], tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Union of the strategies' decisions; later strategies win where two write the same slot."""
    commit = torch.zeros_like(results[0].commit)  # [B, S]
    edit = torch.zeros_like(results[0].edit)  # [B, S]
    new = tokens  # [B, S]
    for r in results:
        write = r.commit | r.edit  # [B, S]
        new = torch.where(write, r.tokens, new)
        commit = commit | r.commit
        edit = edit | r.edit
    return commit, edit & ~commit, new


def finishes(
    run: DecodeLoop, results: list[StepResult], active: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The active rows the results finish (`[B]`) and their fill tokens (`[B]`, -1 for the
    candidates; a later strategy's fill wins), or None when no result finishes a row.

    Raises:
        TypeError: a result finishes rows without `fill` in a run without the whole-canvas view.
    """
    finish: torch.Tensor | None = None
    fill = torch.full_like(active, -1, dtype=torch.long)  # [B]
    for s, r in zip(run.strategies, results):
        if r.finish is None:
            continue
        if r.fill is None and not run.whole:
            raise TypeError(
                f"{type(s).__name__}.step returned `finish` without `fill`, which fills the row from the "
                "step's candidates over the whole canvas: declare Needs(whole_canvas=True) in its "
                "requires(), or return the fill token (`fill`, LongTensor [B])."
            )
        rows = r.finish & active  # [B]
        fill = torch.where(rows, -1 if r.fill is None else r.fill, fill)  # [B]
        finish = rows if finish is None else finish | rows
    return None if finish is None else (finish, fill)


def carry_state(old: dict[str, torch.Tensor], new: Any, active: torch.Tensor) -> dict[str, torch.Tensor]:
    """A history-across-blocks strategy's state after a step: each active row's new state, each
    frozen row's old one (`active`: `[B]`), so a row's state is that of its last active step."""
    if new is None:  # "keeps no state"
        return {}
    out = {}
    for key, value in new.items():
        before = old.get(key)
        if before is None or before.shape != value.shape:  # a new entry, or the span changed width
            out[key] = value
        else:
            live = active.view(-1, *([1] * (value.dim() - 1)))  # [B, 1, ...]
            out[key] = torch.where(live, value, before)
    return out
