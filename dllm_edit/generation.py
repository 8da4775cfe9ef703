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

import dataclasses
from typing import Any

import torch
from transformers import GenerationConfig

from dllm_edit.adapters import ModelAdapter, resolve_adapter
from dllm_edit.adapters.shadow import check_shadow_block, open_shadow_session, split_shadow
from dllm_edit.config import EditGenerationConfig
from dllm_edit.inputs import check_input_ids, check_streamer
from dllm_edit.layout import CanvasLayout, build_canvas
from dllm_edit.output import EditGenerationOutput, StepRecord, cut_after_first_eos
from dllm_edit.proposer import Proposer
from dllm_edit.special_tokens import SpecialTokens, resolve_special_tokens
from dllm_edit.strategies import StepContext, StepResult, Strategy
from dllm_edit.strategies.base import STATS
from dllm_edit.streaming import StreamBridge
from dllm_edit.vocab import check_strategies_vocab


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
    canvas: torch.Tensor, input_ids: torch.Tensor, layout: CanvasLayout, special: SpecialTokens
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences `[B, W + G]` (cut after the first EOS, padded) and completion lengths `[B]`."""
    completion = canvas.gather(1, layout.output_index)  # [B, G]
    completion, lengths = cut_after_first_eos(completion, special.eos_tensor(canvas.device), special.pad)
    return torch.cat([input_ids, completion], dim=1), lengths


def _check_capabilities(
    adapter: ModelAdapter, strategies: list[Strategy], use_cache: bool, compile: bool = False
) -> None:
    if compile and not adapter.supports_compile:
        raise ValueError(
            f"compile=True but the {adapter.name!r} adapter does not compile its forward (only "
            "'block_causal' does). Set compile=False, or compile the model yourself: "
            "model.forward = torch.compile(model.forward)."
        )
    if use_cache and not adapter.supports_cache:
        raise ValueError(
            f"use_cache=True but the {adapter.name!r} adapter has no exact KV cache (every position sees "
            "later blocks). Set use_cache=False (or None for the adapter's default)."
        )
    if any(s.needs_window for s in strategies) and not adapter.supports_multi_block_edit:
        raise ValueError(
            f"The {adapter.name!r} adapter does not support multi-block editing; set multi_block_edit=False."
        )


def _needed_stats(strategies: list[Strategy]) -> frozenset[str]:
    """The union of the strategies' `needs_stats`; unknown names are refused before the loop."""
    stats: set[str] = set()
    for strategy in strategies:
        wanted = set(strategy.needs_stats)
        unknown = sorted(wanted - set(STATS))
        if unknown:
            raise ValueError(
                f"{type(strategy).__name__}.needs_stats asks for {unknown}, which the candidate pass does "
                f"not compute; choose among {list(STATS)}."
            )
        stats |= wanted
    return frozenset(stats)


def _scatter_rows(full: torch.Tensor, rows: torch.Tensor, part: torch.Tensor | None) -> torch.Tensor | None:
    """`part` (`[R, ...]`, the forward rows) written into a copy of `full` (`[B, ...]`) at `rows`."""
    return None if part is None else full.index_copy(0, rows, part)


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
    _check_capabilities(adapter_obj, strategies, use_cache, config.compile)
    shadow = check_shadow_block(adapter_obj, strategies, use_cache)  # WINO: refused before any forward
    check_strategies_vocab(model, strategies)  # e.g. PC-Sampler's prior against the model's logits
    stats = _needed_stats(strategies)
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
        propose = Proposer(config, special, logits_processor, generator, device=input_ids.device, stats=stats)
        num_forwards, num_edits, trace = _decode(
            model,
            adapter_obj,
            config,
            strategies,
            layout,
            canvas,
            special,
            use_cache,
            stream,
            propose,
            generator,
            shadow,
        )
    finally:
        stream.close()  # streamers are always ended, also when decoding raises

    sequences, lengths = _finalize(canvas, input_ids, layout, special)
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


def _decode(
    model: Any,
    adapter_obj: ModelAdapter,
    config: EditGenerationConfig,
    strategies: list[Strategy],
    layout: CanvasLayout,
    canvas: torch.Tensor,
    special: SpecialTokens,
    use_cache: bool,
    stream: StreamBridge,
    propose: Proposer,
    generator: torch.Generator | None = None,
    shadow: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, list[StepRecord] | None]:
    """The block loop. Writes into `canvas` in place; returns (num_forwards, num_edits, trace)."""
    if shadow:  # the forwards also run WINO's shadow block of the active block
        session: Any = open_shadow_session(adapter_obj, model, layout, use_cache, special.mask)
    elif config.compile:  # only adapters with supports_compile take the argument
        session = adapter_obj.open(model, layout, use_cache, compile=True)  # type: ignore[call-arg]
    else:
        session = adapter_obj.open(model, layout, use_cache)
    bl = layout.block_length
    batch = canvas.shape[0]
    device = canvas.device
    window = max(s.needs_window for s in strategies)
    cap = config.steps_cap()
    num_forwards = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
    num_edits = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
    finished = torch.zeros(batch, dtype=torch.bool, device=device)  # [B] stopped at EOS
    trace: list[StepRecord] | None = [] if config.output_trace else None
    eos_stop = bool(config.eos_early_stop and special.eos)
    keeps_previous = "kl" in propose.stats
    first_generated = layout.offsets + layout.prompt_lengths  # [B] canvas slot of each completion's start

    for block in range(layout.first_block, layout.num_blocks):
        block_index = block - layout.first_block
        w = min(window, block_index)  # window blocks actually available
        span = slice((block - w) * bl, (block + 1) * bl)
        in_block = torch.arange((w + 1) * bl, device=device) >= w * bl  # [S]
        generated = layout.generated[:, span]  # [B, S]
        active = layout.rows_in_block(block) & ~finished  # [B]
        rows = active.nonzero().flatten()  # [R] rows that still decode: the others leave the forward batch
        all_rows = rows.numel() == batch  # then no per-step gather / scatter of rows
        session.select_rows(rows)
        in_forward = active.clone()  # [B] rows the session's forwards compute
        last_block = ~layout.rows_in_block(block + 1)  # [B] rows whose own canvas ends with this block
        # the EOS stop can only take a row out early if it has a later block: otherwise skip the scan
        check_eos = eos_stop and bool((active & ~last_block).any())  # once per block
        post_steps = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        steps = torch.zeros(batch, dtype=torch.long, device=device)  # [B]
        bad = torch.zeros(batch, dtype=torch.bool, device=device)  # [B] NaN/inf candidates at the last step
        no_edit = torch.tensor(w * bl, device=device)  # [] "no window slot edited"
        edited_slot = no_edit  # [] first window slot edited at the last step
        block_masked = ((canvas[:, span] == special.mask) & in_block).sum(-1)  # [B] masks at block start
        positions = torch.arange(span.start, span.stop, device=device) - first_generated[:, None]  # [B, S]
        states: list[Any] = [{} for _ in strategies]  # each strategy's per-row state, reset per block
        kept: tuple[torch.Tensor, torch.Tensor] | None = None  # previous step's ([B, S, V], [B, S]) for "kl"
        step_number = 0
        while True:
            old = canvas[:, span].clone()  # [B, S] tokens at the top of the step
            masked = (old == special.mask) & in_block  # [B, S]
            mask_free = ~masked.any(-1)  # [B]
            post_steps = post_steps + (mask_free & active)
            active = active & (post_steps <= config.max_post_steps)
            if cap is not None:
                active = active & (steps < cap)
            # rows whose block has ended and that will not decode again (their own canvas ends here,
            # or the EOS stop will end them after this block) leave the forward batch now, not at
            # the next block: a row still editing then costs the batch only its own compute
            done = last_block  # [B]
            if check_eos:
                done = done | _eos_done(canvas, layout, (block + 1) * bl, special)  # [B]
            leaving = in_forward & ~active & done  # [B]
            # the one read of the device per step
            any_active, any_bad, first_slot, any_leaving = torch.stack(
                [active.any().long(), bad.any().long(), edited_slot, leaving.any().long()]
            ).tolist()
            if any_bad:
                raise _nonfinite_error(bad, block, step_number - 1)
            if first_slot < w * bl:  # a window block was edited: its cached keys/values are stale
                session.invalidate_from(block - w + first_slot // bl)
            if not any_active:
                break
            if any_leaving:  # at most once per row and block: one more read of the device
                in_forward = in_forward & ~leaving
                rows = in_forward.nonzero().flatten()  # [R']
                all_rows = False
                session.select_rows(rows)

            logits = session.logits(canvas, block, w)  # [R, S, V] ([R, S + bl, V] with the shadow block)
            shadow_probs = None
            if shadow:
                logits, shadow_probs = split_shadow(logits, canvas, rows, block, w)  # [R, S, V], [B, S]
            if all_rows:
                cand = propose(logits, canvas, span, kept)  # [B, S] fields
                if keeps_previous:
                    kept = (cand.kept_logits, cand.kept_lse)  # type: ignore[assignment]
            else:
                prev = None if kept is None else (kept[0][rows], kept[1][rows])  # [R, S, V], [R, S]
                part = propose(logits, canvas[rows], span, prev)  # [R, S] fields
                zeros = torch.zeros(old.shape, device=device)  # [B, S] frozen rows: never read
                cand = part._replace(
                    token=old.index_copy(0, rows, part.token),  # [B, S] frozen rows keep their tokens
                    **{
                        name: _scatter_rows(zeros, rows, getattr(part, name))
                        for name in ("prob", "current_prob", "top_prob", "second_prob", "entropy", "kl")
                    },
                )
                if keeps_previous:
                    if kept is None:  # the block's first step: frozen rows' slots are never read
                        kept = (torch.zeros(*old.shape, logits.shape[-1], device=device), zeros)
                    kept = (
                        kept[0].index_copy(0, rows, part.kept_logits),  # [B, S, V]
                        kept[1].index_copy(0, rows, part.kept_lse),  # [B, S]
                    )
            cand_tokens, cand_probs = cand.token, cand.prob  # [B, S], [B, S]
            bad = (~torch.isfinite(cand_probs)).any(-1) & active  # [B]

            ctx = StepContext(
                tokens=old,
                masked=masked,
                editable=generated & ~masked,
                in_block=in_block,
                cand_tokens=cand_tokens,
                cand_probs=cand_probs,
                step=steps,
                block_index=block_index,
                active=active,
                block_masked=block_masked,
                mask_token_id=special.mask,
                current_probs=cand.current_prob,
                top_probs=cand.top_prob,
                second_probs=cand.second_prob,
                entropy=cand.entropy,
                kl_prev=cand.kl,
                positions=positions,
                generator=generator,
                shadow_probs=shadow_probs,
            )
            results = [
                s.step(ctx if not states[i] else dataclasses.replace(ctx, state=states[i]))
                for i, s in enumerate(strategies)
            ]
            states = [r.state if r.state is not None else {} for r in results]
            commit, edit, new = _combine(results, old)
            commit = commit & active[:, None]  # [B, S]
            edit = edit & active[:, None]  # [B, S]
            canvas[:, span] = torch.where(commit | edit, new, old)
            stream.step(canvas, span, edit)
            if trace is not None:
                trace.append(
                    StepRecord(
                        block=block,
                        span_start=span.start,
                        active=active.cpu(),
                        masked=masked.cpu(),
                        commit=commit.cpu(),
                        edit=edit.cpu(),
                        before=old.cpu(),
                        after=canvas[:, span].clone().cpu(),
                        probs=cand_probs.cpu(),
                    )
                )

            steps = steps + active
            num_forwards = num_forwards + active
            num_edits = num_edits + edit.sum(-1)
            edited_any = edit.any(-1)  # [B]
            if w > 0:
                window_edits = edit[:, : w * bl].any(0)  # [w*bl]
                # argmax of a bool row: its first True; no True: no_edit
                edited_slot = torch.where(window_edits.any(), window_edits.long().argmax(), no_edit)  # []
            active = active & ~(mask_free & ~edited_any)
            step_number += 1

        if eos_stop:
            finished = finished | (
                _eos_done(canvas, layout, (block + 1) * bl, special) & layout.rows_in_block(block)
            )
        stream.confirm(canvas, (block + 1 - window) * bl)  # window blocks may still be edited
        if bool((finished | ~layout.rows_in_block(block + 1)).all()):
            break

    stream.confirm(canvas, layout.canvas_length)
    return num_forwards, num_edits, trace
