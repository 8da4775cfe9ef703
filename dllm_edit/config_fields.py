"""What editable decoding does with every field it inherits from transformers' `GenerationConfig`.

`EditGenerationConfig` is a `GenerationConfig`, so it accepts every field of the parent. Each one is
either honoured (it changes decoding, or the return type of `model.generate`), metadata (it
describes the model and decoding never needs it), or refused: setting it to anything but its "off"
value raises a `ValueError` naming the field, because a diffusion decoder fills a block in parallel
and the field only means something for left-to-right generation. A test enumerates the parent's
fields at run time and fails on any field missing from these tables, so a new transformers release
cannot add a field that is silently ignored.

The tables cover transformers 4.57 and 5.x (a field that only one line has is harmless in the other).
"""

from __future__ import annotations

from typing import Any

from transformers import GenerationConfig

HONOURED: dict[str, str] = {
    "max_new_tokens": "the completion length G (the canvas is prompt + G, rounded up to whole blocks)",
    "max_length": "checked, not used: transformers derives it as prompt width + max_new_tokens (its "
    "model.generate and pipelines do); any other value raises, since the canvas is sized by max_new_tokens",
    "eos_token_id": "end-of-sequence id(s): EOS stop and the cut after the first EOS",
    "pad_token_id": "written after a row's first EOS (default: the EOS id)",
    "temperature": "0 = greedy (full softmax); > 0 samples",
    "do_sample": "False = greedy (temperature 0), True = sample (temperature > 0); agrees with temperature",
    "top_k": "top-k filter of the sampling distribution (temperature > 0 only)",
    "top_p": "nucleus filter of the sampling distribution (temperature > 0 only)",
    "min_p": "transformers' MinPLogitsWarper before the candidate step (temperature > 0 only)",
    "typical_p": "transformers' TypicalLogitsWarper before the candidate step (temperature > 0 only)",
    "epsilon_cutoff": "transformers' EpsilonLogitsWarper before the candidate step (temperature > 0 only)",
    "eta_cutoff": "transformers' EtaLogitsWarper before the candidate step (temperature > 0 only)",
    "repetition_penalty": "transformers' RepetitionPenaltyLogitsProcessor over the visible canvas",
    "suppress_tokens": "transformers' SuppressTokensLogitsProcessor: these ids are never proposed",
    "use_cache": "KV cache of finished blocks (None: the adapter's default)",
    "return_dict_in_generate": "output type when the caller does not pass return_dict_in_generate",
}
"""Fields that change what the decoder does (each has a test showing its effect)."""

METADATA: dict[str, str] = {
    "transformers_version": "written by transformers when saving",
    "_from_model_config": "transformers' bookkeeping of where the config came from",
    "_commit_hash": "transformers' bookkeeping of the Hub revision",
    "bos_token_id": "belongs to the prompt, which the caller tokenizes; the decoder writes no BOS",
    "decoder_start_token_id": "encoder-decoder bookkeeping; the decoder-only diffusion LMs never read it",
    "disable_compile": "transformers' auto-compile switch for its own loop; dllm_edit never compiles it",
    "compile_config": "transformers' auto-compile settings for its own loop; dllm_edit never compiles it",
    "is_assistant": "assisted-generation bookkeeping, only read by transformers' own loop",
}
"""Fields that describe a model or transformers' bookkeeping; decoding never needs them."""

_LEFT_TO_RIGHT = "it assumes left-to-right generation, which a diffusion decoder does not do"
_BEAMS = "diffusion decoding has no beam search"
_ASSISTED = "assisted / speculative decoding is transformers' left-to-right loop"
_OUTPUTS = (
    "EditGenerationOutput has no per-step scores, logits, attentions or hidden states (use output_trace=True)"
)
_CACHE = "the adapter owns the KV cache of finished blocks (use_cache)"

REFUSED: dict[str, str] = {
    "min_length": f"{_LEFT_TO_RIGHT} (it counts the current length)",
    "min_new_tokens": f"{_LEFT_TO_RIGHT} (it counts the current length)",
    "max_time": "the decoder has no time budget; cap the work with max_new_tokens / max_steps_per_block",
    "stop_strings": "stop strings are matched left to right; cut the decoded text after decoding instead",
    "early_stopping": _BEAMS,
    "num_beams": _BEAMS,
    "num_beam_groups": _BEAMS,
    "diversity_penalty": _BEAMS,
    "length_penalty": _BEAMS,
    "constraints": _BEAMS,
    "force_words_ids": _BEAMS,
    "penalty_alpha": "contrastive search is a left-to-right method",
    "dola_layers": "DoLa decoding is a left-to-right method",
    "top_h": "not implemented for diffusion decoding; pass a logits_processor instead",
    "no_repeat_ngram_size": f"{_LEFT_TO_RIGHT} (n-gram blocking reads the last tokens)",
    "encoder_no_repeat_ngram_size": "encoder-decoder only",
    "encoder_repetition_penalty": "encoder-decoder only",
    "bad_words_ids": f"{_LEFT_TO_RIGHT} (multi-token bad words read the previous tokens); "
    "for single tokens use suppress_tokens",
    "sequence_bias": f"{_LEFT_TO_RIGHT} (sequence biases read the previous tokens)",
    "renormalize_logits": "the candidate step always normalises with a full softmax",
    "remove_invalid_values": "NaN/inf logits raise a ValueError naming the block and step instead",
    "forced_bos_token_id": f"{_LEFT_TO_RIGHT} (it forces the first generated position)",
    "forced_eos_token_id": f"{_LEFT_TO_RIGHT} (it forces the last position)",
    "exponential_decay_length_penalty": f"{_LEFT_TO_RIGHT} (it depends on the current length)",
    "begin_suppress_tokens": f"{_LEFT_TO_RIGHT} (it acts on the first generated position only)",
    "guidance_scale": "classifier-free guidance is not implemented for diffusion decoding",
    "watermarking_config": "watermarking seeds on the previous token",
    "token_healing": "token healing rewrites the prompt's tail left to right",
    "low_memory": _BEAMS,
    "num_return_sequences": "one completion per row; repeat the prompt rows for several samples",
    "output_attentions": _OUTPUTS,
    "output_hidden_states": _OUTPUTS,
    "output_scores": _OUTPUTS,
    "output_logits": _OUTPUTS,
    "cache_implementation": _CACHE,
    "cache_config": _CACHE,
    "max_cache_len": _CACHE,
    "return_legacy_cache": _CACHE,
    "prefill_chunk_size": _CACHE,
    "continuous_batching_config": "continuous batching is transformers' serving loop",
    "use_mtp": "multi-token prediction heads are a left-to-right method",
    "speculation_type": _ASSISTED,
    "num_assistant_tokens": _ASSISTED,
    "num_assistant_tokens_schedule": _ASSISTED,
    "assistant_confidence_threshold": _ASSISTED,
    "assistant_early_exit": _ASSISTED,
    "assistant_lookbehind": _ASSISTED,
    "assistant_ensemble_weight": _ASSISTED,
    "target_lookbehind": _ASSISTED,
    "prompt_lookup_num_tokens": _ASSISTED,
    "max_matching_ngram_size": _ASSISTED,
}
"""Fields with no meaning for diffusion decoding, and why; any value but "off" raises."""

# Values besides None, False and the parent class's own default that mean "off" for a refused field.
_OFF_BY_FIELD: dict[str, tuple[Any, ...]] = {
    "num_beams": (1,),
    "num_beam_groups": (1,),
    "num_return_sequences": (1,),
    "length_penalty": (1.0,),
    "encoder_repetition_penalty": (1.0,),
    "diversity_penalty": (0.0,),
    "no_repeat_ngram_size": (0,),
    "encoder_no_repeat_ngram_size": (0,),
    "min_length": (0,),
    "min_new_tokens": (0,),
    "return_legacy_cache": (True,),
    "bad_words_ids": ([],),
    "sequence_bias": ({}, []),
}


def _parent_defaults() -> dict[str, Any]:
    defaults = {key: value for key, value in GenerationConfig().__dict__.items() if not key.startswith("_")}
    # transformers 5.x keeps the fields None and fills these in inside `model.generate`
    global_defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    if callable(global_defaults):
        defaults.update({key: value for key, value in global_defaults().items() if value is not None})
    return defaults


PARENT_DEFAULTS: dict[str, Any] = _parent_defaults()
"""transformers' own defaults in the installed line: `GenerationConfig()`'s (4.57) or the ones
`model.generate` fills in (5.x); the same values on both lines."""


def _same(value: Any, other: Any) -> bool:
    if isinstance(value, bool) or isinstance(other, bool):
        return value is other
    return type(value) is type(other) or (isinstance(value, (int, float)) and isinstance(other, (int, float)))


def is_off(name: str, value: Any) -> bool:
    """Whether `value` means "not set" for the refused field `name`."""
    if value is None or value is False:
        return True
    candidates = (PARENT_DEFAULTS.get(name), *_OFF_BY_FIELD.get(name, ()))
    return any(other is not None and _same(value, other) and value == other for other in candidates)


def refused_fields_set(config: Any) -> dict[str, Any]:
    """The refused fields `config` sets to something other than "off", with their values."""
    return {
        name: getattr(config, name)
        for name in REFUSED
        if hasattr(config, name) and not is_off(name, getattr(config, name))
    }


def describe_refused(fields: dict[str, Any]) -> str:
    """`"`name`=value: reason; ..."` for refused fields (the body of the error message)."""
    return "; ".join(f"`{name}`={value!r}: {REFUSED[name]}" for name, value in fields.items())


def unclassified_fields() -> list[str]:
    """Fields of the installed `GenerationConfig` that none of the tables lists (a test keeps this empty)."""
    known = set(HONOURED) | set(METADATA) | set(REFUSED)
    return sorted(set(GenerationConfig().__dict__) - known)
