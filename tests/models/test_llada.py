"""dllm_edit's native LLaDA class (`dllm_edit.models.llada`) against the checkpoints' own code.

The reference is the hub's `modeling_llada.py` (the `dllm` repository's copy), loaded through
`tests.helpers.remote_code` when `DLLM_EDIT_REMOTE_CODE_DIR` names it and it builds (transformers
4.x: under 5.x its config loses `use_cache` and the class cannot be built; those tests skip with that
reason). The remote code takes a 4-D mask as `attention_bias`, a 2-D padding mask as
`attention_mask`, and no cache; it is built from its inner `LLaDAModel` on the CPU, because its
`LLaDAModelLM.__init__` puts the weights on CUDA. The recorded-logits, config, training and decoding
tests run always.

The tiny config keeps LLaDA-8B's layout: multi-head attention (as many key/value heads as query
heads), an MLP three times as wide as the model, RoPE base 5e5, no biases, untied output layer, and
every field of the real `config.json`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.models.llada import LLaDAConfig, LLaDAModelLM
from tests.helpers.registry import build
from tests.helpers.remote_code import load_remote, seeded_state_dict

DATA = Path(__file__).parent / "data" / "llada_tiny.pt"
SEED = 0
VOCAB, MASK, EOS, PAD = 128, 126, 1, 1
ATTN = ("eager", "sdpa")
BLOCK = 4

#: LLaDA-8B-Instruct's config.json, as the hub serves it.
REAL_CONFIG: dict[str, Any] = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        "AutoModel": "modeling_llada.LLaDAModelLM",
    },
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "d_model": 4096,
    "embedding_dropout": 0.0,
    "embedding_size": 126464,
    "eos_token_id": 126081,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": 0.02,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mask_token_id": 126336,
    "max_sequence_length": 4096,
    "mlp_hidden_size": 12288,
    "mlp_ratio": 4,
    "model_type": "llada",
    "multi_query_attention": None,
    "n_heads": 32,
    "n_kv_heads": 32,
    "n_layers": 32,
    "pad_token_id": 126081,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "transformers_version": "4.46.3",
    "use_cache": False,
    "vocab_size": 126464,
    "weight_tying": False,
}

#: The real fields at the real values except the sizes and the special tokens.
TINY_CONFIG: dict[str, Any] = {
    **{k: v for k, v in REAL_CONFIG.items() if k not in ("auto_map", "transformers_version")},
    "d_model": 64,  # 4 heads x head_dim 16
    "n_heads": 4,
    "n_kv_heads": 4,
    "n_layers": 2,
    "mlp_hidden_size": 192,
    "max_sequence_length": 256,
    "vocab_size": VOCAB,
    "embedding_size": VOCAB,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "mask_token_id": MASK,
}

#: Settings the native class implements beyond LLaDA-8B's, each checked against the remote code.
VARIANTS: dict[str, dict[str, Any]] = {
    "llada_8b": {},
    "gqa": {"n_kv_heads": 2},
    "multi_query": {"n_kv_heads": None, "multi_query_attention": True},
    "qkv_bias": {"include_qkv_bias": True},
    "all_biases": {"include_bias": True, "bias_for_layer_norm": None},
    "tied": {"weight_tying": True},
    "padded_embedding": {"vocab_size": 120, "embedding_size": VOCAB},
    "gelu_ratio": {"activation_type": "gelu", "mlp_hidden_size": None, "mlp_ratio": 2},
    "rope_in_model_dtype": {"rope_full_precision": False},
}

#: Two rows, ten tokens; the second row's first three slots are padding in the masked cases.
INPUT_IDS = torch.tensor(
    [[5, 17, 33, MASK, MASK, 40, 2, MASK, 9, 64], [PAD, PAD, PAD, 7, 8, MASK, 90, MASK, 3, 11]]
)
PADDING_MASK = torch.tensor([[1] * 10, [0, 0, 0] + [1] * 7])


def block_causal_mask(length: int = 10, block: int = BLOCK, batch: int = 2) -> torch.Tensor:
    """BoolTensor `[B, 1, T, T]`: query i sees key j iff j's block is not after i's."""
    blocks = torch.arange(length) // block  # [T]
    return (blocks[None, :] <= blocks[:, None])[None, None].expand(batch, 1, -1, -1)  # [B, 1, T, T]


def native_model(attn: str = "sdpa", **overrides: Any) -> LLaDAModelLM:
    config = LLaDAConfig(**{**TINY_CONFIG, **overrides})
    model = LLaDAModelLM._from_config(config, attn_implementation=attn)
    model.load_state_dict(seeded_state_dict(model, SEED))
    return model.eval()


def remote_model(**overrides: Any) -> torch.nn.Module:
    """The remote `LLaDAModelLM` on the tiny config (plus `overrides`), with the seeded weights."""
    modeling = load_remote("llada", "modeling_llada")
    try:
        config = modeling.LLaDAConfig(**{**TINY_CONFIG, **overrides})
        inner = modeling.create_model_config_from_pretrained_config(config)
    except AttributeError as error:
        pytest.skip(f"the remote LLaDAConfig does not build under this transformers: {error}")
    inner.init_device = "cpu"  # its LLaDAModelLM would build on CUDA
    model = modeling.LLaDAModelLM(config, model=modeling.LLaDAModel(inner))
    model.load_state_dict(seeded_state_dict(model, SEED))
    try:
        with torch.no_grad():
            model(INPUT_IDS[:, :2])
    except AttributeError as error:  # transformers 5.x drops the config's `use_cache`
        pytest.skip(f"the remote LLaDAModelLM does not run under this transformers: {error}")
    return model.eval()


def cache_of(output: Any) -> Any:
    """The cache of a forward output, under transformers 4.x's or 5.x's field name."""
    return output["cache"] if "cache" in output else output.get("past_key_values")


def assert_close(native: torch.Tensor, remote: torch.Tensor) -> None:
    assert native.shape == remote.shape
    torch.testing.assert_close(native, remote, atol=1e-5, rtol=0)


# 1. logits against the remote code


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_remote_full_attention(variant, attn):
    remote, native = remote_model(**VARIANTS[variant]), native_model(attn, **VARIANTS[variant])
    with torch.no_grad():
        expected = remote(INPUT_IDS, output_hidden_states=True)
        got = native(INPUT_IDS, output_hidden_states=True)
    assert got.logits.shape[-1] == native.config.embedding_size
    assert_close(got.logits, expected.logits)
    assert len(got.hidden_states) == len(expected.hidden_states) == native.config.n_layers + 1
    for ours, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert_close(ours, theirs)


@pytest.mark.parametrize("attn", ATTN)
def test_logits_match_remote_with_padding_mask(attn):
    remote, native = remote_model(), native_model(attn)
    with torch.no_grad():
        expected = remote(INPUT_IDS, attention_mask=PADDING_MASK).logits
        got = native(INPUT_IDS, attention_mask=PADDING_MASK).logits
        unmasked = native(INPUT_IDS).logits
    assert_close(got, expected)
    assert not torch.allclose(got[1], unmasked[1], atol=1e-3)  # the padding keys were hidden


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("form", ["bool", "additive"])
def test_logits_match_remote_with_block_causal_mask(attn, form):
    mask = block_causal_mask()
    if form == "additive":
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    remote, native = remote_model(), native_model(attn)
    with torch.no_grad():
        expected = remote(INPUT_IDS, attention_bias=block_causal_mask()).logits
        got = native(INPUT_IDS, attention_mask=mask).logits
        full = native(INPUT_IDS).logits
    assert_close(got, expected)
    assert not torch.allclose(got[:, :BLOCK], full[:, :BLOCK], atol=1e-3)  # the mask was applied


@pytest.mark.parametrize("attn", ATTN)
def test_cached_forward_equals_uncached(attn):
    """The first block in a DynamicCache, then the rest: the uncached block-causal logits."""
    remote, native = remote_model(), native_model(attn)
    mask = block_causal_mask()
    with torch.no_grad():
        expected = remote(INPUT_IDS, attention_bias=mask).logits
        first = native(INPUT_IDS[:, :BLOCK], attention_mask=mask[:, :, :BLOCK, :BLOCK], use_cache=True)
        cache = cache_of(first)
        assert isinstance(cache, DynamicCache) and cache.get_seq_length() == BLOCK
        rest = native(
            INPUT_IDS[:, BLOCK:], attention_mask=mask[:, :, BLOCK:], past_key_values=cache, use_cache=True
        )
    assert cache_of(rest) is cache and cache.get_seq_length() == INPUT_IDS.shape[1]
    assert_close(first.logits, expected[:, :BLOCK])
    assert_close(rest.logits, expected[:, BLOCK:])


def test_cache_given_position_ids_and_mask_over_too_few_keys():
    native = native_model()
    positions = torch.arange(BLOCK, INPUT_IDS.shape[1])[None].expand(2, -1)  # [B, T - BLOCK]
    mask = block_causal_mask()
    with torch.no_grad():
        uncached = native(INPUT_IDS, attention_mask=mask).logits
        cache = DynamicCache()
        native(INPUT_IDS[:, :BLOCK], attention_mask=mask[:, :, :BLOCK, :BLOCK], past_key_values=cache)
        rest = native(
            INPUT_IDS[:, BLOCK:],
            attention_mask=mask[:, :, BLOCK:],
            position_ids=positions,
            past_key_values=cache,
        )
        assert_close(rest.logits, uncached[:, BLOCK:])
        gap = torch.cat([torch.arange(5), torch.arange(9, 14)])[None].expand(2, -1)  # [B, T]
        spread = native(INPUT_IDS, position_ids=gap).logits  # RoPE is relative: a constant shift is not seen
        assert not torch.allclose(spread, native(INPUT_IDS).logits, atol=1e-3)  # the positions are read
        with pytest.raises(ValueError, match="keys"):
            native(INPUT_IDS[:, BLOCK:], attention_mask=mask[:, :, BLOCK:, BLOCK:], past_key_values=cache)


# 2. state dicts and checkpoints


def test_state_dict_loads_both_ways_strictly():
    remote, native = remote_model(), native_model()
    assert set(remote.state_dict()) == set(native.state_dict())
    native.load_state_dict(remote.state_dict(), strict=True)
    remote.load_state_dict(native.state_dict(), strict=True)


def test_remote_checkpoint_loads_into_native(tmp_path):
    remote = remote_model()
    remote.save_pretrained(tmp_path, safe_serialization=True)
    native, info = LLaDAModelLM.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        assert_close(native.eval()(INPUT_IDS).logits, remote(INPUT_IDS).logits)


def test_real_size_parameter_names_and_shapes_are_the_checkpoint_s():
    with torch.device("meta"):
        native = LLaDAModelLM(LLaDAConfig(**REAL_CONFIG))
    shapes = {name: tuple(p.shape) for name, p in native.state_dict().items()}
    block = {
        "attn_norm.weight": (4096,),
        "ff_norm.weight": (4096,),
        "q_proj.weight": (4096, 4096),
        "k_proj.weight": (4096, 4096),
        "v_proj.weight": (4096, 4096),
        "attn_out.weight": (4096, 4096),
        "ff_proj.weight": (12288, 4096),
        "up_proj.weight": (12288, 4096),
        "ff_out.weight": (4096, 12288),
    }
    expected = {f"model.transformer.blocks.{i}.{k}": v for i in range(32) for k, v in block.items()}
    expected |= {
        "model.transformer.wte.weight": (126464, 4096),
        "model.transformer.ln_f.weight": (4096,),
        "model.transformer.ff_out.weight": (126464, 4096),
    }
    assert shapes == expected
    modeling = load_remote("llada", "modeling_llada")  # the remote code's names, when it is given
    try:
        remote_config = modeling.LLaDAConfig(**REAL_CONFIG)
        inner = modeling.create_model_config_from_pretrained_config(remote_config)
    except AttributeError as error:
        pytest.skip(f"the remote LLaDAConfig does not build under this transformers: {error}")
    inner.init_device = "meta"
    remote = modeling.LLaDAModelLM(remote_config, model=modeling.LLaDAModel(inner, init_params=False))
    assert {name: tuple(p.shape) for name, p in remote.state_dict().items()} == expected


def test_native_save_load_round_trip(tmp_path):
    native = native_model()
    native.save_pretrained(tmp_path)
    loaded, info = LLaDAModelLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        assert_close(loaded.eval()(INPUT_IDS).logits, native(INPUT_IDS).logits)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "llada" and saved["weight_tying"] is False and saved["rope"] is True


# 3. recorded logits (no remote code needed)


@pytest.mark.parametrize("attn", ATTN)
def test_logits_equal_the_recorded_remote_logits(attn):
    record = torch.load(DATA, weights_only=True)
    assert record["config"] == TINY_CONFIG and record["seed"] == SEED
    native = native_model(attn)
    ids = record["input_ids"]
    with torch.no_grad():
        assert_close(native(ids).logits, record["logits"])
        assert_close(native(ids, attention_mask=record["padding_mask"]).logits, record["logits_padding"])
        mask = block_causal_mask(ids.shape[1], BLOCK, ids.shape[0])
        assert_close(native(ids, attention_mask=mask).logits, record["logits_block_causal"])


# 4. config


def test_real_config_loads_and_round_trips(tmp_path):
    config = LLaDAConfig(**REAL_CONFIG)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (4096, 32, 32)
    assert config.num_key_value_heads == 32 and config.intermediate_size == 12288
    assert config.initializer_range == 0.02 and config.tie_word_embeddings is False
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for key, value in REAL_CONFIG.items():
        if key != "transformers_version":
            assert saved[key] == value, key
    again = LLaDAConfig.from_pretrained(tmp_path)
    assert again.to_dict() == config.to_dict()


def test_default_config_is_llada_8b_and_saves_every_field(tmp_path):
    LLaDAConfig().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for key, value in REAL_CONFIG.items():
        if key not in ("transformers_version", "auto_map", "architectures"):
            assert saved[key] == value, key


def test_remote_and_fast_dllm_config_fields_are_accepted():
    modeling = load_remote("llada", "modeling_llada")
    fields = {f.name for f in dataclasses.fields(modeling.ModelConfig)}
    native = LLaDAConfig()
    assert all(hasattr(native, name) for name in fields)
    LLaDAConfig(**{**REAL_CONFIG, "train_max_sequence_length": 4096})  # Fast-dLLM's extra field


def test_unknown_field_is_refused_by_name():
    with pytest.raises(ValueError, match="qk_layernorm"):
        LLaDAConfig(**REAL_CONFIG, qk_layernorm=True)


@pytest.mark.parametrize(
    "field, value",
    [
        ("alibi", True),
        ("rope", False),
        ("block_type", "sequential"),
        ("block_group_size", 2),
        ("layer_norm_type", "default"),
        ("layer_norm_with_affine", False),
        ("attention_layer_norm", True),
        ("input_emb_norm", True),
        ("scale_logits", True),
        ("activation_type", "swiglu"),
        ("embedding_size", 100),
        ("tie_word_embeddings", True),
    ],
)
def test_unimplemented_value_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        LLaDAConfig(**{**TINY_CONFIG, field: value})


def test_conflicting_heads_are_refused():
    with pytest.raises(ValueError, match="multi_query_attention"):
        LLaDAConfig(**{**TINY_CONFIG, "multi_query_attention": True})


# 5. training


def test_gradient_checkpointing_gives_the_same_gradients():
    labels = torch.randint(0, VOCAB, INPUT_IDS.shape, generator=torch.Generator().manual_seed(1))

    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        model = native_model("sdpa").train()
        if checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.x's name
                model.activation_checkpointing_enable({"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            assert all(block.gradient_checkpointing for block in model.model.transformer["blocks"])
        logits = model(INPUT_IDS, attention_mask=PADDING_MASK, use_cache=True).logits
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain, checkpointed = grads(False), grads(True)
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5, msg=name)


def test_lora_attaches_to_the_attention_projections():
    peft = pytest.importorskip("peft")
    model = native_model()
    lora = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=4, target_modules=["q_proj", "k_proj", "v_proj", "attn_out"], init_lora_weights=False
        ),
    )
    wrapped = [
        name for name, module in lora.named_modules() if isinstance(module, peft.tuners.lora.LoraLayer)
    ]
    assert len(wrapped) == 4 * TINY_CONFIG["n_layers"]
    with torch.no_grad():
        out = lora(input_ids=INPUT_IDS).logits
        base = lora.get_base_model()
        with lora.disable_adapter():
            plain = base(INPUT_IDS).logits
    assert out.shape == (2, 10, VOCAB) and not torch.allclose(out, plain)  # the adapters take part
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


# 6. decoding


class RemoteForDecoding(torch.nn.Module):
    """The remote `LLaDAModelLM` under the keywords dllm_edit's adapters pass: a 4-D `attention_mask`
    goes to the remote's `attention_bias`, its only way of taking one (it takes no position ids and
    no cache, so the adapters pass neither)."""

    def __init__(self, remote: torch.nn.Module) -> None:
        super().__init__()
        self.remote = remote
        self.config = remote.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> Any:
        if attention_mask is not None and attention_mask.dim() == 4:
            return self.remote(input_ids, attention_bias=attention_mask)
        return self.remote(input_ids, attention_mask=attention_mask)


PROMPTS = torch.tensor(
    [[5, 17, 33, 40, 2], [7, 8, 90, 3, 11]]
)  # equal lengths: the remote reads no positions


def decode(model: Any, strategy: str, adapter: str, prompts: torch.Tensor = PROMPTS) -> Any:
    config = dllm_edit.EditGenerationConfig(
        strategies=[build(strategy, BLOCK)],
        block_length=BLOCK,
        max_new_tokens=2 * BLOCK,
        mask_token_id=MASK,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return dllm_edit.generate(
        model, prompts, generation_config=config, adapter=adapter, generator=torch.Generator().manual_seed(0)
    )


@pytest.mark.parametrize("strategy", unmasking_strategies())
def test_native_decodes_as_the_remote_code(strategy):
    remote = RemoteForDecoding(remote_model())
    native = native_model("sdpa")
    try:
        expected = decode(remote, strategy, "bidirectional")
    except (ValueError, TypeError) as refusal:
        if "position_ids" in str(refusal):  # WINO's shadow block: the remote code reads no positions
            assert not (decode(native, strategy, "bidirectional").sequences == MASK).all(dim=1).any()
            return  # its tokens are checked against WINO's own decoder below
        with pytest.raises(type(refusal)):  # refused before any forward: the native must refuse too
            decode(native, strategy, "bidirectional")
        return
    got = decode(native, strategy, "bidirectional")
    assert torch.equal(got.sequences, expected.sequences)
    assert not (got.sequences == MASK).all(dim=1).any()


@pytest.mark.parametrize("adapter", ["bidirectional_dual_cache", "bidirectional_approx_cache"])
@pytest.mark.parametrize("strategy", unmasking_strategies())
def test_native_decodes_with_the_cache_adapters(strategy, adapter):
    """Every unmasking rule decodes on the cached adapters (which the remote code cannot run: it
    takes no transformers Cache), or is refused before any forward."""
    native = native_model("eager")
    calls: list[int] = []
    native.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        out = decode(native, strategy, adapter)
    except (ValueError, TypeError) as refusal:
        assert not calls, f"{strategy} on {adapter} was refused after {len(calls)} forwards: {refusal}"
        return
    assert out.sequences.shape == (2, PROMPTS.shape[1] + 2 * BLOCK)
    assert not (out.sequences[:, PROMPTS.shape[1] :] == MASK).all()


def llada_generate():
    """LLaDA's own `generate` (Fast-dLLM's `llada/generate.py`), importable without its `model` package."""
    import sys
    import types
    from unittest import mock

    import transformers

    name = "_dllm_edit_remote_fastdllm_llada.generate"
    if name not in sys.modules:
        with (
            mock.patch.object(transformers.AutoConfig, "register"),
            mock.patch.object(transformers.AutoModel, "register"),
        ):
            modeling = load_remote(
                "fastdllm_llada", "modeling_llada"
            )  # registers with the Auto classes: not here
        package = types.ModuleType("model")
        package.__path__ = []  # type: ignore[attr-defined]
        with mock.patch.dict(sys.modules, {"model": package, "model.modeling_llada": modeling}):
            return load_remote("fastdllm_llada", "generate")
    return sys.modules[name]


@pytest.mark.parametrize("rule", [dict(steps=4), dict(steps=2), dict(threshold=0.9)])
def test_native_decodes_as_llada_generate_on_the_remote_code(rule):
    """dllm_edit's `llada` mode (and Fast-dLLM's threshold rule) on the native class: LLaDA's own
    `generate` on the remote class, token for token and forward for forward."""
    generate = llada_generate().generate
    remote, native = remote_model(), native_model("sdpa")
    gen, block = 12, BLOCK
    for prompt in PROMPTS:
        ids = prompt[None]
        if "steps" in rule:
            config = dllm_edit.EditGenerationConfig.from_mode(
                "llada",
                block_length=block,
                steps=rule["steps"],
                max_new_tokens=gen,
                mask_token_id=MASK,
                eos_token_id=EOS,
            )
            expected, nfe = generate(
                remote,
                ids,
                steps=rule["steps"] * gen // block,
                gen_length=gen,
                block_length=block,
                mask_id=MASK,
            )
        else:
            # Fast-dLLM's threshold rule, as tests/adapters/test_dual_cache.py writes it
            config = dllm_edit.EditGenerationConfig(
                threshold=rule["threshold"],
                num_to_transfer=1,
                editing_threshold=None,
                max_post_steps=0,
                block_start="prompt_end",
                eos_early_stop=False,
                suppress_mask_token=False,
                block_length=block,
                max_new_tokens=gen,
                mask_token_id=MASK,
                eos_token_id=EOS,
            )
            expected, nfe = generate(
                remote,
                ids,
                steps=gen // block,
                gen_length=gen,
                block_length=block,
                mask_id=MASK,
                threshold=rule["threshold"],
            )
        out = dllm_edit.generate(native, ids, generation_config=config, adapter="bidirectional")
        assert torch.equal(out.sequences, expected)
        assert int(out.num_forwards) == nfe


@pytest.mark.parametrize("attn", ATTN)
def test_native_decodes_wino_as_wino_s_own_decoder(attn):
    """WINO needs position ids (its shadow block repeats the active block's positions), which the
    remote code does not read: the native class under dllm_edit's WINO gives the tokens and forward
    count of the port of WINO's own `decoding_wino` run on the same native class."""
    from dllm_edit.strategies.wino import WINO
    from tests.helpers.llada1 import completions
    from tests.references.wino import decoding_wino

    native = native_model(attn)
    strategy = WINO()
    for bl, gen in ((BLOCK, 2 * BLOCK), (6, 6)):
        config = dllm_edit.EditGenerationConfig(
            unmasking=strategy,
            block_length=bl,
            max_new_tokens=gen,
            block_start="prompt_end",
            editing_threshold=None,
            max_post_steps=0,
            eos_early_stop=False,
            suppress_mask_token=False,
            max_steps_per_block=None,
            output_trace=True,
            mask_token_id=MASK,
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        for prompt in PROMPTS:
            out = dllm_edit.generate(native, prompt[None], generation_config=config, adapter="bidirectional")
            expected, forwards = decoding_wino(
                native,
                prompt[None],
                mask_id=MASK,
                gen_length=gen,
                block_length=bl,
                threshold=strategy.wide_in_threshold.value,
                threshold_back=strategy.narrow_out_threshold.value,
                caps=(strategy.accept_ratio, strategy.min_accept, strategy.max_accept),
            )
            assert completions(out)[0].tolist() == expected[0, prompt.shape[0] :].tolist()
            assert int(out.num_forwards[0]) == forwards
