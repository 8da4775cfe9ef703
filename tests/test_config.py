import pytest
import torch

import dllm_edit
from dllm_edit import EditGenerationConfig
from dllm_edit.strategies import Cosine, MultiBlockEdit, QuotaUnmask, ThresholdUnmask, TokenEdit


def test_presets_match_the_model_card():
    s = EditGenerationConfig.from_mode("speedy")
    q = EditGenerationConfig.from_mode("quality")
    assert (s.threshold, s.editing_threshold, s.max_post_steps, s.block_length, s.temperature) == (
        0.5,
        0.0,
        16,
        32,
        0.0,
    )
    assert (q.threshold, q.editing_threshold, q.max_post_steps, q.block_length, q.temperature) == (
        0.7,
        0.5,
        16,
        32,
        0.0,
    )
    assert s.multi_block_edit is False and s.steps is None


def test_from_mode_overrides_and_unknown_mode():
    cfg = EditGenerationConfig.from_mode("speedy", max_new_tokens=64, threshold=Cosine(0.9, 0.5, 4))
    assert cfg.max_new_tokens == 64 and isinstance(cfg.threshold, Cosine)
    with pytest.raises(ValueError, match="mode"):
        EditGenerationConfig.from_mode("turbo")


def test_replace_rejects_unknown_keys_with_hint():
    with pytest.raises(TypeError, match="threshold"):
        EditGenerationConfig().replace(treshold=0.5)


def test_build_strategies():
    assert EditGenerationConfig.from_mode("quality").build_strategies() == [
        ThresholdUnmask(0.7, 1),
        TokenEdit(0.5),
    ]
    assert EditGenerationConfig(editing_threshold=None).build_strategies() == [ThresholdUnmask(0.7, 1)]
    quota = EditGenerationConfig(steps=4, block_length=8, editing_threshold=None).build_strategies()
    assert quota == [QuotaUnmask(steps=4, block_length=8, threshold=0.7)]
    mbe = EditGenerationConfig(multi_block_edit=True, multi_block_window=2).build_strategies()
    assert mbe[-1] == MultiBlockEdit(window=2, threshold=0.5)
    explicit = [ThresholdUnmask(0.9)]
    assert EditGenerationConfig(strategies=explicit).build_strategies() == explicit


def test_model_generation_config_is_used(llama_eager):
    cfg = EditGenerationConfig.from_mode(
        "speedy", max_new_tokens=5, block_length=4, mask_token_id=47, eos_token_id=1
    )
    saved = llama_eager.generation_config
    try:
        llama_eager.generation_config = cfg
        out = dllm_edit.generate(llama_eager, torch.tensor([[3, 4]]))
        assert out.sequences.shape == (1, 7)
    finally:
        llama_eager.generation_config = saved


def test_return_dict_false_returns_tensor(llama_eager):
    seq = dllm_edit.generate(
        llama_eager,
        torch.tensor([[3, 4]]),
        max_new_tokens=4,
        block_length=2,
        mask_token_id=47,
        return_dict_in_generate=False,
    )
    assert isinstance(seq, torch.Tensor) and seq.shape == (1, 6)
