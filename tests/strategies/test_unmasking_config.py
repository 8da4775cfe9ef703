"""`EditGenerationConfig.unmasking`: a registered M2T rule by name, dict or object, composed with T2T.

Every path into a config takes it (constructor, `from_mode`, `replace`, a saved generation config, a
YAML dict); combinations without a meaning are refused before any forward.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import EOS, MASK, PAD
from denoisers import BagDenoiser

import dllm_edit
from dllm_edit import EditGenerationConfig
from dllm_edit.strategies import MultiBlockEdit, ThresholdUnmask, TokenEdit, get_strategy

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
