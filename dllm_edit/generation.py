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

from typing import Any

import torch
from transformers import GenerationConfig

from dllm_edit.adapters import ModelAdapter, resolve_adapter
from dllm_edit.adapters.shadow import open_shadow_session
from dllm_edit.config import EditGenerationConfig
from dllm_edit.inputs import check_infill, check_input_ids, check_streamer
from dllm_edit.layout import CanvasLayout, build_canvas
from dllm_edit.loop import DecodeLoop
from dllm_edit.output import EditGenerationOutput, StepRecord, cut_after_first_eos
from dllm_edit.proposer import Proposer
from dllm_edit.run_checks import RunPlan, check_run, check_whole_canvas
from dllm_edit.special_tokens import SpecialTokens, resolve_special_tokens
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
    # refusals: before any forward
    plan = check_run(model, adapter_obj, strategies, use_cache, config.compile)
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
            config, special, logits_processor, generator, device=input_ids.device,
            stats=frozenset(plan.needs.stats), top_p_first=plan.needs.top_p_first,
        )  # fmt: skip
        session = _open_session(model, adapter_obj, config, layout, use_cache, special, plan)
        check_whole_canvas(adapter_obj, session, strategies, plan)  # opening a session runs no forward
        loop = DecodeLoop(session, config, strategies, layout, special, stream, propose, generator, plan)
        num_forwards, num_edits, trace = loop.run(canvas)
    finally:
        stream.close()  # streamers are always ended, also when decoding raises

    sequences, lengths = _finalize(canvas, input_ids, attention_mask, layout, special)
    if return_dict_in_generate is None:
        return_dict_in_generate = config.return_dict_in_generate is not False
    if not return_dict_in_generate:
        return sequences
    prompt_masks = ((input_ids == special.mask) & attention_mask.bool()).sum(-1)  # [B] infill slots written
    out = _output(sequences, lengths, lengths + prompt_masks, num_forwards, num_edits, trace)
    if trace is not None:
        out.completion_start = layout.offsets + layout.prompt_lengths  # [B] canvas slot of each completion
    return out


def _output(
    sequences: torch.Tensor,
    lengths: torch.Tensor,
    written: torch.Tensor,
    num_forwards: torch.Tensor,
    num_edits: torch.Tensor,
    trace: list[StepRecord] | None,
) -> EditGenerationOutput:
    """The `EditGenerationOutput` of a call (`[B, W + G]` sequences, per-row counters `[B]`;
    `written`: the slots the decoder wrote per row, the returned completion and the prompt's masks)."""
    tpf = written.to(torch.float32) / num_forwards.clamp_min(1).to(torch.float32)
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
