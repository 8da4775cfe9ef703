"""dllm_edit's native Dream class (`dllm_edit.models.dream`) against the checkpoints' own code.

The reference is the hub's `modeling_dream.py` (the `dllm` repository's copy), loaded through
`tests.helpers.remote_code` when `DLLM_EDIT_REMOTE_CODE_DIR` names it and it builds (transformers
4.x: under 5.x its rotary embedding asks for `ROPE_INIT_FUNCTIONS["default"]`, which is gone, and
those tests skip with that reason). The recorded-logits, config, training and decoding tests run
always.

The tiny config keeps Dream-v0-7B's shape ratios: 7 query heads per key/value head (28 / 4), Qwen2
biases on q/k/v only, untied embeddings, RoPE base 1e6, and every field of the real `config.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers.cache_utils import DynamicCache

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.models.dream import DreamConfig, DreamModel
from tests.helpers.registry import build
from tests.helpers.remote_code import load_remote, seeded_state_dict

DATA = Path(__file__).parent / "data" / "dream_tiny.pt"
SEED = 0
VOCAB, MASK, EOS, PAD, BOS = 128, 127, 2, 0, 1
ATTN = ("eager", "sdpa")
BLOCK = 4

#: The fields of Dream-v0-Instruct-7B's config.json, at the real values except the sizes.
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["DreamModel"],
    "attention_dropout": 0.0,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "hidden_act": "silu",
    "hidden_size": 112,  # 14 heads x head_dim 8
    "initializer_range": 0.02,
    "intermediate_size": 296,
    "mask_token_id": MASK,
    "max_position_embeddings": 256,
    "max_window_layers": 2,
    "model_type": "Dream",
    "num_attention_heads": 14,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pad_token_id": PAD,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": False,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": VOCAB,
}

#: Dream-v0-Instruct-7B's config.json (Qwen2.5-7B's fields plus Dream's), as the hub serves it.
REAL_CONFIG: dict[str, Any] = {
    **TINY_CONFIG,
    "auto_map": {
        "AutoConfig": "configuration_dream.DreamConfig",
        "AutoModel": "modeling_dream.DreamModel",
    },
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "mask_token_id": 151666,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "pad_token_id": 151643,
    "sliding_window": 131072,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2",
    "vocab_size": 152064,
}

INPUT_IDS = torch.randint(3, MASK + 1, (2, 12), generator=torch.Generator().manual_seed(1))  # [B, T]


def block_causal_mask(batch: int = 2, length: int = 12, block: int = BLOCK) -> torch.Tensor:
    """Bool `[B, 1, T, T]`: a query sees the keys of its own block and of the blocks before it."""
    blocks = torch.arange(length) // block  # [T]
    allowed = blocks[None, :] <= blocks[:, None]  # [T, T]
    return allowed[None, None].expand(batch, 1, -1, -1).clone()  # [B, 1, T, T]


def additive(mask: torch.Tensor) -> torch.Tensor:
    """The additive float form (0 / float32 min) of a boolean mask."""
    return torch.where(mask, 0.0, torch.finfo(torch.float32).min)


def native_model(attn: str = "sdpa", **overrides: Any) -> DreamModel:
    """The native class on the tiny config with the seeded weights, eval mode."""
    model = DreamModel(DreamConfig(**{**TINY_CONFIG, **overrides}, attn_implementation=attn)).eval()
    model.load_state_dict(seeded_state_dict(model, SEED))
    return model


def remote_classes() -> tuple[type, type]:
    """The remote `(DreamConfig, DreamModel)`; skips when the remote code is not available."""
    modeling = load_remote("dream", "modeling_dream")
    return modeling.DreamConfig, modeling.DreamModel


def remote_model() -> torch.nn.Module:
    """The remote class with the seeded weights (SDPA: the attention its code always runs); skips
    with the reason when it does not build under the installed transformers."""
    config_class, model_class = remote_classes()
    try:
        model = model_class(config_class(**TINY_CONFIG, attn_implementation="sdpa")).eval()
    except Exception as error:  # transformers 5.x: ROPE_INIT_FUNCTIONS["default"] is gone
        pytest.skip(f"the remote DreamModel does not build here: {type(error).__name__}: {error}")
    model.load_state_dict(seeded_state_dict(model, SEED))
    return model


def cache_of(output: Any) -> Any:
    """The returned cache (`cache` on transformers 5.2x outputs, `past_key_values` before)."""
    return output.get("cache", output.get("past_key_values"))


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


# 1. logits against the remote code -----------------------------------------------------------------


@pytest.mark.parametrize("attn", ATTN)
def test_logits_match_remote_full_attention(attn):
    remote, native = remote_model(), native_model(attn)
    labels = INPUT_IDS.clone()
    shifted_positions = torch.arange(12)[None].expand(2, -1) + torch.tensor([[5], [9]])  # [B, T]
    with torch.no_grad():
        want = remote(INPUT_IDS, labels=labels, output_hidden_states=True)
        got = native(INPUT_IDS, labels=labels, output_hidden_states=True)
        close(got.logits, want.logits)
        close(got.loss, want.loss)
        assert len(got.hidden_states) == len(want.hidden_states) == 3
        for g, w in zip(got.hidden_states, want.hidden_states, strict=True):
            close(g, w)
        ones = torch.ones_like(INPUT_IDS)  # an all-ones 2-D mask is full attention
        close(native(INPUT_IDS, attention_mask=ones).logits, want.logits)
        close(
            native(INPUT_IDS, position_ids=shifted_positions).logits,
            remote(INPUT_IDS, position_ids=shifted_positions).logits,
        )
        close(native(INPUT_IDS, logits_to_keep=3).logits, want.logits[:, -3:])


@pytest.mark.parametrize("attn", ATTN)
def test_logits_match_remote_with_padding_mask(attn):
    """Left padding: the tokens' logits match. The remote code also masks the padding *queries*
    (all-False rows), so the padding positions' own outputs differ; nothing reads them."""
    remote, native = remote_model(), native_model(attn)
    mask = torch.ones_like(INPUT_IDS)
    mask[0, :3] = 0
    with torch.no_grad():
        want = remote(INPUT_IDS, attention_mask=mask).logits
        got = native(INPUT_IDS, attention_mask=mask).logits
    close(got[0, 3:], want[0, 3:])
    close(got[1], want[1])
    assert not torch.allclose(got[0, 3:], native(INPUT_IDS).logits[0, 3:].detach(), atol=1e-3)


@pytest.mark.parametrize("attn", ATTN)
def test_logits_match_remote_with_block_causal_mask(attn):
    remote, native = remote_model(), native_model(attn)
    mask = block_causal_mask()
    with torch.no_grad():
        want = remote(INPUT_IDS, attention_mask=mask).logits
        close(native(INPUT_IDS, attention_mask=mask).logits, want)
        close(native(INPUT_IDS, attention_mask=additive(mask)).logits, want)
        assert not torch.allclose(want, remote(INPUT_IDS).logits, atol=1e-3)


@pytest.mark.parametrize("attn", ATTN)
def test_cached_forward_matches_remote(attn):
    """The first block in a `DynamicCache`, then the rest: equal to the remote code doing the same."""
    remote, native = remote_model(), native_model(attn)
    mask, prefix = block_causal_mask(), BLOCK
    outs = []
    with torch.no_grad():
        for model in (remote, native):
            cache = DynamicCache()
            model(
                INPUT_IDS[:, :prefix],
                attention_mask=mask[:, :, :prefix, :prefix],
                past_key_values=cache,
                use_cache=True,
            )
            assert cache.get_seq_length() == prefix
            rest = model(
                INPUT_IDS[:, prefix:],
                attention_mask=mask[:, :, prefix:],
                past_key_values=cache,
                use_cache=True,
            )
            assert cache.get_seq_length() == INPUT_IDS.shape[1]
            outs.append(rest.logits)
    close(outs[1], outs[0])


@pytest.mark.parametrize("attn", ATTN)
def test_cached_forward_equals_uncached(attn):
    """Native only: under a block-causal mask the prefix's keys/values do not depend on the rest, so
    prefix-in-cache then the rest equals one forward; `use_cache` with no cache returns a new one."""
    native = native_model(attn)
    mask, prefix = block_causal_mask(), 2 * BLOCK
    with torch.no_grad():
        full = native(INPUT_IDS, attention_mask=mask).logits
        first = native(INPUT_IDS[:, :prefix], attention_mask=mask[:, :, :prefix, :prefix], use_cache=True)
        assert isinstance(cache_of(first), DynamicCache)
        assert cache_of(first).get_seq_length() == prefix
        close(first.logits, full[:, :prefix])
        rest = native(
            INPUT_IDS[:, prefix:], attention_mask=mask[:, :, prefix:], past_key_values=cache_of(first)
        )
        close(rest.logits, full[:, prefix:])
        # a 2-D padding mask over the cached and new keys works with a cache too
        keys = torch.ones_like(INPUT_IDS)
        cache = DynamicCache()
        native(INPUT_IDS[:, :prefix], past_key_values=cache, use_cache=True)
        after = native(INPUT_IDS[:, prefix:], attention_mask=keys, past_key_values=cache).logits
        assert after.shape == (2, INPUT_IDS.shape[1] - prefix, VOCAB)
        assert cache_of(native(INPUT_IDS)) is None  # Dream's default: use_cache=False
        cache = DynamicCache()  # transformers 5.2x's name for the argument
        native(INPUT_IDS[:, :prefix], cache=cache)
        assert cache.get_seq_length() == prefix


def test_eager_and_sdpa_agree():
    mask = block_causal_mask()
    with torch.no_grad():
        eager, sdpa = native_model("eager"), native_model("sdpa")
        close(eager(INPUT_IDS).logits, sdpa(INPUT_IDS).logits)
        close(eager(INPUT_IDS, attention_mask=mask).logits, sdpa(INPUT_IDS, attention_mask=mask).logits)


def test_flex_attention_is_refused_at_construction():
    """transformers' flex backend takes a BlockMask, not the tensor masks the adapters build (on the
    CPU it crashes the process on them): the class declares no flex support, so transformers refuses it."""
    with pytest.raises(ValueError, match="flex_attention"):
        native_model("flex_attention")


# 2. state dicts and checkpoints ---------------------------------------------------------------------


def test_state_dict_loads_both_ways_and_remote_checkpoint_loads(tmp_path):
    remote, native = remote_model(), native_model("sdpa")
    assert sorted(remote.state_dict()) == sorted(native.state_dict())
    fresh = DreamModel(DreamConfig(**TINY_CONFIG))
    result = fresh.load_state_dict(remote.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    config_class, model_class = remote_classes()
    back = model_class(config_class(**TINY_CONFIG, attn_implementation="sdpa")).eval()
    result = back.load_state_dict(native.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys

    remote.save_pretrained(tmp_path)
    loaded, info = DreamModel.from_pretrained(tmp_path, output_loading_info=True, attn_implementation="sdpa")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info.get("mismatched_keys")
    assert loaded.config.mask_token_id == MASK and loaded.config.model_type == "Dream"
    with torch.no_grad():
        close(loaded.eval()(INPUT_IDS).logits, remote(INPUT_IDS).logits)


def test_native_checkpoint_round_trip(tmp_path):
    """Always run: save_pretrained -> from_pretrained, zero missing/unexpected keys, same logits."""
    native = native_model("eager")
    native.save_pretrained(tmp_path)
    loaded, info = DreamModel.from_pretrained(tmp_path, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        close(loaded.eval()(INPUT_IDS).logits, native(INPUT_IDS).logits)


def test_tied_embeddings_share_and_round_trip(tmp_path):
    model = DreamModel(DreamConfig(**{**TINY_CONFIG, "tie_word_embeddings": True}))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    loaded, info = DreamModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight)


# 3. recorded logits (always run) --------------------------------------------------------------------


@pytest.mark.parametrize("attn", ATTN)
def test_logits_equal_recorded_reference(attn):
    recorded = torch.load(DATA, weights_only=True)
    assert recorded["config"] == TINY_CONFIG and recorded["seed"] == SEED
    assert torch.equal(recorded["input_ids"], INPUT_IDS)
    native = native_model(attn)
    with torch.no_grad():
        close(native(INPUT_IDS).logits, recorded["logits"])
        close(native(INPUT_IDS, attention_mask=block_causal_mask()).logits, recorded["logits_block_causal"])


# 4. config ------------------------------------------------------------------------------------------


def test_real_config_is_accepted():
    config = DreamConfig(**REAL_CONFIG)
    assert (config.hidden_size, config.num_key_value_heads, config.vocab_size) == (3584, 4, 152064)
    assert config.rope_theta == 1e6 and config.sliding_window is None and config.mask_token_id == 151666
    assert config.tie_word_embeddings is False and config.use_cache is False


def test_unknown_field_is_refused_by_name():
    with pytest.raises(ValueError, match="dream_extra_knob"):
        DreamConfig(**TINY_CONFIG, dream_extra_knob=3)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("use_sliding_window", True),
        ("rope_scaling", {"rope_type": "linear", "factor": 2.0}),
        ("rope_scaling", {"type": "dynamic", "factor": 2.0}),
        ("rope_scaling", {"rope_type": "default", "partial_rotary_factor": 0.5}),
        ("rope_parameters", {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}),
        ("use_mrope", True),
    ],
)
def test_unimplemented_values_are_refused(field, value):
    with pytest.raises(ValueError, match="not implemented by dllm_edit's native class"):
        DreamConfig(**{**TINY_CONFIG, field: value})


def test_default_rope_dicts_are_accepted():
    for rope in ({"rope_type": "default"}, {"type": "default"}, {"rope_type": "default", "rope_theta": 1e6}):
        assert DreamConfig(**{**TINY_CONFIG, "rope_scaling": rope}).rope_theta == 1e6
    with pytest.raises(ValueError, match="disagree"):
        DreamConfig(**{**TINY_CONFIG, "rope_scaling": {"rope_type": "default", "rope_theta": 10.0}})


def test_config_round_trip(tmp_path):
    config = DreamConfig(**REAL_CONFIG)
    config.save_pretrained(tmp_path)
    loaded = DreamConfig.from_pretrained(tmp_path)
    for key in (
        "hidden_size",
        "num_key_value_heads",
        "rope_theta",
        "mask_token_id",
        "pad_token_id",
        "sliding_window",
        "max_window_layers",
        "use_sliding_window",
        "tie_word_embeddings",
        "vocab_size",
    ):
        assert getattr(loaded, key) == getattr(config, key), key
    assert loaded.model_type == "Dream"
    loaded.save_pretrained(tmp_path / "again")  # a second round trip (5.x writes rope_parameters)
    assert DreamConfig.from_pretrained(tmp_path / "again").to_dict() == loaded.to_dict()


# 5. training ----------------------------------------------------------------------------------------


def _loss_and_grads(model: DreamModel) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(INPUT_IDS, labels=INPUT_IDS, attention_mask=block_causal_mask()).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attn", ATTN)
def test_gradient_checkpointing_gives_the_same_grads(attn):
    model = native_model(attn).train()
    calls: list[int] = []
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    loss, grads = _loss_and_grads(model)
    assert len(calls) == 1
    # transformers 5.x renamed it (the old name still works, with a deprecation warning)
    enable = getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)
    enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    loss_gc, grads_gc = _loss_and_grads(model)
    assert len(calls) == 3  # the checkpointed layer ran again in the backward pass (the pre-hook
    # fires even where torch's non-reentrant checkpoint stops the recomputation early)
    close(loss_gc, loss)
    assert grads.keys() == grads_gc.keys() and len(grads) == len(list(model.parameters()))
    for name in grads:
        close(grads_gc[name], grads[name])


def test_lora_attaches_to_attention_projections():
    peft = pytest.importorskip("peft")
    model = native_model("sdpa")
    with torch.no_grad():
        base = model(INPUT_IDS).logits
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    lora = peft.get_peft_model(model, config)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert (
        sum(".self_attn." in n for n in trainable)
        == len(trainable)
        == 2 * 4 * TINY_CONFIG["num_hidden_layers"]
    )
    with torch.no_grad():
        close(lora(input_ids=INPUT_IDS).logits, base)  # LoRA's B starts at zero
    lora.train()
    lora(input_ids=INPUT_IDS, labels=INPUT_IDS).loss.backward()
    assert all(p.grad is not None for n, p in lora.named_parameters() if p.requires_grad and "lora_A" in n)


# 6. decoding ----------------------------------------------------------------------------------------


def _decode(
    model: torch.nn.Module, rule: str, adapter: str = "shifted", use_cache: bool = False
) -> torch.Tensor:
    ids = torch.tensor([[PAD, PAD, 5, 6, 7], [8, 9, 10, 11, 12]])  # [B, W] left-padded
    mask = (ids != PAD).long()  # [B, W]
    config = dllm_edit.EditGenerationConfig(
        strategies=[build(rule, BLOCK)],
        block_length=BLOCK,
        max_new_tokens=2 * BLOCK,
        mask_token_id=MASK,
        eos_token_id=EOS,
        pad_token_id=PAD,
        use_cache=use_cache,
    )
    out = dllm_edit.generate(
        model,
        ids,
        attention_mask=mask,
        generation_config=config,
        adapter=adapter,
        generator=torch.Generator().manual_seed(0),
    )
    return out.sequences


def _decode_or_skip(model: torch.nn.Module, rule: str, adapter: str = "shifted", **kw: Any) -> torch.Tensor:
    try:
        return _decode(model, rule, adapter, **kw)
    except (ValueError, TypeError) as error:  # refused before any forward (e.g. WINO's shadow block)
        pytest.skip(f"the {adapter} adapter refuses {rule}: {error}")


@pytest.mark.parametrize("rule", unmasking_strategies())
def test_decoding_native_runs_on_eager_and_sdpa(rule):
    """Always run: every rule the shifted adapter takes decodes to the end, the same tokens under both
    attention backends (eager gets additive masks, SDPA boolean ones)."""
    got = _decode_or_skip(native_model("sdpa"), rule)
    assert got.shape == (2, 5 + 2 * BLOCK) and not (got == MASK).any()
    assert torch.equal(_decode(native_model("eager"), rule), got)


@pytest.mark.parametrize("rule", unmasking_strategies())
def test_decoding_native_matches_remote(rule):
    remote = remote_model()
    got = _decode_or_skip(native_model("sdpa"), rule)  # SDPA: the shifted adapter sends it boolean masks
    want = _decode(remote, rule)
    assert torch.equal(got, want), f"{rule}: native {got.tolist()} != remote {want.tolist()}"


def test_shifted_adapter_is_detected():
    """Auto-detection picks the shifted adapter for the checkpoints' `model_type` "Dream"."""
    from dllm_edit.adapters import detect_adapter

    assert detect_adapter(native_model("sdpa")) == "shifted"


@pytest.mark.parametrize("rule", unmasking_strategies())
def test_kv_cache_under_the_block_causal_shifted_adapter(rule):
    """The native class's KV cache through dllm_edit's cached decoding: under the
    `block_causal_shifted` adapter (block-causal attention, shifted read; not Dream's own decoding,
    which is full attention) cached and uncached decoding give the same tokens."""
    native = native_model("sdpa")
    cached = _decode_or_skip(native, rule, "block_causal_shifted", use_cache=True)
    assert not (cached == MASK).any()
    assert torch.equal(cached, _decode(native, rule, "block_causal_shifted", use_cache=False))
