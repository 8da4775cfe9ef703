"""transformers integration: `model.generate`, pipelines and `custom_generate` call our decoder.

Three ways in, one function behind them (`generate_hf`, transformers' argument conventions):

* `patch_generate(model)` gives an existing model instance a `generate` that is our decoder, so
  `model.generate(input_ids, ...)` and `pipeline("text-generation", model=model, tokenizer=tok)`
  decode with editable diffusion decoding;
* `EditGenerationMixin` does the same for a model class (`class MyDLM(EditGenerationMixin, PreTrainedModel)`);
* `custom_generate`: the callable (`model.generate(ids, custom_generate=dllm_edit.custom_generate)`)
  and the folder `CUSTOM_GENERATE_DIR` holding `custom_generate/generate.py`
  (`model.generate(ids, custom_generate=dllm_edit.CUSTOM_GENERATE_DIR, trust_remote_code=True)`).

Return values follow transformers: a LongTensor of prompt + completion, or the output object (with
`.sequences`) when `return_dict_in_generate=True`.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig

from dllm_edit.config import EditGenerationConfig
from dllm_edit.generation import generate, model_generation_config
from dllm_edit.output import EditGenerationOutput

CUSTOM_GENERATE_DIR = str(Path(__file__).parent / "hub")
"""Folder with `custom_generate/generate.py`; use as `custom_generate=` with `trust_remote_code=True`."""

# Processors that assume left-to-right generation (they read the "last" tokens or the current
# length), so they have no meaning when every position of a block is decided in parallel.
REFUSED_PROCESSORS = {
    "NoRepeatNGramLogitsProcessor": "n-gram blocking reads the last generated tokens",
    "EncoderNoRepeatNGramLogitsProcessor": "n-gram blocking reads the last generated tokens",
    "MinLengthLogitsProcessor": "it counts the current length, which a diffusion canvas lacks",
    "MinNewTokensLengthLogitsProcessor": "it counts the current length, which a diffusion canvas lacks",
    "ForcedBOSTokenLogitsProcessor": "it forces the token at a left-to-right position",
    "ForcedEOSTokenLogitsProcessor": "it forces the token at a left-to-right position",
    "SuppressTokensAtBeginLogitsProcessor": "it acts on the first generated position only",
    "ExponentialDecayLengthPenalty": "it depends on the current length",
    "PrefixConstrainedLogitsProcessor": "it constrains the next token given a prefix",
    "WatermarkLogitsProcessor": "it seeds on the previous token",
    "ClassifierFreeGuidanceLogitsProcessor": "it runs an extra left-to-right forward",
}
# Applied by the candidate kernel from the config; dropped from transformers' prepared list so they
# are not applied twice on the `custom_generate` callable path.
_CONFIG_WARPERS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper")
_CONFIG_CRITERIA = ("MaxLengthCriteria", "EosTokenCriteria")

# transformers plumbing that may arrive as keyword arguments: accepted only at its neutral value.
_NEUTRAL = {
    "synced_gpus": (None, False),
    "assistant_model": (None,),
    "prefix_allowed_tokens_fn": (None,),
    "negative_prompt_ids": (None,),
    "negative_prompt_attention_mask": (None,),
    "assistant_tokenizer": (None,),
    "use_model_defaults": (None, True, False),
    "logits_to_keep": (None, 0, 1),  # set by transformers' generate for left-to-right decoding
    "cache": (None,),
    "past_key_values": (None,),
    "num_beams": (None, 1),
    "num_return_sequences": (None, 1),
    "output_scores": (None, False),
    "output_logits": (None, False),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
}


def check_logits_processors(processors: Any, drop_config_warpers: bool = False) -> Any:
    """Refuse processors that make no sense for parallel decoding; optionally drop config warpers.

    Raises:
        ValueError: naming the processor and why.
    """
    if processors is None:
        return None
    kept = []
    for proc in processors:
        name = type(proc).__name__
        if name in REFUSED_PROCESSORS:
            raise ValueError(
                f"{name} cannot be used with diffusion decoding: {REFUSED_PROCESSORS[name]}. "
                "Remove it (or the generation option that adds it) from the call."
            )
        if drop_config_warpers and name in _CONFIG_WARPERS:
            continue
        kept.append(proc)
    return kept or None


def _apply_processor_list(processors: list[Any]) -> Any:
    def apply(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for proc in processors:
            scores = proc(input_ids, scores)
        return scores

    return apply


# Processors transformers builds from a config's fields before calling `custom_generate`; the
# decoder applies those fields itself (the Proposer), so these are dropped when the config sets them.
_CONFIG_PROCESSORS = {
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "MinPLogitsWarper": "min_p",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
}


def _drop_config_processors(processors: list[Any] | None, config: EditGenerationConfig) -> list[Any] | None:
    """Drop the processors transformers built from `config`'s fields (the decoder applies them)."""
    if not processors:
        return processors
    kept = []
    for proc in processors:
        field = _CONFIG_PROCESSORS.get(type(proc).__name__)
        if field is not None and getattr(config, field, None) is not None:
            continue
        kept.append(proc)
    return kept or None


def to_edit_config(model: Any, generation_config: GenerationConfig | None) -> EditGenerationConfig:
    """The `EditGenerationConfig` for a call made with transformers conventions.

    An `EditGenerationConfig` is used as is. A plain `GenerationConfig` (e.g. one built by a trainer)
    is laid over the model's editable config (`EditGenerationConfig.from_generation_config`, strict:
    a field with no meaning for diffusion decoding raises).
    """
    if isinstance(generation_config, EditGenerationConfig):
        return generation_config
    base = model_generation_config(model)
    if generation_config is None:
        return base
    return EditGenerationConfig.from_generation_config(generation_config, base=base)


def generate_hf(
    model: Any,
    inputs: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    streamer: Any = None,
    **kwargs: Any,
) -> EditGenerationOutput | torch.Tensor:
    """`dllm_edit.generate` with the argument conventions of `transformers`' `generate`.

    Args:
        model: the diffusion LM.
        inputs: LongTensor `[B, W]` (or pass `input_ids=`).
        generation_config: an `EditGenerationConfig`, or a plain `GenerationConfig` (converted by
            `to_edit_config`), or None (the model's).
        logits_processor: transformers processors; the ones assuming left-to-right decoding are refused.
        stopping_criteria: must be empty: token-sequence stopping criteria assume left-to-right
            decoding; EOS handling is built in (`eos_early_stop`).
        streamer: a transformers streamer (batch size 1).
        **kwargs: `attention_mask`, `tokenizer`, `adapter`, `generator`, `return_dict_in_generate`,
            and any `EditGenerationConfig` field as an override.

    Returns:
        LongTensor `[B, W + G]`, or `EditGenerationOutput` when `return_dict_in_generate=True`.
    """
    input_ids = inputs if inputs is not None else kwargs.pop("input_ids", None)
    if input_ids is None:
        raise ValueError(
            "generate() needs the prompt: pass `inputs` / `input_ids` (a LongTensor [batch, len])."
        )
    if stopping_criteria:
        raise ValueError(
            "stopping_criteria are not supported by diffusion decoding (they read a left-to-right sequence). "
            "EOS stops a row by itself (eos_early_stop); remove the stopping criteria."
        )
    for key, neutral in _NEUTRAL.items():
        if key in kwargs:
            value = kwargs.pop(key)
            if not any(value is n or (n is not None and value == n) for n in neutral):
                raise ValueError(f"`{key}={value!r}` is not supported by diffusion decoding; leave it unset.")
    requested = kwargs.pop("custom_generate", None)
    if requested is not None and requested is not custom_generate and requested != str(CUSTOM_GENERATE_DIR):
        raise ValueError(
            f"`custom_generate={requested!r}` asks for another decoding loop, but this model's generate is "
            "dllm_edit's (patch_generate / EditGenerationMixin). Drop the argument, or call the other loop "
            "on an unpatched model."
        )  # dllm_edit's own custom_generate is this very loop: accepted and dropped
    attention_mask = kwargs.pop("attention_mask", None)
    tokenizer = kwargs.pop("tokenizer", None)
    adapter = kwargs.pop("adapter", None) or getattr(model, "_dllm_edit_adapter", None)
    generator = kwargs.pop("generator", None)
    return_dict = kwargs.pop("return_dict_in_generate", None)
    drop_warpers = bool(kwargs.pop("_drop_config_warpers", False))
    if "use_cache" in kwargs and kwargs["use_cache"] is None:
        del kwargs["use_cache"]  # transformers' "unset"; the adapter's default applies
    config = to_edit_config(model, generation_config)
    if return_dict is None:
        return_dict = bool(config.return_dict_in_generate)
    processors = check_logits_processors(logits_processor, drop_config_warpers=drop_warpers)
    if drop_warpers:  # the custom_generate path: transformers built these from the config's fields
        processors = _drop_config_processors(processors, config)
    return generate(
        model,
        input_ids,
        attention_mask=attention_mask,
        generation_config=config,
        adapter=adapter,
        streamer=streamer,
        logits_processor=_apply_processor_list(processors) if processors else None,
        generator=generator,
        return_dict_in_generate=return_dict,
        tokenizer=tokenizer,
        **kwargs,
    )


def custom_generate(
    model: Any,
    input_ids: torch.Tensor,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    generation_config: GenerationConfig | None = None,
    **model_kwargs: Any,
) -> EditGenerationOutput | torch.Tensor:
    """The callable for `model.generate(ids, custom_generate=dllm_edit.custom_generate)`.

    transformers prepares the call first: the temperature / top-k / top-p warpers and the
    max-length / EOS stopping criteria it adds from the config are dropped (the decoder applies
    those fields itself), as are its empty KV cache, its left-to-right position ids and
    `logits_to_keep`; an all-ones attention mask arrives as None (no padding). transformers does
    not forward a streamer to `custom_generate` callables: use `patch_generate` to stream.
    """
    # transformers prepares a cache and left-to-right position ids; the adapter builds its own
    for key in ("use_cache", "cache", "past_key_values", "position_ids", "cache_position"):
        model_kwargs.pop(key, None)
    if stopping_criteria is not None:
        # transformers adds these from the config; max_new_tokens and EOS are handled by the decoder
        stopping_criteria = [c for c in stopping_criteria if type(c).__name__ not in _CONFIG_CRITERIA]
    return generate_hf(
        model,
        input_ids,
        generation_config=generation_config,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        _drop_config_warpers=True,
        **model_kwargs,
    )


def _bound_generate(self: Any, *args: Any, **kwargs: Any) -> EditGenerationOutput | torch.Tensor:
    return generate_hf(self, *args, **kwargs)


def patch_generate(
    model: Any, generation_config: EditGenerationConfig | None = None, adapter: Any = None
) -> Any:
    """Make `model.generate` (and pipelines built on it) decode with dllm_edit; returns the model.

    Args:
        model: a model instance (its class is not changed).
        generation_config: becomes `model.generation_config`; default: the model's own, read with
            `dllm_edit.generation.model_generation_config` (its dllm_edit fields and honoured
            transformers fields over the Quality preset).
        adapter: adapter name or object used by every call (default: auto-detection).

    Examples:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> import dllm_edit
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
        >>> model = dllm_edit.patch_generate(model, dllm_edit.EditGenerationConfig.from_mode(
        ...     "quality", max_new_tokens=6, block_length=4, mask_token_id=63))
        >>> model.generate(torch.tensor([[5, 6]])).shape
        torch.Size([1, 8])
    """
    if generation_config is None:
        generation_config = model_generation_config(model)
    elif not isinstance(generation_config, EditGenerationConfig):
        raise TypeError(
            f"`generation_config` must be an EditGenerationConfig, got {type(generation_config).__name__}."
        )
    model.generation_config = generation_config
    model._dllm_edit_adapter = adapter
    model.generate = types.MethodType(_bound_generate, model)
    return model


class EditGenerationMixin:
    """Mixin giving a model class a `generate()` that is dllm_edit's decoder.

    Put it before `PreTrainedModel` in the bases. Generation defaults come from the checkpoint's
    `generation_config.json` (load it as an `EditGenerationConfig` to keep the editing fields);
    keyword arguments override them, with transformers' argument conventions (`generate_hf`).

    Examples:
        >>> from transformers import LlamaForCausalLM
        >>> class MyDLM(EditGenerationMixin, LlamaForCausalLM):
        ...     pass
        >>> MyDLM.generate is EditGenerationMixin.generate
        True
    """

    def generate(self, *args: Any, **kwargs: Any) -> EditGenerationOutput | torch.Tensor:
        """Editable diffusion decoding; see `dllm_edit.hf.generate_hf`."""
        return generate_hf(self, *args, **kwargs)
