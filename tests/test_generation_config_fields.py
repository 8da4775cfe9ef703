"""Every field `EditGenerationConfig` inherits from transformers is honoured (with an effect) or refused.

The tables live in `dllm_edit.config_fields`; these tests enumerate the installed transformers'
`GenerationConfig` at run time, so a new release that adds a field fails here until it is classified.
They run on both CI legs (transformers 4.57 and 5.x).
"""

import pytest
import torch
from transformers import GenerationConfig

import dllm_edit
from dllm_edit import EditGenerationConfig
from dllm_edit.config_fields import HONOURED, METADATA, REFUSED, unclassified_fields
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, ScriptedDenoiser, one_hot_table

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
PROMPT = torch.tensor([[5, 6, 7, 8, 9]])


def test_every_inherited_field_is_classified():
    assert unclassified_fields() == [], (
        "transformers added GenerationConfig fields that dllm_edit neither honours nor refuses: classify "
        "them in dllm_edit/config_fields.py (HONOURED with a test of the effect here, or REFUSED)."
    )
    assert not set(HONOURED) & set(REFUSED) and not set(METADATA) & (set(HONOURED) | set(REFUSED))


# a value that is "on" for each refused field (the test below checks the list covers REFUSED)
REFUSED_VALUES = {
    "min_length": 5,
    "min_new_tokens": 3,
    "max_time": 1.5,
    "stop_strings": ["\n"],
    "early_stopping": True,
    "num_beams": 2,
    "num_beam_groups": 2,
    "diversity_penalty": 0.5,
    "length_penalty": 2.0,
    "constraints": ["c"],
    "force_words_ids": [[3]],
    "penalty_alpha": 0.6,
    "dola_layers": "low",
    "top_h": 0.5,
    "no_repeat_ngram_size": 1,
    "encoder_no_repeat_ngram_size": 2,
    "encoder_repetition_penalty": 1.3,
    "bad_words_ids": [[3]],
    "sequence_bias": {(3,): 1.0},
    "renormalize_logits": True,
    "remove_invalid_values": True,
    "forced_bos_token_id": 2,
    "forced_eos_token_id": 2,
    "exponential_decay_length_penalty": (4, 1.5),
    "begin_suppress_tokens": [3],
    "guidance_scale": 1.5,
    "watermarking_config": {"greenlist_ratio": 0.25},
    "token_healing": True,
    "low_memory": True,
    "num_return_sequences": 2,
    "output_attentions": True,
    "output_hidden_states": True,
    "output_scores": True,
    "output_logits": True,
    "cache_implementation": "static",
    "cache_config": {"max_cache_len": 8},
    "max_cache_len": 64,
    "return_legacy_cache": "yes",
    "prefill_chunk_size": 16,
    "continuous_batching_config": {"block_size": 8},
    "use_mtp": True,
    "speculation_type": "assisted",
    "num_assistant_tokens": 7,
    "num_assistant_tokens_schedule": "heuristic",
    "assistant_confidence_threshold": 0.9,
    "assistant_early_exit": 2,
    "assistant_lookbehind": 3,
    "assistant_ensemble_weight": 0.5,
    "target_lookbehind": 3,
    "prompt_lookup_num_tokens": 4,
    "max_matching_ngram_size": 3,
}


def test_refused_values_cover_the_table():
    assert set(REFUSED_VALUES) == set(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_field_raises_naming_it(name):
    if name not in GenerationConfig().__dict__:
        pytest.skip(f"this transformers line has no `{name}`")
    with pytest.raises(ValueError, match=f"`{name}`"):
        EditGenerationConfig().replace(**{name: REFUSED_VALUES[name]})
    with pytest.raises(ValueError, match=f"`{name}`"):  # also through generate(**overrides)
        dllm_edit.generate(BagDenoiser(vocab_size=VOCAB), PROMPT, **IDS, **{name: REFUSED_VALUES[name]})


def test_refused_field_in_a_plain_config_raises_and_in_a_model_config_warns(caplog):
    plain = GenerationConfig(max_new_tokens=4, num_beams=3)
    with pytest.raises(ValueError, match="num_beams"):
        EditGenerationConfig.from_generation_config(plain)
    with caplog.at_level("WARNING"):
        cfg = EditGenerationConfig.from_generation_config(plain, strict=False)
    assert cfg.max_new_tokens == 4 and "num_beams" in caplog.text


def decode(model=None, **fields):
    model = model if model is not None else BagDenoiser(vocab_size=VOCAB)
    kw = dict(adapter="block_causal", use_cache=False, block_length=4, max_new_tokens=8, **IDS)
    kw.update(fields)
    return dllm_edit.generate(model, PROMPT, **kw)


def sampled(seed=0, **fields):
    """Tokens and candidate probabilities of a sampled decode (a filter changes the probabilities)."""
    out = decode(generator=torch.Generator().manual_seed(seed), temperature=1.5, output_trace=True, **fields)
    return out.sequences, torch.cat([step.probs for step in out.trace], dim=1)


def changed(a, b):
    return any(not torch.equal(x, y) if x.shape == y.shape else True for x, y in zip(a, b, strict=True))


def test_honoured_fields_change_the_output():
    """One check per HONOURED field: setting it changes what comes out (or is checked, for max_length)."""
    base = decode(eos_early_stop=False).sequences
    effects = {}
    effects["max_new_tokens"] = decode(max_new_tokens=4).sequences.shape[1] == PROMPT.shape[1] + 4
    first = int(base[0, 5])
    cut = decode(eos_token_id=first, eos_early_stop=False).sequences
    effects["eos_token_id"] = cut[0, 6:].tolist() == [PAD] * 7
    effects["pad_token_id"] = decode(eos_token_id=first, pad_token_id=3).sequences[0, 6:].tolist() == [3] * 7
    effects["temperature"] = not torch.equal(sampled()[0], base)
    effects["do_sample"] = torch.equal(decode(do_sample=False, eos_early_stop=False).sequences, base) and (
        decode(do_sample=True).sequences.shape == base.shape
    )
    plain = sampled(eos_early_stop=False)
    effects["top_k"] = changed(sampled(top_k=1, eos_early_stop=False), plain)
    effects["top_p"] = changed(sampled(top_p=0.05, eos_early_stop=False), plain)
    effects["min_p"] = changed(sampled(min_p=0.9, eos_early_stop=False), plain)
    effects["typical_p"] = changed(sampled(typical_p=0.05, eos_early_stop=False), plain)
    effects["epsilon_cutoff"] = changed(sampled(epsilon_cutoff=0.2, eos_early_stop=False), plain)
    effects["eta_cutoff"] = changed(sampled(eta_cutoff=0.5, eos_early_stop=False), plain)
    penalised = decode(repetition_penalty=50.0, eos_early_stop=False).sequences
    effects["repetition_penalty"] = not torch.equal(penalised, base)
    banned = sorted(set(base[0, 5:].tolist()))
    suppressed = decode(suppress_tokens=banned, eos_early_stop=False).sequences
    effects["suppress_tokens"] = not set(suppressed[0, 5:].tolist()) & set(banned)
    effects["use_cache"] = _raises(lambda: decode(model=BagDenoiser(vocab_size=VOCAB), use_cache=True))
    effects["return_dict_in_generate"] = isinstance(decode(return_dict_in_generate=False), torch.Tensor)
    effects["max_length"] = _raises(lambda: decode(max_length=30)) and (
        decode(max_length=PROMPT.shape[1] + 8).sequences.shape[1] == PROMPT.shape[1] + 8
    )
    assert set(effects) == set(HONOURED), "every HONOURED field needs a check here"
    assert all(effects.values()), {key: ok for key, ok in effects.items() if not ok}


def _raises(fn):
    try:
        fn()
    except ValueError:
        return True
    return False


def test_sampling_only_filters_are_refused_at_temperature_zero():
    for name, value in [("top_k", 50), ("top_p", 0.9), ("min_p", 0.1), ("typical_p", 0.5)]:
        with pytest.raises(ValueError, match=f"'{name}'"):
            EditGenerationConfig(**{name: value})
        with pytest.raises(ValueError, match="temperature 0"):
            EditGenerationConfig(temperature=0.7, **{name: value}).replace(temperature=0.0)
    with pytest.raises(ValueError, match="do_sample"):
        EditGenerationConfig(do_sample=False, temperature=1.0)
    with pytest.raises(ValueError, match="do_sample"):
        EditGenerationConfig().replace(do_sample=True, temperature=0.0)
    assert EditGenerationConfig(temperature=0.7).replace(do_sample=False).temperature == 0.0
    assert EditGenerationConfig().replace(do_sample=True).temperature == 1.0


def test_defaults_are_the_same_on_every_transformers_line():
    # transformers 4.57's GenerationConfig() defaults top_k=50, top_p=1.0, use_cache=True: ours start unset
    cfg = EditGenerationConfig()
    assert (cfg.top_k, cfg.top_p, cfg.use_cache, cfg.do_sample, cfg.temperature) == (
        None,
        None,
        None,
        False,
        0.0,
    )
    saved = cfg.to_diff_dict()
    assert "top_k" not in saved or saved["top_k"] is None


def test_greedy_probability_is_the_full_softmax_whatever_filter_was_inherited():
    """The case that decoded differently on transformers 4.57: an inherited top_k=50 renormalised the
    argmax's probability over 50 tokens (0.4983 -> 0.72) and fired an edit the reference never makes."""
    vocab, bl = 128, 4
    filled = one_hot_table([2, 3, 4, 5], [0.99] * 4, vocab)
    doubt = one_hot_table([2, 3, 6, 5], [0.99, 0.99, 0.4983, 0.99], vocab)  # argmax differs at slot 2
    config = EditGenerationConfig.from_mode(
        "quality",
        block_length=bl,
        max_new_tokens=bl,
        mask_token_id=vocab - 1,
        eos_token_id=1,
        use_cache=False,
        suppress_mask_token=False,  # as the reference: the mask's own share stays in the softmax
    )
    config.top_k = 50  # what transformers' model.generate fills in (5.x) / GenerationConfig() held (4.57)
    model = ScriptedDenoiser([filled, doubt, filled], block_length=bl)
    out = dllm_edit.generate(
        model, torch.tensor([[7, 7, 7, 7]]), generation_config=config, adapter="block_causal"
    )
    assert out.sequences[0, 4:].tolist() == [2, 3, 4, 5]  # 0.4983 is not > 0.5: no edit
    assert int(out.num_edits[0]) == 0


def test_saved_dllm_edit_fields_are_read_from_a_plain_generation_config(tmp_path):
    """A model folder's generation_config.json with our fields decodes with them, also when transformers
    loaded it as a plain GenerationConfig (what from_pretrained does for a non-dllm_edit class)."""
    EditGenerationConfig.from_mode("speedy", block_length=8, max_new_tokens=8, **IDS).save_pretrained(
        tmp_path
    )
    plain = GenerationConfig.from_pretrained(tmp_path)
    assert type(plain) is GenerationConfig
    model = BagDenoiser(vocab_size=VOCAB)
    model.generation_config = plain
    out = dllm_edit.generate(model, PROMPT, adapter="block_causal", use_cache=False, output_trace=True)
    assert {step.after.shape[1] for step in out.trace} == {8}  # blocks of 8, not the default 32
    explicit = EditGenerationConfig.from_pretrained(tmp_path)
    again = dllm_edit.generate(
        model, PROMPT, generation_config=explicit, adapter="block_causal", use_cache=False
    )
    assert torch.equal(out.sequences, again.sequences)


def test_completion_lengths_and_completions():
    out = decode(eos_early_stop=False)
    first = int(out.sequences[0, 5])
    cut = decode(eos_token_id=first, eos_early_stop=False)
    assert cut.completion_lengths.tolist() == [1]
    assert cut.completions(PROMPT.shape[1]) == [[first]]
    assert out.completion_lengths.tolist() == [8] or first in out.sequences[0, 5:].tolist()
