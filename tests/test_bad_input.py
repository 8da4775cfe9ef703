"""Behaviour 6: bad input raises a clear error before any forward."""

import re

import pytest
import torch

import dllm_edit
from dllm_edit import EditGenerationConfig
from tests.helpers import EOS, MASK, BagDenoiser

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


# ---- one validation for every path into a config ------------------------------------------------------


def test_unknown_key_is_refused_with_close_matches_on_every_path(tmp_path):
    import json

    from transformers import GenerationConfig

    for build in (
        lambda: EditGenerationConfig(treshold=0.1),
        lambda: EditGenerationConfig.from_mode("speedy", treshold=0.1),
        lambda: EditGenerationConfig().replace(treshold=0.1),
        lambda: EditGenerationConfig.from_dict({"treshold": 0.1}),
    ):
        with pytest.raises(TypeError, match=r"\['treshold'\].*'threshold'"):
            build()
    EditGenerationConfig.from_mode("speedy").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    (tmp_path / "generation_config.json").write_text(json.dumps({**saved, "gen_length": 5}))
    with pytest.raises(TypeError, match="gen_length"):
        EditGenerationConfig.from_pretrained(tmp_path)
    foreign = GenerationConfig.from_pretrained(tmp_path)  # written by another tool: lenient path
    with pytest.raises(TypeError, match="gen_length"):
        EditGenerationConfig.from_generation_config(foreign)
    cfg = EditGenerationConfig.from_generation_config(foreign, strict=False)  # warns, naming it
    assert cfg.threshold == 0.5 and not hasattr(cfg, "gen_length")


@pytest.mark.parametrize(
    "bookkeeping",
    [
        {"transformers_version": "4.57.1", "_from_model_config": False, "_commit_hash": "0" * 40},  # 4.57
        {"transformers_version": "5.24.0", "_from_model_config": True},  # 5.x
        {"_original_object_hash": 1},
    ],
    ids=["4.57", "5.x", "hash"],
)
def test_transformers_bookkeeping_keys_pass(tmp_path, bookkeeping):
    cfg = EditGenerationConfig.from_dict({"threshold": 0.6, **bookkeeping})
    assert cfg.threshold == 0.6
    cfg.save_pretrained(tmp_path)
    assert EditGenerationConfig.from_pretrained(tmp_path).threshold == 0.6


def test_range_errors_suggest_values_that_are_accepted():
    import re

    from dllm_edit.config import MODES

    for name in ("threshold", "editing_threshold", "multi_block_threshold"):
        with pytest.raises(ValueError) as caught:
            EditGenerationConfig(**{name: 1.5})
        hint = str(caught.value).split("got 1.5.")[1]
        suggested = [float(v) for v in re.findall(r"\b\d\.\d\b", hint)]
        assert suggested, hint
        for value in suggested:
            assert getattr(EditGenerationConfig(**{name: value}), name) == value
        if "None" in hint:
            EditGenerationConfig(**{name: None})
    with pytest.raises(ValueError) as caught:
        EditGenerationConfig(editing_threshold=2.0)
    message = str(caught.value)
    for mode in ("speedy", "quality"):  # the presets it names hold the values it names
        assert f"{MODES[mode]['editing_threshold']} (the {mode} preset's" in message


# ---- token ids against the vocabulary ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("mask_token_id", 5000, "`mask_token_id`=5000"),
        ("eos_token_id", 48, "`eos_token_id`=48"),
        ("eos_token_id", [1, 99], "`eos_token_id`=[99]"),
        ("pad_token_id", -3, "`pad_token_id`=-3"),
        ("suppress_tokens", [5, 999], "`suppress_tokens`=[999]"),
    ],
)
def test_token_ids_outside_the_vocabulary(bag, field, value, shown):
    with pytest.raises(ValueError, match=re.escape(shown) + r".*vocabulary of 48 ids \(0\.\.47\)"):
        call(bag, torch.tensor([[3]]), **{field: value})
    assert bag.calls == 0


def test_token_ids_read_from_the_model_are_checked_and_named(bag):
    from types import SimpleNamespace

    bag.generation_config = SimpleNamespace(mask_token_id=None, eos_token_id=None, pad_token_id=None)
    bag.config = SimpleNamespace(mask_token_id=4800, eos_token_id=EOS, pad_token_id=None)
    with pytest.raises(ValueError, match=r"`mask_token_id`=4800 \(from the model config\)"):
        dllm_edit.generate(bag, torch.tensor([[3]]), adapter="block_causal", use_cache=False)
    assert bag.calls == 0


def test_empty_prompts_are_refused(bag):
    with pytest.raises(ValueError, match=r"`input_ids` has shape \(1, 0\)"):
        call(bag, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`attention_mask` rows \[1\] are all 0"):
        call(bag, torch.tensor([[3, 4], [0, 0]]), attention_mask=torch.tensor([[1, 1], [0, 0]]))
    assert bag.calls == 0
    out = call(bag, torch.tensor([[3, 4], [0, 5]]), attention_mask=torch.tensor([[1, 1], [0, 1]]))
    assert out.sequences.shape[0] == 2  # one token is a prompt


def test_block_rounding_hint_suggests_settings_that_fit():
    """A canvas over the position limit only because of the rounding to whole blocks: both
    suggested fixes (the block_length, the max_new_tokens) decode."""
    import re

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[3, 4, 5, 6]])  # 4 + 8 = 12 positions fit in 16; blocks of 10 need 20
    with pytest.raises(ValueError) as caught:
        dllm_edit.generate(model, ids, max_new_tokens=8, block_length=10, **IDS)
    message = str(caught.value)
    assert "fit in 12 positions" in message and "lower block_length" in message
    block = int(re.search(r"e\.g\. (\d+), adds no position", message).group(1))
    tokens = int(re.search(r"set max_new_tokens to (\d+)", message).group(1))
    assert (
        dllm_edit.generate(model, ids, max_new_tokens=8, block_length=block, **IDS).sequences.shape[1] == 12
    )
    assert (
        dllm_edit.generate(model, ids, max_new_tokens=tokens, block_length=10, **IDS).sequences.shape[1]
        >= 4 + tokens
    )
