"""`dllm_edit.generate`: the one decoding loop.

Data flow per step (see docs/concepts/decoding.md):

    logits  = session.logits(canvas, block, window)     # adapter; cache holds finished blocks
    cand    = propose(logits)                           # stutter guard, processors, candidate kernel
    results = [strategy.step(ctx) for strategy]         # pure; union of Γ and Δ
    canvas  = write(results)                            # only active rows
    block-end rule per row (post steps, cap), EOS stop per row after each block

Rows are decoded in lockstep over global blocks; a row that has finished its block (or its whole
completion) is frozen and stops counting forwards. A row that will not decode again (its last
block has ended, or the EOS stop will end it after this block) also leaves the forward batch at
once, so a row still editing does not make the batch compute the finished ones; a row with a later
block stays in the batch until the block ends (the cache holds the rows of one batch). There is no
Python loop over rows and no per-row `.item()` inside a step. The loop reads the device once per
step: one small tensor at the top of the step says whether any row is still active, whether the
previous step produced a NaN/inf candidate probability, (multi-block editing) the first window
slot it edited, and whether rows leave the batch. The adapter, the proposer and a streamer may read
more (the block-causal adapter does not; once per block `nonzero` selects the decoding rows and
one read says whether any has a later block, and `nonzero` runs once more on a step where rows
leave).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import GenerationConfig

from dllm_edit.adapters import ModelAdapter, resolve_adapter
from dllm_edit.adapters.shadow import open_shadow_session, split_shadow
from dllm_edit.config import EditGenerationConfig
from dllm_edit.inputs import check_infill, check_input_ids, check_streamer
from dllm_edit.kernels import CandidateStats
from dllm_edit.layout import CanvasLayout, build_canvas
from dllm_edit.output import EditGenerationOutput, StepRecord, cut_after_first_eos
from dllm_edit.proposer import Proposer
from dllm_edit.run_checks import RunPlan, check_run, check_whole_canvas
from dllm_edit.special_tokens import SpecialTokens, resolve_special_tokens
from dllm_edit.strategies import CanvasView, StepContext, StepResult, Strategy
from dllm_edit.streaming import StreamBridge


def model_generation_config(model: Any) -> EditGenerationConfig:
    """The decoding config a model carries: its `generation_config` read as an `EditGenerationConfig`.

    A config saved by dllm_edit (`block_length`, `threshold`, `editing_threshold`, `mask_token_id`,
    ...) decodes with its saved values even when transformers loaded it as a plain
    `GenerationConfig` (as `from_pretrained` does); the honoured transformers fields it sets
    (EOS / pad ids, sampling) carry over; fields with no meaning for diffusion decoding (a model's
    `max_length`, beam settings) are dropped with a warning naming them. No config: the defaults.
    """
    model_gen = getattr(model, "generation_config", None)
    if isinstance(model_gen, EditGenerationConfig):
        return model_gen
    if isinstance(model_gen, GenerationConfig):
        return EditGenerationConfig.from_generation_config(model_gen, strict=False)
    return EditGenerationConfig()


def resolve_config(
    model: Any, generation_config: EditGenerationConfig | None, overrides: dict[str, Any]
) -> EditGenerationConfig:
    """The config of this call: the passed one, else the model's (`model_generation_config`); then
    `overrides` through one `replace()` (unknown keys raise)."""
    if generation_config is None:
        generation_config = model_generation_config(model)
    elif not isinstance(generation_config, EditGenerationConfig):
        raise TypeError(
            "`generation_config` must be an EditGenerationConfig "
            "(e.g. EditGenerationConfig.from_mode('quality')), "
            f"got {type(generation_config).__name__}."
        )
    if overrides:
        return generation_config.replace(**overrides)
    generation_config.validate()
    return generation_config


def _combine(
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


def _nonfinite_error(bad: torch.Tensor, block: int, step: int) -> ValueError:
    """The error for rows `bad` (BoolTensor `[B]`) whose candidate probability was NaN/inf: a NaN or
    +inf logit poisons the row's log-sum-exp, so this catches bad model output without another pass
    over `[B, S, V]`."""
    rows = bad.nonzero().flatten().tolist()
    return ValueError(
        f"NaN/inf logits at block {block}, step {step} (rows {rows}): the model returned NaN/inf "
        "(check the dtype, e.g. fp16 overflow: try bfloat16/float32, the weights and the attention "
        "backend), or a logits processor removed every token of a position."
    )


def _eos_done(canvas: torch.Tensor, layout: CanvasLayout, end: int, special: SpecialTokens) -> torch.Tensor:
    """BoolTensor `[B]`: the completion up to slot `end` has no mask left and contains an EOS."""
    region = canvas[:, :end]  # [B, end]
    gen = layout.generated[:, :end]  # [B, end]
    no_mask = ~((region == special.mask) & gen).any(-1)  # [B]
    eos = special.eos_tensor(canvas.device)  # [E]
    has_eos = (torch.isin(region, eos) & gen).any(-1)  # [B]
    return no_mask & has_eos


def _finalize(
    canvas: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    layout: CanvasLayout,
    special: SpecialTokens,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences `[B, W + G]` (the prompts with their masks filled, then the completions cut after
    the first EOS, padded) and completion lengths `[B]`."""
    completion = canvas.gather(1, layout.output_index)  # [B, G]
    completion, lengths = cut_after_first_eos(completion, special.eos_tensor(canvas.device), special.pad)
    prompts = input_ids
    if layout.prompt_index is not None:  # infilling: the prompt's masks as decoded
        filled = canvas.gather(1, layout.prompt_index)  # [B, W]
        prompts = torch.where(attention_mask.bool(), filled, input_ids)  # [B, W]
    return torch.cat([prompts, completion], dim=1), lengths


@torch.no_grad()
def generate(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    generation_config: EditGenerationConfig | None = None,
    adapter: str | ModelAdapter | None = None,
    streamer: Any = None,
    logits_processor: Any = None,
    generator: torch.Generator | None = None,
    return_dict_in_generate: bool | None = None,
    tokenizer: Any = None,
    **overrides: Any,
) -> EditGenerationOutput | torch.Tensor:
    """Decode completions with editable (M2T + T2T, optionally multi-block) diffusion decoding.

    Args:
        model: a diffusion LM whose forward returns `.logits` (`[B, L, V]`, logits at `i` predicting
            token `i`).
        input_ids: LongTensor `[B, W]`, left-padded prompts.
        attention_mask: `[B, W]` with 0 on left padding (None: no padding).
        generation_config: an `EditGenerationConfig`; default: the model's generation config
            (`model_generation_config`: a saved dllm_edit config is read even when transformers
            loaded it as a plain `GenerationConfig`), else the Quality preset.
        adapter: `"block_causal"`, `"bidirectional"`, `"shifted"`, `"masked_lm"` (or a third-party
            name), a `ModelAdapter`, or None to detect from the model.
        streamer: a transformers streamer (batch size 1): `put()` receives the prompt, then each block's
            final tokens (up to the first EOS); `end()` is called at the end.
        logits_processor: a transformers `LogitsProcessorList` (or callable) applied to `[B*S, V]`
            scores, with the visible canvas as `input_ids`.
        generator: torch.Generator for sampling (temperature > 0).
        return_dict_in_generate: return an `EditGenerationOutput` (True) or just `sequences`; None:
            the config's `return_dict_in_generate` when set, else True.
        tokenizer: optional tokenizer, a source of the mask / EOS / pad ids when neither config has them.
        **overrides: fields of the config, applied through `generation_config.replace(...)`.

    Returns:
        `EditGenerationOutput`, or the `sequences` LongTensor `[B, W + G]`.

    Raises:
        ValueError / TypeError: bad input or configuration, before any forward; NaN/inf logits.

    Examples:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> import dllm_edit
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
        >>> cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=8, block_length=4,
        ...     mask_token_id=63, eos_token_id=0)
        >>> out = dllm_edit.generate(model, torch.tensor([[5, 6, 7]]), generation_config=cfg)
        >>> out.sequences.shape
        torch.Size([1, 11])
    """
    config = resolve_config(model, generation_config, overrides)
    input_ids, attention_mask = check_input_ids(input_ids, attention_mask)
    config.check_max_length(input_ids.shape[1])
    check_streamer(streamer, input_ids.shape[0])
    special = resolve_special_tokens(model, config, tokenizer)
    adapter_obj = resolve_adapter(model, adapter)
    block_start = adapter_obj.resolve_block_start(config.block_start)
    strategies = config.build_strategies(block_start)
    use_cache = adapter_obj.default_use_cache if config.use_cache is None else bool(config.use_cache)
    plan = check_run(
        model, adapter_obj, strategies, use_cache, config.compile
    )  # refusals: before any forward
    check_infill(input_ids, attention_mask, special.mask, config.max_new_tokens, adapter_obj, use_cache)
    layout, canvas = build_canvas(
        input_ids,
        attention_mask,
        config.block_length,
        config.max_new_tokens,
        special.mask,
        special.pad,
        block_start,
    )
    adapter_obj.check_positions(model, layout)

    stream = StreamBridge(streamer, layout, special)
    try:
        stream.prompt(input_ids)
        propose = Proposer(
            config,
            special,
            logits_processor,
            generator,
            device=input_ids.device,
            stats=frozenset(plan.needs.stats),
            top_p_first=plan.needs.top_p_first,
        )
        session = _open_session(model, adapter_obj, config, layout, use_cache, special, plan)
        check_whole_canvas(adapter_obj, session, strategies, plan)  # opening a session runs no forward
        loop = _Loop(session, config, strategies, layout, special, stream, propose, generator, plan)
        num_forwards, num_edits, trace = loop.run(canvas)
    finally:
        stream.close()  # streamers are always ended, also when decoding raises

    sequences, lengths = _finalize(canvas, input_ids, attention_mask, layout, special)
    if return_dict_in_generate is None:
        return_dict_in_generate = config.return_dict_in_generate is not False
    if not return_dict_in_generate:
        return sequences
    tpf = lengths.to(torch.float32) / num_forwards.clamp_min(1).to(torch.float32)
    return EditGenerationOutput(
        sequences=sequences,
        tokens_per_forward=tpf,
        num_forwards=num_forwards,
        num_edits=num_edits,
        completion_lengths=lengths,
        trace=trace,
    )


def _open_session(
    model: Any,
    adapter_obj: ModelAdapter,
    config: EditGenerationConfig,
    layout: CanvasLayout,
    use_cache: bool,
    special: SpecialTokens,
    plan: RunPlan,
) -> Any:
    """The adapter's session for this call (the forwards, their cache and their rows)."""
    if plan.shadow:  # the forwards also run WINO's shadow block of the active block
        return open_shadow_session(adapter_obj, model, layout, use_cache, special.mask)
    if config.compile:  # only adapters with supports_compile take the argument
        return adapter_obj.open(model, layout, use_cache, compile=True)  # type: ignore[call-arg]
    return adapter_obj.open(model, layout, use_cache)


@dataclass
class _BlockState:
    """What the loop tracks while one global block decodes (tensors are per row, `[B]` / `[B, S]`)."""

    block: int  # the global block
    block_index: int  # among the generated blocks
    w: int  # window blocks in the span
    span: slice  # its canvas slots
    in_block: torch.Tensor  # [S]
    generated: torch.Tensor  # [B, S] slots the decoder writes (completion and the prompt's masks)
    active: torch.Tensor  # [B] rows still decoding this block
    in_forward: torch.Tensor  # [B] rows the session's forwards compute
    rows: torch.Tensor  # [R] their indices
    all_rows: bool  # R == B: no gather / scatter of rows
    last_block: torch.Tensor  # [B] rows whose own canvas ends with this block
    check_eos: bool  # whether the EOS stop can take a row out of this block early
    block_masked: torch.Tensor  # [B] masks at the block's start
    positions: torch.Tensor  # [B, S] offsets from each completion's start
    post_steps: torch.Tensor  # [B]
    steps: torch.Tensor  # [B] forwards spent in the block
    bad: torch.Tensor  # [B] NaN/inf candidates at the last step
    no_edit: torch.Tensor  # [] "no window slot edited"
    edited_slot: torch.Tensor  # [] first window slot edited at the last step
    mask_free: torch.Tensor | None = None  # [B] no mask left in the block at the top of the step
    states: list[Any] = field(default_factory=list)  # each strategy's per-row state
    kept: tuple[torch.Tensor, torch.Tensor] | None = None  # previous step's ([B, S, V], [B, S]) for "kl"
    no_prev: torch.Tensor | None = None  # [B] rows without a previous forward at the block's first step
    saw_ahead: torch.Tensor | None = None  # [B] rows whose forwards kept the next block's distribution
    view_positions: torch.Tensor | None = None  # [B, C] offsets over the whole-canvas view
    step_number: int = 0


class _Loop:
    """The block loop of one `generate` call, a step at a time: `_start_block`, then per step
    `_top_of_step` (the block-end rule and the one device read), `_propose` (the forward and the
    candidates), `_context`, `_decide` (the strategies), `_write`; `_end_block` after each block."""

    def __init__(
        self,
        session: Any,
        config: EditGenerationConfig,
        strategies: list[Strategy],
        layout: CanvasLayout,
        special: SpecialTokens,
        stream: StreamBridge,
        propose: Proposer,
        generator: torch.Generator | None,
        plan: RunPlan,
    ) -> None:
        self.session, self.config, self.strategies, self.layout = session, config, strategies, layout
        self.special, self.stream, self.propose, self.generator, self.plan = (
            special,
            stream,
            propose,
            generator,
            plan,
        )
        self.cap = config.steps_cap()
        self.eos_stop = bool(config.eos_early_stop and special.eos)
        self.keeps_previous = "kl" in propose.stats
        # histories across blocks (`Needs.across_blocks`): each such strategy's state, per row, and
        # the previous forward's distribution behind "kl" over the span and the next block
        self.carries = [s.needs.across_blocks for s in strategies]
        self.states: list[Any] = [{} for _ in strategies]
        kl_across = self.keeps_previous and plan.needs.across_blocks
        self.sees_ahead = kl_across and bool(getattr(session, "sees_ahead", False))
        self.last_kept: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, S, V], [B, S])
        self.ahead_kept: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, bl, V], [B, bl])
        self.saw_ahead: torch.Tensor | None = None  # [B]
        # the forward over the whole completion (`Needs.whole_canvas`): slots [view.start, T)
        self.whole = plan.needs.whole_canvas
        self.view = slice(layout.first_block * layout.block_length, layout.canvas_length)
        self.eos_fill = bool(config.eos_fill and special.eos)

    def run(self, canvas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[StepRecord] | None]:
        """Decode every block into `canvas` (in place); returns (num_forwards, num_edits, trace)."""
        layout, batch, device = self.layout, canvas.shape[0], canvas.device
        self.num_forwards = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.num_edits = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)  # [B] stopped at EOS
        self.trace: list[StepRecord] | None = [] if self.config.output_trace else None
        decoding = layout.decodes.any(0).tolist() if layout.decodes is not None else None  # [N], once
        for block in range(layout.start_block, layout.num_blocks):
            if decoding is not None and not decoding[block]:  # a prompt block without masks
                continue
            blk = self._start_block(canvas, block)
            while (top := self._top_of_step(canvas, blk)) is not None:
                old, masked = top  # [B, S] tokens and masks at the top of the step
                if self.whole:
                    cand, whole = self._propose_whole(canvas, blk, old)
                    shadow_probs, view = None, self._canvas_view(canvas, blk, whole)
                else:
                    (cand, shadow_probs), view = self._propose(canvas, blk, old), None
                blk.bad = (~torch.isfinite(cand.prob)).any(-1) & blk.active  # [B] read at the next step
                ctx = self._context(blk, old, masked, cand, shadow_probs, view)
                commit, edit, new, finish = self._decide(ctx, blk)
                self._write(canvas, blk, old, masked, commit, edit, new, cand.prob)
                if finish is not None:
                    self._finish(canvas, blk, *finish, view)
                if self.eos_fill:
                    self._eos_fill(canvas, blk)
            if self._end_block(canvas, blk):
                break
        self.stream.confirm(canvas, layout.canvas_length)
        return self.num_forwards, self.num_edits, self.trace

    def _start_block(self, canvas: torch.Tensor, block: int) -> _BlockState:
        layout, bl, device = self.layout, self.layout.block_length, canvas.device
        block_index = block - layout.first_block  # < 0: a block of the prompt holding masks (infilling)
        w = max(min(self.plan.needs.window, block_index), 0)  # window blocks actually available
        span = slice((block - w) * bl, (block + 1) * bl)
        in_block = torch.arange((w + 1) * bl, device=device) >= w * bl  # [S]
        active = layout.rows_decoding(block) & ~self.finished  # [B]
        rows = active.nonzero().flatten()  # [R] rows that still decode: the others leave the forward batch
        self.session.select_rows(rows)
        last_block = ~layout.rows_in_block(block + 1)  # [B]
        zeros = torch.zeros(canvas.shape[0], dtype=torch.long, device=device)  # [B]
        no_edit = torch.tensor(w * bl, device=device)  # []
        first_generated = layout.offsets + layout.prompt_lengths  # [B] canvas slot of each completion's start
        return _BlockState(
            block=block,
            block_index=block_index,
            w=w,
            span=span,
            in_block=in_block,
            generated=layout.decoded_slots[:, span],
            active=active,
            in_forward=active.clone(),
            rows=rows,
            all_rows=rows.numel() == canvas.shape[0],
            last_block=last_block,
            # the EOS stop can only take a row out early if it has a later block: otherwise skip the scan
            check_eos=self.eos_stop and bool((active & ~last_block).any()),  # once per block
            block_masked=((canvas[:, span] == self.special.mask) & in_block).sum(-1),
            positions=torch.arange(span.start, span.stop, device=device) - first_generated[:, None],
            post_steps=zeros,
            steps=zeros,
            bad=torch.zeros(canvas.shape[0], dtype=torch.bool, device=device),
            no_edit=no_edit,
            edited_slot=no_edit,
            # reset per block, unless the strategy keeps its history across blocks
            states=[state if carry else {} for state, carry in zip(self.states, self.carries)],
            view_positions=(
                torch.arange(self.view.start, self.view.stop, device=device) - first_generated[:, None]
                if self.whole
                else None
            ),  # [B, C]
            **self._carried_previous(w),
        )

    def _carried_previous(self, w: int) -> dict[str, Any]:
        """With a "kl" history across blocks on an adapter that sees ahead: the previous forward's
        distribution over the new span (the window from the last span, the block from the slots
        ahead), and the rows that have none (no active forward in the previous block)."""
        if not self.sees_ahead or self.ahead_kept is None or self.last_kept is None:
            return {}
        bl = self.layout.block_length
        window = slice(self.last_kept[1].shape[1] - w * bl, None)  # the new window: the last span's end
        kept = (
            torch.cat([self.last_kept[0][:, window], self.ahead_kept[0]], dim=1),  # [B, S, V]
            torch.cat([self.last_kept[1][:, window], self.ahead_kept[1]], dim=1),  # [B, S]
        )
        assert self.saw_ahead is not None  # set with ahead_kept
        return dict(kept=kept, no_prev=~self.saw_ahead)

    def _top_of_step(
        self, canvas: torch.Tensor, blk: _BlockState
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The block-end rule per row (post steps, cap), rows leaving the forward batch, and the one
        read of the device per step. Returns the span's tokens and masks (`[B, S]` each), or None
        when no row of the block is still active."""
        bl, special = self.layout.block_length, self.special
        old = canvas[:, blk.span].clone()  # [B, S]
        masked = (old == special.mask) & blk.in_block  # [B, S]
        blk.mask_free = ~masked.any(-1)  # [B]
        blk.post_steps = blk.post_steps + (blk.mask_free & blk.active)
        blk.active = blk.active & (blk.post_steps <= self.config.max_post_steps)
        if self.cap is not None:
            blk.active = blk.active & (blk.steps < self.cap)
        # rows whose block has ended and that will not decode again (their own canvas ends here,
        # or the EOS stop will end them after this block) leave the forward batch now, not at
        # the next block: a row still editing then costs the batch only its own compute
        done = blk.last_block | self.finished  # [B]
        if blk.check_eos:
            done = done | _eos_done(canvas, self.layout, (blk.block + 1) * bl, special)  # [B]
        leaving = blk.in_forward & ~blk.active & done  # [B]
        # the one read of the device per step
        any_active, any_bad, first_slot, any_leaving = torch.stack(
            [blk.active.any().long(), blk.bad.any().long(), blk.edited_slot, leaving.any().long()]
        ).tolist()
        if any_bad:
            raise _nonfinite_error(blk.bad, blk.block, blk.step_number - 1)
        if first_slot < blk.w * bl:  # a window block was edited: its cached keys/values are stale
            self.session.invalidate_from(blk.block - blk.w + first_slot // bl)
        if not any_active:
            return None
        if any_leaving:  # at most once per row and block: one more read of the device
            blk.in_forward = blk.in_forward & ~leaving
            blk.rows = blk.in_forward.nonzero().flatten()  # [R']
            blk.all_rows = False
            self.session.select_rows(blk.rows)
        return old, masked

    def _propose(
        self, canvas: torch.Tensor, blk: _BlockState, old: torch.Tensor
    ) -> tuple[CandidateStats, torch.Tensor | None]:
        """The forward of the active rows and their candidates, as full-batch `[B, S]` fields
        (rows outside the forward keep their tokens); WINO's shadow probabilities when asked for."""
        rows = blk.rows
        ahead = self.sees_ahead and blk.block + 1 < self.layout.num_blocks
        if ahead:  # the next block's logits too, kept for its first step ("kl" across blocks)
            both = self.session.logits(canvas, blk.block, blk.w, ahead=1)  # [R, S + bl, V]
            logits, later = both[:, : -self.layout.block_length], both[:, -self.layout.block_length :]
            self._keep_ahead(canvas, blk, later)
        else:
            logits = self.session.logits(canvas, blk.block, blk.w)  # [R, S, V] ([R, S + bl, V]: shadow)
        shadow_probs = None
        if self.plan.shadow:
            logits, shadow_probs = split_shadow(logits, canvas, rows, blk.block, blk.w)  # [R, S, V], [B, S]
        if blk.all_rows:
            cand = self.propose(logits, canvas, blk.span, blk.kept)  # [B, S] fields
            if self.keeps_previous:
                self._keep(blk, (cand.kept_logits, cand.kept_lse))  # type: ignore[arg-type]
            return self._without_previous(cand, blk), shadow_probs
        prev = None if blk.kept is None else (blk.kept[0][rows], blk.kept[1][rows])  # [R, S, V], [R, S]
        part = self.propose(logits, canvas[rows], blk.span, prev)  # [R, S] fields
        if self.keeps_previous and self.sees_ahead:
            assert part.kept_logits is not None and part.kept_lse is not None  # "kl" keeps them
            self._keep(blk, self._scatter_kept(blk, (part.kept_logits, part.kept_lse), old.shape))
        elif self.keeps_previous:
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
        return self._without_previous(cand, blk), shadow_probs

    def _propose_whole(
        self, canvas: torch.Tensor, blk: _BlockState, old: torch.Tensor
    ) -> tuple[CandidateStats, CandidateStats]:
        """`Needs.whole_canvas`: one forward's candidates over the whole completion (`[B, C]`
        fields, slots `self.view`) and the span's slice of them (`[B, S]` fields)."""
        layout = self.layout
        behind = blk.block - layout.first_block  # the view starts at the first generated block
        ahead = layout.num_blocks - blk.block - 1
        logits = self.session.logits(canvas, blk.block, behind, ahead=ahead)  # [R, C, V]
        if blk.all_rows:
            whole = self.propose(logits, canvas, self.view, None)  # [B, C] fields
        else:
            part = self.propose(logits, canvas[blk.rows], self.view, None)  # [R, C] fields
            whole = part.scatter_rows(blk.rows, canvas[:, self.view])  # [B, C] fields
        lo = blk.span.start - self.view.start
        width = old.shape[1]
        span = CandidateStats._make(None if f is None else f[:, lo : lo + width] for f in whole)  # [B, S]
        return span, whole

    def _canvas_view(self, canvas: torch.Tensor, blk: _BlockState, whole: CandidateStats) -> CanvasView:
        """The `StepContext.canvas` of a `Needs.whole_canvas` run (`[B, C]` fields)."""
        tokens = canvas[:, self.view].clone()  # [B, C]
        generated = self.layout.generated[:, self.view]  # [B, C]
        assert blk.view_positions is not None  # set by _start_block when self.whole
        return CanvasView(
            start=self.view.start,
            block_length=self.layout.block_length,
            tokens=tokens,
            masked=(tokens == self.special.mask) & generated,
            generated=generated,
            positions=blk.view_positions,
            cand_tokens=whole.token,
            cand_probs=whole.prob,
            stats=whole.statistics(),
        )

    def _finish(
        self,
        canvas: torch.Tensor,
        blk: _BlockState,
        finish: torch.Tensor,
        fill: torch.Tensor,
        view: CanvasView | None,
    ) -> None:
        """Finish rows `finish` (`[B]`): every mask left in their completion takes `fill` (`[B]`;
        -1: the step's candidate there, from the whole-canvas view), and the rows are frozen for the
        rest of the run."""
        left = (canvas == self.special.mask) & self.layout.generated & finish[:, None]  # [B, T]
        tokens = fill[:, None].expand_as(canvas)  # [B, T]
        if view is not None:
            cands = canvas.clone()  # [B, T]
            cands[:, self.view] = view.cand_tokens
            tokens = torch.where(fill[:, None] >= 0, tokens, cands)  # [B, T]
        canvas.copy_(torch.where(left, tokens, canvas))
        self.finished = self.finished | finish
        blk.active = blk.active & ~finish

    def _eos_fill(self, canvas: torch.Tensor, blk: _BlockState) -> None:
        """`eos_fill`: in each active row whose completion holds an EOS, every mask after its first
        EOS becomes EOS; a row left with no mask is finished (frozen for the rest of the run)."""
        generated = self.layout.generated  # [B, T]
        eos = self.special.eos_tensor(canvas.device)  # [E]
        is_eos = torch.isin(canvas, eos) & generated  # [B, T]
        after = (is_eos.long().cumsum(-1) > 0) & (canvas == self.special.mask) & generated  # [B, T]
        after = after & blk.active[:, None]
        canvas.copy_(torch.where(after, eos[0], canvas))
        left = ((canvas == self.special.mask) & generated).any(-1)  # [B]
        done = blk.active & is_eos.any(-1) & ~left  # [B]
        self.finished = self.finished | done
        blk.active = blk.active & ~done

    def _scatter_kept(
        self, blk: _BlockState, kept: tuple[torch.Tensor, torch.Tensor], shape: torch.Size
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Kept `([R, n, V], [R, n])` of the forward's rows as full-batch `([B, n, V], [B, n])`
        (other rows zero: they are frozen at this step, so `_keep` keeps their earlier values)."""
        rows, batch = blk.rows, shape[0]
        logits = kept[0].new_zeros(batch, *kept[0].shape[1:]).index_copy(0, rows, kept[0])  # [B, n, V]
        lse = kept[1].new_zeros(batch, *kept[1].shape[1:]).index_copy(0, rows, kept[1])  # [B, n]
        return logits, lse

    def _keep(self, blk: _BlockState, kept: tuple[torch.Tensor, torch.Tensor]) -> None:
        """This forward's span distribution as the previous one of the next step. Across blocks,
        each row keeps the one of its last active forward (a frozen row's forward never counts)."""
        if self.sees_ahead and blk.kept is not None:
            live = blk.active[:, None]  # [B, 1]
            kept = (
                torch.where(live[..., None], kept[0], blk.kept[0]),  # [B, S, V]
                torch.where(live, kept[1], blk.kept[1]),  # [B, S]
            )
        blk.kept = kept
        if self.sees_ahead:
            self.last_kept = kept

    def _keep_ahead(self, canvas: torch.Tensor, blk: _BlockState, later: torch.Tensor) -> None:
        """The next block's distribution at this forward (`later`: `[R, bl, V]`), kept for each row
        that is active at this step."""
        bl = self.layout.block_length
        ahead = slice(blk.span.stop, blk.span.stop + bl)
        if blk.all_rows:
            kept = self.propose.keep(later, canvas, ahead)  # [B, bl, V], [B, bl]
        else:
            kept = self._scatter_kept(blk, self.propose.keep(later, canvas[blk.rows], ahead), canvas.shape)
        if blk.saw_ahead is None:  # the block's first forward: earlier blocks' slots are never read again
            self.ahead_kept, blk.saw_ahead = kept, blk.active.clone()
        else:
            assert self.ahead_kept is not None
            live = blk.active[:, None]  # [B, 1]
            self.ahead_kept = (
                torch.where(live[..., None], kept[0], self.ahead_kept[0]),  # [B, bl, V]
                torch.where(live, kept[1], self.ahead_kept[1]),  # [B, bl]
            )
            blk.saw_ahead = blk.saw_ahead | blk.active
        self.saw_ahead = blk.saw_ahead

    @staticmethod
    def _without_previous(cand: CandidateStats, blk: _BlockState) -> CandidateStats:
        """`"kl"` is `+inf` on the rows that had no previous forward (the block's first step only)."""
        if blk.no_prev is None or cand.kl is None:
            return cand
        kl = torch.where(blk.no_prev[:, None], torch.inf, cand.kl)  # [B, S]
        blk.no_prev = None
        return cand._replace(kl=kl)

    def _context(
        self,
        blk: _BlockState,
        old: torch.Tensor,
        masked: torch.Tensor,
        cand: CandidateStats,
        shadow_probs: torch.Tensor | None,
        view: CanvasView | None = None,
    ) -> StepContext:
        stats = cand.statistics()  # every statistic the run declared
        if shadow_probs is not None:
            stats["shadow_prob"] = shadow_probs
        return StepContext(
            tokens=old,
            masked=masked,
            editable=blk.generated & ~masked,
            in_block=blk.in_block,
            cand_tokens=cand.token,
            cand_probs=cand.prob,
            step=blk.steps,
            block_index=blk.block_index,
            active=blk.active,
            block_masked=blk.block_masked,
            mask_token_id=self.special.mask,
            positions=blk.positions,
            generator=self.generator,
            stats=stats,
            canvas=view,
        )

    def _decide(
        self, ctx: StepContext, blk: _BlockState
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Every strategy's step on the context (with its own state); their union, active rows only;
        the rows the strategies finish with their fill tokens (`[B]` each; -1: the candidates), or None."""
        results = [
            s.step(ctx if not blk.states[i] else ctx.with_state(blk.states[i]))
            for i, s in enumerate(self.strategies)
        ]
        blk.states = [
            _carry_state(old, r.state, blk.active) if carry else (r.state if r.state is not None else {})
            for old, r, carry in zip(blk.states, results, self.carries)
        ]
        commit, edit, new = _combine(results, ctx.tokens)
        finish = self._finishes(results, blk.active)
        return commit & blk.active[:, None], edit & blk.active[:, None], new, finish  # [B, S] each

    def _finishes(
        self, results: list[StepResult], active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The active rows the results finish (`[B]`) and their fill tokens (`[B]`, -1 for the
        candidates; a later strategy's fill wins), or None when no result finishes a row."""
        finish: torch.Tensor | None = None
        fill = torch.full_like(active, -1, dtype=torch.long)  # [B]
        for s, r in zip(self.strategies, results):
            if r.finish is None:
                continue
            if r.fill is None and not self.whole:
                raise TypeError(
                    f"{type(s).__name__}.step returned `finish` without `fill`, which fills the row from the "
                    "step's candidates over the whole canvas: declare Needs(whole_canvas=True) in its "
                    "requires(), or return the fill token (`fill`, LongTensor [B])."
                )
            rows = r.finish & active  # [B]
            fill = torch.where(rows, -1 if r.fill is None else r.fill, fill)  # [B]
            finish = rows if finish is None else finish | rows
        return None if finish is None else (finish, fill)

    def _write(
        self,
        canvas: torch.Tensor,
        blk: _BlockState,
        old: torch.Tensor,
        masked: torch.Tensor,
        commit: torch.Tensor,
        edit: torch.Tensor,
        new: torch.Tensor,
        probs: torch.Tensor,
    ) -> None:
        """Write the step into the canvas, stream and trace it, and count forwards and edits."""
        bl = self.layout.block_length
        canvas[:, blk.span] = torch.where(commit | edit, new, old)
        self.stream.step(canvas, blk.span, edit)
        if self.trace is not None:
            self.trace.append(
                StepRecord(
                    block=blk.block,
                    span_start=blk.span.start,
                    active=blk.active.cpu(),
                    masked=masked.cpu(),
                    commit=commit.cpu(),
                    edit=edit.cpu(),
                    before=old.cpu(),
                    after=canvas[:, blk.span].clone().cpu(),
                    probs=probs.cpu(),
                )
            )
        blk.steps = blk.steps + blk.active
        self.num_forwards = self.num_forwards + blk.active
        self.num_edits = self.num_edits + edit.sum(-1)
        edited_any = edit.any(-1)  # [B]
        if blk.w > 0:
            window_edits = edit[:, : blk.w * bl].any(0)  # [w*bl]
            # argmax of a bool row: its first True; no True: no_edit
            blk.edited_slot = torch.where(window_edits.any(), window_edits.long().argmax(), blk.no_edit)  # []
        assert blk.mask_free is not None  # set by _top_of_step
        blk.active = blk.active & ~(blk.mask_free & ~edited_any)
        blk.step_number += 1

    def _end_block(self, canvas: torch.Tensor, blk: _BlockState) -> bool:
        """The EOS stop per row after the block; True when no row decodes another block."""
        layout, bl = self.layout, self.layout.block_length
        if self.eos_stop:
            self.finished = self.finished | (
                _eos_done(canvas, layout, (blk.block + 1) * bl, self.special)
                & layout.rows_in_block(blk.block)
            )
        self.stream.confirm(
            canvas, (blk.block + 1 - self.plan.needs.window) * bl
        )  # window blocks may still be edited
        self.states = blk.states
        return bool((self.finished | ~layout.rows_in_block(blk.block + 1)).all())


def _carry_state(old: dict[str, torch.Tensor], new: Any, active: torch.Tensor) -> dict[str, torch.Tensor]:
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
