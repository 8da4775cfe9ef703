"""The forward of the step and its candidates: the adapter's session runs the model on the active
rows, the `Proposer` turns the logits into the candidate statistics the rules declared
(`Needs.stats`), over the span (`propose_span`) or the whole completion (`propose_whole`,
`Needs(whole_canvas=True)`). With the `"kl"` statistic, the previous forward's distribution is kept
here too (within a block, and across blocks on an adapter that sees the next block)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from dllm_edit.adapters.shadow import split_shadow
from dllm_edit.kernels import CandidateStats
from dllm_edit.strategies import CanvasView

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.run import DecodeLoop


class Proposal(NamedTuple):
    """A step's forward, read as candidates."""

    cand: CandidateStats  # [B, S] fields over the span (rows outside the forward keep their tokens)
    shadow_probs: torch.Tensor | None  # [B, S] WINO's shadow probabilities, when asked for
    view: CanvasView | None  # the whole-completion view (`Needs.whole_canvas`), else None


def run_forward(run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, old: torch.Tensor) -> Proposal:
    """The step's forward and candidates; also flags the rows whose candidates are NaN/inf
    (`blk.bad`, read at the next step's one device read)."""
    if run.whole:
        cand, whole = propose_whole(run, canvas, blk, old)
        proposal = Proposal(cand, None, canvas_view(run, canvas, blk, whole))
    else:
        proposal = Proposal(*propose_span(run, canvas, blk, old), None)
    blk.bad = (~torch.isfinite(proposal.cand.prob)).any(-1) & blk.active  # [B] read at the next step
    return proposal


def propose_span(
    run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, old: torch.Tensor
) -> tuple[CandidateStats, torch.Tensor | None]:
    """The forward of the active rows and their candidates, as full-batch `[B, S]` fields
    (rows outside the forward keep their tokens); WINO's shadow probabilities when asked for."""
    rows = blk.rows
    ahead = run.sees_ahead and blk.block + 1 < run.layout.num_blocks
    if ahead:  # the next block's logits too, kept for its first step ("kl" across blocks)
        both = run.session.logits(canvas, blk.block, blk.w, ahead=1)  # [R, S + bl, V]
        logits, later = both[:, : -run.layout.block_length], both[:, -run.layout.block_length :]
        _keep_ahead(run, canvas, blk, later)
    else:
        logits = run.session.logits(canvas, blk.block, blk.w)  # [R, S, V] ([R, S + bl, V]: shadow)
    shadow_probs = None
    if run.plan.shadow:
        logits, shadow_probs = split_shadow(logits, canvas, rows, blk.block, blk.w)  # [R, S, V], [B, S]
    if blk.all_rows:
        cand = run.propose(logits, canvas, blk.span, blk.kept)  # [B, S] fields
        if run.keeps_previous:
            _keep(run, blk, (cand.kept_logits, cand.kept_lse))  # type: ignore[arg-type]
        return _without_previous(cand, blk), shadow_probs
    prev = None if blk.kept is None else (blk.kept[0][rows], blk.kept[1][rows])  # [R, S, V], [R, S]
    part = run.propose(logits, canvas[rows], blk.span, prev)  # [R, S] fields
    if run.keeps_previous and run.sees_ahead:
        assert part.kept_logits is not None and part.kept_lse is not None  # "kl" keeps them
        _keep(run, blk, _scatter_kept(blk, (part.kept_logits, part.kept_lse), old.shape))
    elif run.keeps_previous:
        if blk.kept is None:  # the block's first step: frozen rows' slots are never read
            blk.kept = (
                torch.zeros(*old.shape, logits.shape[-1], device=old.device),  # [B, S, V]
                torch.zeros(old.shape, device=old.device),  # [B, S]
            )
        assert part.kept_logits is not None and part.kept_lse is not None  # "kl" keeps them
        blk.kept = (
            blk.kept[0].index_copy(0, rows, part.kept_logits),  # [B, S, V]
            blk.kept[1].index_copy(0, rows, part.kept_lse),  # [B, S]
        )
    cand = part.scatter_rows(rows, old)  # [B, S] fields; frozen rows keep their tokens
    return _without_previous(cand, blk), shadow_probs


def propose_whole(
    run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, old: torch.Tensor
) -> tuple[CandidateStats, CandidateStats]:
    """`Needs.whole_canvas`: one forward's candidates over the whole completion (`[B, C]`
    fields, slots `run.view`) and the span's slice of them (`[B, S]` fields). With `"kl"`, the
    previous forward's distribution over the view is kept (`run.view_kept`), so "kl" compares every
    slot of the view with it."""
    layout = run.layout
    behind = blk.block - layout.first_block  # the view starts at the first generated block
    ahead = layout.num_blocks - blk.block - 1
    logits = run.session.logits(canvas, blk.block, behind, ahead=ahead)  # [R, C, V]
    prev = run.view_kept if run.keeps_previous else None  # ([B, C, V], [B, C]) or None
    if blk.all_rows:
        whole = run.propose(logits, canvas, run.view, prev)  # [B, C] fields
        kept = (whole.kept_logits, whole.kept_lse)
    else:
        rows_prev = None if prev is None else (prev[0][blk.rows], prev[1][blk.rows])  # [R, C, V], [R, C]
        part = run.propose(logits, canvas[blk.rows], run.view, rows_prev)  # [R, C] fields
        whole = part.scatter_rows(blk.rows, canvas[:, run.view])  # [B, C] fields
        kept = (part.kept_logits, part.kept_lse)
        if run.keeps_previous:
            assert kept[0] is not None and kept[1] is not None  # "kl" keeps them
            kept = _scatter_kept(blk, (kept[0], kept[1]), canvas.shape)  # [B, C, V], [B, C]
    if run.keeps_previous:
        whole = _keep_view(run, blk, whole, kept)  # type: ignore[arg-type]
    lo = blk.span.start - run.view.start
    width = old.shape[1]
    span = CandidateStats._make(None if f is None else f[:, lo : lo + width] for f in whole)  # [B, S]
    return span, whole


def _keep_view(
    run: DecodeLoop, blk: BlockState, whole: CandidateStats, kept: tuple[torch.Tensor, torch.Tensor]
) -> CandidateStats:
    """Keep this forward's view distribution for the next step's "kl" (each row: its last active
    forward's), and set "kl" to `+inf` on the rows that had no earlier forward to compare with."""
    live = blk.active  # [B]
    if run.view_kept is not None and run.view_seen is not None:
        kept = (
            torch.where(live[:, None, None], kept[0], run.view_kept[0]),  # [B, C, V]
            torch.where(live[:, None], kept[1], run.view_kept[1]),  # [B, C]
        )
        unseen = ~run.view_seen  # [B]
        run.view_seen = run.view_seen | live
    else:
        unseen = torch.ones_like(live)  # [B] no earlier forward: "kl" is already +inf
        run.view_seen = live.clone()
    run.view_kept = kept
    if whole.kl is not None:
        whole = whole._replace(kl=torch.where(unseen[:, None], torch.inf, whole.kl))  # [B, C]
    return whole


def canvas_view(run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, whole: CandidateStats) -> CanvasView:
    """The `StepContext.canvas` of a `Needs.whole_canvas` run (`[B, C]` fields)."""
    tokens = canvas[:, run.view].clone()  # [B, C]
    generated = run.layout.generated[:, run.view]  # [B, C]
    assert blk.view_positions is not None  # set by start_block when run.whole
    return CanvasView(
        start=run.view.start,
        block_length=run.layout.block_length,
        tokens=tokens,
        masked=(tokens == run.special.mask) & generated,
        generated=generated,
        positions=blk.view_positions,
        cand_tokens=whole.token,
        cand_probs=whole.prob,
        stats=whole.statistics(),
    )


def _scatter_kept(
    blk: BlockState, kept: tuple[torch.Tensor, torch.Tensor], shape: torch.Size
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kept `([R, n, V], [R, n])` of the forward's rows as full-batch `([B, n, V], [B, n])`
    (other rows zero: they are frozen at this step, so `_keep` keeps their earlier values)."""
    rows, batch = blk.rows, shape[0]
    logits = kept[0].new_zeros(batch, *kept[0].shape[1:]).index_copy(0, rows, kept[0])  # [B, n, V]
    lse = kept[1].new_zeros(batch, *kept[1].shape[1:]).index_copy(0, rows, kept[1])  # [B, n]
    return logits, lse


def _keep(run: DecodeLoop, blk: BlockState, kept: tuple[torch.Tensor, torch.Tensor]) -> None:
    """This forward's span distribution as the previous one of the next step. Across blocks,
    each row keeps the one of its last active forward (a frozen row's forward never counts)."""
    if run.sees_ahead and blk.kept is not None:
        live = blk.active[:, None]  # [B, 1]
        kept = (
            torch.where(live[..., None], kept[0], blk.kept[0]),  # [B, S, V]
            torch.where(live, kept[1], blk.kept[1]),  # [B, S]
        )
    blk.kept = kept
    if run.sees_ahead:
        run.last_kept = kept


def _keep_ahead(run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, later: torch.Tensor) -> None:
    """The next block's distribution at this forward (`later`: `[R, bl, V]`), kept for each row
    that is active at this step."""
    bl = run.layout.block_length
    ahead = slice(blk.span.stop, blk.span.stop + bl)
    if blk.all_rows:
        kept = run.propose.keep(later, canvas, ahead)  # [B, bl, V], [B, bl]
    else:
        kept = _scatter_kept(blk, run.propose.keep(later, canvas[blk.rows], ahead), canvas.shape)
    if blk.saw_ahead is None:  # the block's first forward: earlier blocks' slots are never read again
        run.ahead_kept, blk.saw_ahead = kept, blk.active.clone()
    else:
        assert run.ahead_kept is not None
        live = blk.active[:, None]  # [B, 1]
        run.ahead_kept = (
            torch.where(live[..., None], kept[0], run.ahead_kept[0]),  # [B, bl, V]
            torch.where(live, kept[1], run.ahead_kept[1]),  # [B, bl]
        )
        blk.saw_ahead = blk.saw_ahead | blk.active
    run.saw_ahead = blk.saw_ahead


def _without_previous(cand: CandidateStats, blk: BlockState) -> CandidateStats:
    """`"kl"` is `+inf` on the rows that had no previous forward (the block's first step only)."""
    if blk.no_prev is None or cand.kl is None:
        return cand
    kl = torch.where(blk.no_prev[:, None], torch.inf, cand.kl)  # [B, S]
    blk.no_prev = None
    return cand._replace(kl=kl)
