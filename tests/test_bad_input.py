"""Behaviour 6: bad input raises a clear error before any forward."""

import pytest
import torch
from conftest import EOS, MASK
from denoisers import BagDenoiser

import dllm_edit
from dllm_edit import EditGenerationConfig

IDS = dict(mask_token_id=MASK, eos_token_id=EOS)


@pytest.fixture
def bag():
    return BagDenoiser(vocab_size=48)


def call(model, ids, **kw):
    return dllm_edit.generate(model, ids, adapter="block_causal", use_cache=False, **{**IDS, **kw})


def test_no_mask_token(bag):
    with pytest.raises(ValueError, match="mask_token_id"):
        dllm_edit.generate(bag, torch.tensor([[3]]), adapter="block_causal", use_cache=False)
    assert bag.calls == 0


@pytest.mark.parametrize("name", ["threshold", "editing_threshold", "multi_block_threshold"])
@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_thresholds_outside_unit_interval(bag, name, value):
    with pytest.raises(ValueError, match=name):
        call(bag, torch.tensor([[3]]), **{name: value})
    assert bag.calls == 0


def test_threshold_wrong_type(bag):
    with pytest.raises(TypeError, match="threshold"):
        call(bag, torch.tensor([[3]]), threshold="high")


@pytest.mark.parametrize("value", [0, -4])
def test_block_length_must_be_positive(bag, value):
    with pytest.raises(ValueError, match="block_length"):
        call(bag, torch.tensor([[3]]), block_length=value)


def test_block_length_must_be_int(bag):
    with pytest.raises(TypeError, match="block_length"):
        call(bag, torch.tensor([[3]]), block_length=2.5)


def test_prompt_longer_than_position_limit(llama_eager):
    ids = torch.randint(2, 40, (1, 500))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        dllm_edit.generate(llama_eager, ids, max_new_tokens=64, **IDS)


def test_input_ids_must_be_2d_integer(bag):
    with pytest.raises(ValueError, match="2-D"):
        call(bag, torch.tensor([3, 4]))
    with pytest.raises(TypeError, match="integer"):
        call(bag, torch.tensor([[3.0, 4.0]]))
    with pytest.raises(TypeError, match="input_ids"):
        call(bag, [[3, 4]])


def test_attention_mask_shape_and_padding_side(bag):
    with pytest.raises(ValueError, match="shape"):
        call(bag, torch.tensor([[3, 4]]), attention_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="left padding"):
        call(bag, torch.tensor([[3, 4]]), attention_mask=torch.tensor([[1, 0]]))
    assert bag.calls == 0


def test_nan_logits_name_the_step():
    class NaNModel(BagDenoiser):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            if self.calls >= 3:
                out.logits[:] = float("nan")
            return out

    with pytest.raises(ValueError, match=r"NaN/inf logits at block \d+, step \d+"):
        call(
            NaNModel(vocab_size=48),
            torch.tensor([[3, 4]]),
            max_new_tokens=8,
            block_length=2,
            editing_threshold=None,
        )


def test_unknown_override_and_adapter(bag):
    with pytest.raises(TypeError, match="Unknown generation option"):
        call(bag, torch.tensor([[3]]), blocklength=4)
    with pytest.raises(ValueError, match="Unknown adapter"):
        dllm_edit.generate(bag, torch.tensor([[3]]), adapter="causal", **IDS)
    with pytest.raises(TypeError, match="generation_config"):
        dllm_edit.generate(bag, torch.tensor([[3]]), generation_config={"threshold": 0.5}, **IDS)


def test_config_field_checks():
    with pytest.raises(ValueError, match="steps"):
        EditGenerationConfig(block_length=4, steps=8).validate()
    with pytest.raises(ValueError, match="num_to_transfer"):
        EditGenerationConfig().replace(num_to_transfer=0)
    with pytest.raises(ValueError, match="max_post_steps"):
        EditGenerationConfig().replace(max_post_steps=-1)
    with pytest.raises(ValueError, match="temperature"):
        EditGenerationConfig().replace(temperature=-1.0)
    with pytest.raises(ValueError, match="unmasking strategy"):
        from dllm_edit.strategies import TokenEdit

        EditGenerationConfig().replace(strategies=[TokenEdit(0.5)])


def test_streamer_needs_batch_one(bag):
    from transformers.generation.streamers import BaseStreamer

    class Sink(BaseStreamer):
        def put(self, value):
            pass

        def end(self):
            pass

    with pytest.raises(ValueError, match="batch size 1"):
        call(bag, torch.tensor([[3], [4]]), streamer=Sink())
