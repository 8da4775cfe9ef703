"""`EditGenerationConfig.unmasking`: a registered M2T rule by name, dict or object, composed with T2T.

Every path into a config takes it (constructor, `from_mode`, `replace`, a saved generation config, a
YAML dict); combinations without a meaning are refused before any forward. The zoo's rules
(Fast-dLLM, EB-Sampler, Dream, LLaDA random, Prophet) are each selectable by name and by dict, round
trip through a saved config, and compose with T2T editing and multi-block editing.
"""

from __future__ import annotations

import tempfile

import pytest
import torch
import yaml

import dllm_edit
from dllm_edit import EditGenerationConfig
from dllm_edit.strategies import (
    EBSampler,
    MultiBlockEdit,
    ThresholdUnmask,
    TokenEdit,
    get_strategy,
    strategy_from_dict,
)
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


@pytest.mark.parametrize(
    "value",
    ["fast_dllm_threshold", {"type": "fast_dllm_threshold", "threshold": 0.8}, "OBJECT"],
)
def test_every_form_builds_the_strategy_and_composes_with_editing(value):
    cls = get_strategy("fast_dllm_threshold")
    if value == "OBJECT":
        value = cls(threshold=0.8)
    cfg = EditGenerationConfig.from_mode("speedy", unmasking=value, multi_block_edit=True)
    built = cfg.build_strategies()
    assert (
        isinstance(built[0], cls) and isinstance(built[1], TokenEdit) and isinstance(built[2], MultiBlockEdit)
    )
    assert built[1].threshold.value == 0.0  # the preset's T2T threshold still applies


def test_round_trips_through_json_yaml_and_save_pretrained(tmp_path):
    cfg = EditGenerationConfig.from_mode("quality", unmasking={"type": "ThresholdUnmask", "threshold": 0.3})
    again = EditGenerationConfig.from_dict(cfg.to_dict())
    assert again.unmasking == cfg.unmasking == ThresholdUnmask(threshold=0.3)
    as_yaml = yaml.safe_load(yaml.safe_dump(cfg.to_dict()))
    assert EditGenerationConfig(**as_yaml).unmasking == cfg.unmasking
    cfg.save_pretrained(tmp_path)
    assert EditGenerationConfig.from_pretrained(tmp_path).unmasking == cfg.unmasking


def test_it_decodes_and_replaces_the_threshold_rule():
    model = BagDenoiser(vocab_size=48, sharpness=1.0, exact=True)
    prompt = torch.tensor([[3, 4, 5, 6]])
    base = dict(max_new_tokens=8, block_length=4, editing_threshold=None, use_cache=False, **IDS)
    default = dllm_edit.generate(
        model, prompt, generation_config=EditGenerationConfig(threshold=0.3, **base), adapter="bidirectional"
    )
    same = dllm_edit.generate(
        model,
        prompt,
        generation_config=EditGenerationConfig(unmasking=ThresholdUnmask(threshold=0.3), **base),
        adapter="bidirectional",
    )
    assert same.sequences.tolist() == default.sequences.tolist()
    assert same.num_forwards.tolist() == default.num_forwards.tolist()


def test_meaningless_combinations_are_refused():
    with pytest.raises(ValueError, match="steps"):
        EditGenerationConfig.from_mode("llada", unmasking="fast_dllm_threshold")
    with pytest.raises(ValueError, match="strategies"):
        EditGenerationConfig(unmasking="fast_dllm_threshold", strategies=[ThresholdUnmask()])
    with pytest.raises(ValueError, match="ignored"):
        EditGenerationConfig.from_mode("speedy", unmasking="fast_dllm_threshold", threshold=0.2)
    cfg = EditGenerationConfig.from_mode("speedy", unmasking="fast_dllm_threshold")
    with pytest.raises(ValueError, match="num_to_transfer"):
        cfg.replace(num_to_transfer=2)
    assert cfg.replace(unmasking=None, threshold=0.2).build_strategies()[0] == ThresholdUnmask(threshold=0.2)
    with pytest.raises(TypeError, match="unmasks=True"):
        EditGenerationConfig(unmasking=TokenEdit())
    with pytest.raises(ValueError, match="Did you mean"):
        EditGenerationConfig(unmasking="fast_dllm_treshold")
    with pytest.raises(ValueError, match="unmasking"):
        cfg.to_sglang()


# ----------------------------------------------------------------------------------------------
# the zoo's rules through the config: by name, by dict, composed with T2T editing and MBE


NAMES = ("fast_dllm_threshold", "fast_dllm_factor", "eb_sampler", "prophet", "dream", "llada_random")


@pytest.mark.parametrize("name", NAMES)
def test_every_rule_is_selectable_and_round_trips(name):
    cls = get_strategy(name)
    assert cls.unmasks and cls.sweep is not None
    strategy = cls()
    assert strategy_from_dict(strategy.to_dict()) == strategy
    cfg = dllm_edit.EditGenerationConfig(unmasking=name, editing_threshold=0.5, **IDS)
    built = cfg.build_strategies()
    assert built[0] == strategy and isinstance(built[1], TokenEdit)
    for value in cls.sweep[1]:  # the bench's sweep is valid
        cls(**{cls.sweep[0]: value})
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        back = dllm_edit.EditGenerationConfig.from_pretrained(d)
    assert back.unmasking == strategy


def test_a_dict_selects_fields():
    cfg = dllm_edit.EditGenerationConfig(unmasking={"type": "eb_sampler", "gamma": 0.01, "proxy": "entropy"})
    assert cfg.unmasking == EBSampler(gamma=0.01, proxy="entropy")
    with pytest.raises(ValueError, match="gamma"):
        dllm_edit.EditGenerationConfig(unmasking={"type": "eb_sampler", "gamma": -1.0})


@pytest.mark.parametrize(
    "unmasking", ["eb_sampler", "fast_dllm_factor", "fast_dllm_threshold", "dream", "prophet", "llada_random"]
)
def test_rules_compose_with_t2t_editing_and_mbe(unmasking):
    model = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
    ids, mask = left_pad([[5, 6, 7], [9, 10, 11, 12, 13]])
    out = dllm_edit.generate(
        model,
        ids,
        attention_mask=mask,
        adapter="bidirectional",
        unmasking=unmasking,
        editing_threshold=0.3,
        multi_block_edit=True,
        max_post_steps=2,
        block_length=4,
        max_new_tokens=12,
        eos_early_stop=False,
        generator=torch.Generator().manual_seed(0),
        **IDS,
    )
    assert not (out.sequences == MASK).any()
    assert (out.num_forwards <= 3 * (4 + 2 + 4 + 4)).all()
