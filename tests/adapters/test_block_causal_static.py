"""`block_causal_static`: block-causal decoding through a `StaticCache` the size of the canvas gives
the tokens and forwards of the `block_causal` adapter's own cache, for every rule, both presets,
left-padded batches whose rows finish at different times, on a Llama and a Qwen3; multi-block
editing is refused before a forward; dllm_edit's native classes (LLaDA2.x, LLaDA, LLaDA-MoE) give
the same tokens too."""

from __future__ import annotations

import pytest
import torch

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from tests.helpers import EOS, MASK, PAD, left_pad, tiny_llama, tiny_qwen3
from tests.helpers.registry import build

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [3]]


MODELS = {"llama": tiny_llama("sdpa"), "qwen3": tiny_qwen3("sdpa")}


def _assert_static_equals_block_causal(model, mode, rule):
    """Decode the padded prompts with `block_causal` and `block_causal_static`: the same tokens and
    forwards, or the same refusal."""
    ids, mask = left_pad(PROMPTS)
    config = dllm_edit.EditGenerationConfig.from_mode(
        mode, max_new_tokens=12, block_length=4, mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD
    )
    if rule is not None:
        config = config.replace(strategies=[build(rule, 4)])
    outs = []
    for adapter in ("block_causal", "block_causal_static"):
        try:
            outs.append(
                dllm_edit.generate(
                    model,
                    ids,
                    attention_mask=mask,
                    generation_config=config,
                    adapter=adapter,
                    generator=torch.Generator().manual_seed(0),
                )
            )
        except ValueError as error:  # WINO: both refuse it (no shadow block)
            outs.append(str(error)[:40])
    if isinstance(outs[0], str):
        assert outs[1] == outs[0]  # the same refusal
        return
    assert torch.equal(outs[1].sequences, outs[0].sequences)
    assert torch.equal(outs[1].num_forwards, outs[0].num_forwards)


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("mode", ["speedy", "quality"])
@pytest.mark.parametrize("rule", [None, *unmasking_strategies()])
def test_the_static_cache_gives_the_block_causal_tokens(model_name, mode, rule):
    _assert_static_equals_block_causal(MODELS[model_name], mode, rule)


def test_multi_block_editing_is_refused_before_a_forward():
    model = tiny_llama("sdpa")
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    config = dllm_edit.EditGenerationConfig.from_mode(
        "speedy", max_new_tokens=8, block_length=4, mask_token_id=MASK, multi_block_edit=True
    )
    with pytest.raises(ValueError, match="does not support multi-block editing"):
        dllm_edit.generate(
            model, torch.tensor([[5, 6, 7]]), generation_config=config, adapter="block_causal_static"
        )
    assert not calls


NATIVE_CASES = [("llada2_moe", rule) for rule in [None, *unmasking_strategies()]] + [
    ("llada", None),
    ("lladamoe", None),
]


@pytest.mark.parametrize("mode", ["speedy", "quality"])
@pytest.mark.parametrize(("family", "rule"), NATIVE_CASES)
def test_the_native_classes_give_the_block_causal_tokens(family, rule, mode):
    """dllm_edit's own classes through the StaticCache (LLaDA2's config keeps `sliding_window: 4096`
    with the window off: the buffer must still be a full-attention one)."""
    from tests.models.test_caches import native

    model = native(family)
    assert getattr(model.config, "sliding_window", None) or family != "llada2_moe"
    _assert_static_equals_block_causal(model, mode, rule)
