"""dllm_edit's native LLaDA2.x class (`dllm_edit.models.llada2_moe`) against the checkpoints' own code.

Two references, loaded through `tests.helpers.remote_code` when `DLLM_EDIT_REMOTE_CODE_DIR` holds them:
`llada2_moe/` (LLaDA2.0's hub `modeling_llada2_moe.py`, the `dllm` repository's copy) and, when the
folder also has it, `llada21_moe/` (the `dllm` repository's LLaDA2.1 copy,
`dllm/pipelines/llada21/models/`, `modeling_llada21_moe.py`; the hub's LLaDA2.1 checkpoints say
`model_type: llada2_moe`). Both compute the same model; they differ in the masks they accept:

* LLaDA2.0 under eager attention reads a 4-D mask as 1 = attend, 0 = hidden (its own `generate()`
  passes an additive mask, which it then misreads), and under SDPA as bool or additive; LLaDA2.1
  reads bool or additive under every backend. The native class takes bool or additive under every
  backend; the tests give the LLaDA2.0 eager path the 0/1 form of the same mask.
* With no mask or a 2-D mask, both build transformers' *causal* mask (LLaDA2.0 eager always, SDPA
  when there is padding or a cache); the native class is bidirectional (None) and hides padding keys
  only (2-D). The tests give the remote code the equivalent 4-D mask.

The recorded-logits, config, training and native decoding tests run always. The tiny config keeps
LLaDA2.0-mini's layout: 4 query heads per key/value head (16 / 4), head_dim = hidden / heads, half of
each head rotated, QK-norm, no biases, 8 expert groups of which 4 are kept, one shared expert, the
first layer dense, sigmoid routing with an expert bias, routed scaling 2.5, and every field of the
real `config.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers.cache_utils import DynamicCache

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.models.llada2_moe import (
    LLaDA2MoeConfig,
    LLaDA2MoeForCausalLM,
    LLaDA2MoeModel,
    LLaDA2MoeModelLM,
)
from tests.helpers.registry import build
from tests.helpers.remote_code import load_remote, seeded_state_dict
from tests.helpers.training import enable_activation_checkpointing

DATA = Path(__file__).parent / "data" / "llada2_moe_tiny.pt"
SEED = 0
VOCAB, MASK, EOS, PAD = 48, 47, 1, 0
ATTN = ("eager", "sdpa")
BLOCK = 4
#: remote family folder -> its modeling module
REMOTES = {"llada2_moe": "modeling_llada2_moe", "llada21_moe": "modeling_llada21_moe"}

#: LLaDA2.0-mini's config.json (inclusionAI/LLaDA2.0-mini; LLaDA2.1-mini has the same fields).
REAL_CONFIG: dict[str, Any] = {
    "architectures": ["LLaDA2MoeModelLM"],
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
        "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
        "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
    },
    "num_hidden_layers": 20,
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "model_type": "llada2_moe",
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_experts_per_tok": 8,
    "norm_head": False,
    "num_attention_heads": 16,
    "num_experts": 256,
    "num_key_value_heads": 4,
    "rope_theta": 600000,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.52.3",
    "use_bias": False,
    "use_rmsnorm": True,
    "rms_norm_eps": 1e-06,
    "head_dim": 128,
    "num_shared_experts": 1,
    "use_cache": False,
    "use_qkv_bias": False,
    "embedding_dropout": 0.0,
    "norm_softmax": False,
    "output_dropout": 0.0,
    "vocab_size": 157184,
    "rotary_dim": 64,
    "using_split_qkv_in_self_attention": False,
    "router_dtype": "fp32",
    "moe_router_enable_expert_bias": True,
    "routed_scaling_factor": 2.5,
    "n_group": 8,
    "topk_group": 4,
    "score_function": "sigmoid",
    "initializer_range": 0.02,
    "max_window_layers": 28,
    "output_router_logits": False,
    "pad_token_id": 156892,
    "partial_rotary_factor": 0.5,
    "use_sliding_window": False,
}

#: REAL_CONFIG scaled down: the same fields and ratios, small sizes.
TINY_CONFIG: dict[str, Any] = {
    **REAL_CONFIG,
    "num_hidden_layers": 3,  # one dense layer, two MoE layers
    "hidden_size": 32,
    "intermediate_size": 80,  # 2.5 x hidden
    "moe_intermediate_size": 8,  # hidden / 4
    "num_experts_per_tok": 4,
    "num_attention_heads": 4,
    "num_experts": 32,  # 8 groups of 4
    "num_key_value_heads": 1,
    "head_dim": 8,
    "rotary_dim": 4,
    "max_position_embeddings": 256,
    "vocab_size": VOCAB,
    "pad_token_id": PAD,
    "torch_dtype": "float32",
}

#: The other code paths: biases on `query_key_value` and `dense`, no QK-norm, one expert per token
#: (no weight normalisation), two shared experts, two dense layers.
BIASED_CONFIG: dict[str, Any] = {
    **TINY_CONFIG,
    "use_qkv_bias": True,
    "use_bias": True,
    "use_qk_norm": False,
    "num_experts_per_tok": 1,
    "num_shared_experts": 2,
    "first_k_dense_replace": 2,
}
CONFIGS = {"tiny": TINY_CONFIG, "biased": BIASED_CONFIG}

INPUT_IDS = torch.randint(2, MASK, (2, 12), generator=torch.Generator().manual_seed(1))  # [B, T]


def block_causal_mask(batch: int = 2, length: int = 12, block: int = BLOCK) -> torch.Tensor:
    """Bool `[B, 1, T, T]`: a query sees the keys of its own block and of the blocks before it."""
    blocks = torch.arange(length) // block  # [T]
    allowed = blocks[None, :] <= blocks[:, None]  # [T, T]
    return allowed[None, None].expand(batch, 1, -1, -1).clone()  # [B, 1, T, T]


def additive(mask: torch.Tensor) -> torch.Tensor:
    """The additive float form (0 / float32 min) of a boolean mask."""
    return torch.where(mask, 0.0, torch.finfo(torch.float32).min)


def native_model(attn: str = "sdpa", config: str = "tiny", std: float = 0.1) -> LLaDA2MoeForCausalLM:
    """The native class on a tiny config with the seeded weights, eval mode."""
    model = LLaDA2MoeForCausalLM(LLaDA2MoeConfig(**CONFIGS[config], attn_implementation=attn)).eval()
    model.load_state_dict(seeded_state_dict(model, SEED, std=std))
    return model


def remote_classes(family: str = "llada2_moe") -> tuple[type, type]:
    """The remote `(LLaDA2MoeConfig, LLaDA2MoeModelLM)`; skips when the remote code is not available."""
    modeling = load_remote(family, REMOTES[family])
    return modeling.LLaDA2MoeConfig, modeling.LLaDA2MoeModelLM


def remote_model(
    family: str = "llada2_moe", attn: str = "sdpa", config: str = "tiny", std: float = 0.1
) -> torch.nn.Module:
    """The remote class with the seeded weights, eval mode; skips with the reason when it does not
    build under the installed transformers."""
    config_class, model_class = remote_classes(family)
    try:
        model = model_class(config_class(**CONFIGS[config], attn_implementation=attn)).eval()
    except Exception as error:  # transformers 5.x: ROPE_INIT_FUNCTIONS["default"] is gone
        pytest.skip(f"the remote {family} class does not build here: {type(error).__name__}: {error}")
    model.load_state_dict(seeded_state_dict(model, SEED, std=std))
    return model


def remote_mask(allowed: torch.Tensor, family: str, attn: str) -> torch.Tensor:
    """The 4-D mask form the remote code reads as `allowed` (True = attend): bool, except for
    LLaDA2.0's eager path, which reads 1.0 = attend, 0.0 = hidden."""
    if family == "llada2_moe" and attn == "eager":
        return allowed.float()
    return allowed


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


FAMILY_ATTN = [(family, attn) for family in REMOTES for attn in ATTN]


# 1. logits against the remote code -----------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize(("family", "attn"), FAMILY_ATTN)
def test_logits_match_remote_full_attention(family, attn, config):
    """No mask: every token attends to every token (the remote code gets the all-True 4-D mask)."""
    remote, native = remote_model(family, attn, config), native_model(attn, config)
    everything = torch.ones(2, 1, 12, 12, dtype=torch.bool)
    positions = torch.arange(12)[None].expand(2, -1) + torch.tensor([[5], [9]])  # [B, T]
    with torch.no_grad():
        want = remote(
            INPUT_IDS,
            attention_mask=remote_mask(everything, family, attn),
            labels=INPUT_IDS,
            output_hidden_states=True,
        )
        got = native(INPUT_IDS, labels=INPUT_IDS, output_hidden_states=True)
        close(got.logits, want.logits)
        close(got.loss, want.loss)
        assert len(got.hidden_states) == len(want.hidden_states) == CONFIGS[config]["num_hidden_layers"] + 1
        for g, w in zip(got.hidden_states, want.hidden_states, strict=True):
            close(g, w)
        close(native(INPUT_IDS, attention_mask=torch.ones_like(INPUT_IDS)).logits, want.logits)
        close(native(INPUT_IDS, attention_mask=everything).logits, want.logits)
        close(
            native(INPUT_IDS, position_ids=positions).logits,
            remote(
                INPUT_IDS, attention_mask=remote_mask(everything, family, attn), position_ids=positions
            ).logits,
        )
        close(native(INPUT_IDS, logits_to_keep=3).logits, want.logits[:, -3:])
        if attn == "sdpa":  # the remote SDPA path with no mask (no padding, no cache) is bidirectional too
            close(remote(INPUT_IDS).logits, want.logits)


@pytest.mark.parametrize(("family", "attn"), FAMILY_ATTN)
def test_logits_match_remote_with_padding_mask(family, attn):
    """Left padding as a 2-D mask: the padding keys are hidden from every query (the remote code gets
    the same as a 4-D mask: its own 2-D path would add a causal mask)."""
    remote, native = remote_model(family, attn), native_model(attn)
    keys = torch.ones_like(INPUT_IDS)
    keys[0, :3] = 0
    allowed = keys.bool()[:, None, None, :].expand(-1, 1, 12, -1)  # [B, 1, T, T]
    with torch.no_grad():
        want = remote(INPUT_IDS, attention_mask=remote_mask(allowed, family, attn)).logits
        got = native(INPUT_IDS, attention_mask=keys).logits
        close(got, want)
        assert not torch.allclose(got[0, 3:], native(INPUT_IDS).logits[0, 3:], atol=1e-3)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize(("family", "attn"), FAMILY_ATTN)
def test_logits_match_remote_with_block_causal_mask(family, attn, config):
    """The block-causal 4-D mask LLaDA2.x decodes with, given as bool and as additive floats."""
    remote, native = remote_model(family, attn, config), native_model(attn, config)
    mask = block_causal_mask()
    with torch.no_grad():
        want = remote(INPUT_IDS, attention_mask=remote_mask(mask, family, attn)).logits
        close(native(INPUT_IDS, attention_mask=mask).logits, want)
        close(native(INPUT_IDS, attention_mask=additive(mask)).logits, want)
        assert not torch.allclose(want, native(INPUT_IDS).logits, atol=1e-3)
        if family == "llada21_moe" or attn == "sdpa":  # the remote's own additive form
            close(remote(INPUT_IDS, attention_mask=additive(mask)).logits, want)


@pytest.mark.parametrize("full", [False, True], ids=["block_causal", "full"])
@pytest.mark.parametrize(("family", "attn"), FAMILY_ATTN)
def test_cached_forward_matches_remote(family, attn, full):
    """The first block in a `DynamicCache`, then the rest: equal to the remote code doing the same."""
    remote, native = remote_model(family, attn), native_model(attn)
    mask, prefix = block_causal_mask(), BLOCK
    if full:
        mask = torch.ones_like(mask)
    outs = []
    with torch.no_grad():
        for model, model_mask in ((remote, remote_mask(mask, family, attn)), (native, mask)):
            cache = DynamicCache()
            model(
                INPUT_IDS[:, :prefix],
                attention_mask=model_mask[:, :, :prefix, :prefix],
                past_key_values=cache,
                use_cache=True,
            )
            assert cache.get_seq_length() == prefix
            rest = model(
                INPUT_IDS[:, prefix:],
                attention_mask=model_mask[:, :, prefix:],
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
        cache = first.past_key_values
        assert isinstance(cache, DynamicCache) and cache.get_seq_length() == prefix
        close(first.logits, full[:, :prefix])
        rest = native(
            INPUT_IDS[:, prefix:], attention_mask=additive(mask)[:, :, prefix:], past_key_values=cache
        )
        close(rest.logits, full[:, prefix:])
        # a 2-D padding mask over the cached and new keys means the same as its 4-D form
        keys = torch.ones_like(INPUT_IDS)
        keys[0, :2] = 0
        allowed = keys.bool()[:, None, None, :].expand(-1, 1, 12 - prefix, -1)  # [B, 1, T - prefix, T]
        rests = []
        for rest_mask in (keys, allowed):
            cache = DynamicCache()
            native(
                INPUT_IDS[:, :prefix], attention_mask=keys[:, :prefix], past_key_values=cache, use_cache=True
            )
            rests.append(
                native(INPUT_IDS[:, prefix:], attention_mask=rest_mask, past_key_values=cache).logits
            )
        close(rests[0], rests[1])
        assert native(INPUT_IDS).past_key_values is None  # the checkpoints' default: use_cache=False


def test_eager_and_sdpa_agree():
    mask = block_causal_mask()
    with torch.no_grad():
        eager, sdpa = native_model("eager"), native_model("sdpa")
        close(eager(INPUT_IDS).logits, sdpa(INPUT_IDS).logits)
        close(eager(INPUT_IDS, attention_mask=mask).logits, sdpa(INPUT_IDS, attention_mask=mask).logits)


def test_return_tuple_and_base_model():
    native = native_model("sdpa")
    with torch.no_grad():
        logits = native(INPUT_IDS).logits
        assert torch.equal(native(INPUT_IDS, return_dict=False)[0], logits)
        hidden = native.get_decoder()(INPUT_IDS).last_hidden_state  # [B, T, H]
        close(native.lm_head(hidden), logits)
        embeds = native.get_input_embeddings()(INPUT_IDS)  # [B, T, H]
        close(native(inputs_embeds=embeds).logits, logits)
    assert LLaDA2MoeModelLM is LLaDA2MoeForCausalLM and isinstance(native.model, LLaDA2MoeModel)
    with pytest.raises(ValueError, match="exactly one"):
        native(INPUT_IDS, inputs_embeds=embeds)


def test_routing_matches_a_per_token_restatement():
    """The vectorised router and expert dispatch against a per-token loop written from the
    description: sigmoid scores, groups ranked by the sum of their two best biased scores, top-k
    among the kept groups' biased scores, bias-free weights normalised and scaled, shared expert."""
    native = native_model("sdpa")
    block = native.model.layers[1].mlp
    config = native.config
    hidden = torch.randn(7, config.hidden_size, generator=torch.Generator().manual_seed(3))  # [N, H]
    with torch.no_grad():
        got = block(hidden[None])[0]  # [N, H]
        for n, x in enumerate(hidden):
            scores = torch.sigmoid(block.gate.weight @ x)  # [E]
            biased = (scores + block.gate.expert_bias).view(config.n_group, -1)  # [G, E/G]
            group_rank = biased.topk(2, dim=-1).values.sum(-1).argsort(descending=True)[: config.topk_group]
            candidates = [
                g * biased.shape[1] + j for g in group_rank.tolist() for j in range(biased.shape[1])
            ]
            flat = biased.reshape(-1)
            chosen = sorted(candidates, key=lambda e: -flat[e].item())[: config.num_experts_per_tok]
            weights = scores[chosen] / scores[chosen].sum() * config.routed_scaling_factor
            want = sum(w * block.experts[e](x) for e, w in zip(chosen, weights, strict=True))
            want = want + block.shared_experts(x)
            close(got[n], want)


# 2. state dicts and checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("family", REMOTES)
def test_state_dict_loads_both_ways_and_remote_checkpoint_loads(family, tmp_path):
    remote, native = remote_model(family), native_model("sdpa")
    assert sorted(remote.state_dict()) == sorted(native.state_dict())
    fresh = LLaDA2MoeForCausalLM(LLaDA2MoeConfig(**TINY_CONFIG))
    result = fresh.load_state_dict(remote.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    config_class, model_class = remote_classes(family)
    back = model_class(config_class(**TINY_CONFIG, attn_implementation="sdpa")).eval()
    result = back.load_state_dict(native.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys

    remote.save_pretrained(tmp_path)
    loaded, info = LLaDA2MoeForCausalLM.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="sdpa"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info.get("mismatched_keys")
    assert loaded.config.n_group == 8 and loaded.config.score_function == "sigmoid"
    with torch.no_grad():
        mask = block_causal_mask()
        close(
            loaded.eval()(INPUT_IDS, attention_mask=mask).logits,
            remote(INPUT_IDS, attention_mask=mask).logits,
        )


@pytest.mark.parametrize("family", REMOTES)
def test_bfloat16_checkpoint_matches_remote(family, tmp_path):
    """Both classes loaded from the same checkpoint in bfloat16 (as the hub checkpoints are used):
    the same logits (the remote keeps its RoPE frequencies in float32 when loaded so, as the native
    class computes them)."""
    remote_model(family).save_pretrained(tmp_path)
    _, model_class = remote_classes(family)
    remote = model_class.from_pretrained(tmp_path, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    native = LLaDA2MoeForCausalLM.from_pretrained(
        tmp_path, dtype=torch.bfloat16, attn_implementation="sdpa"
    ).eval()
    assert native.dtype == torch.bfloat16
    with torch.no_grad():
        for mask in (None, block_causal_mask()):
            want = remote(INPUT_IDS, attention_mask=mask).logits
            torch.testing.assert_close(native(INPUT_IDS, attention_mask=mask).logits, want, atol=1e-6, rtol=0)


def test_native_checkpoint_round_trip(tmp_path):
    """Always run: save_pretrained -> from_pretrained, zero missing/unexpected keys (the expert bias
    buffers included), same logits."""
    native = native_model("eager")
    native.save_pretrained(tmp_path)
    loaded, info = LLaDA2MoeForCausalLM.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert torch.equal(
        loaded.model.layers[1].mlp.gate.expert_bias, native.model.layers[1].mlp.gate.expert_bias
    )
    with torch.no_grad():
        close(loaded.eval()(INPUT_IDS).logits, native(INPUT_IDS).logits)


def test_tied_embeddings_share_and_round_trip(tmp_path):
    model = LLaDA2MoeForCausalLM(LLaDA2MoeConfig(**{**TINY_CONFIG, "tie_word_embeddings": True}))
    assert model.lm_head.weight is model.model.word_embeddings.weight
    model.save_pretrained(tmp_path)
    loaded, info = LLaDA2MoeForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert loaded.lm_head.weight is loaded.model.word_embeddings.weight
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
    config = LLaDA2MoeConfig(**REAL_CONFIG)
    assert (config.hidden_size, config.num_key_value_heads, config.head_dim, config.rope_dim) == (
        2048,
        4,
        128,
        64,
    )
    assert (config.num_experts, config.n_group, config.topk_group, config.num_experts_per_tok) == (
        256,
        8,
        4,
        8,
    )
    assert config.first_k_dense_replace == 1 and config.num_shared_experts == 1
    assert config.tie_word_embeddings is False and config.use_cache is False and config.pad_token_id == 156892
    flash = LLaDA2MoeConfig(
        **{
            **REAL_CONFIG,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "intermediate_size": 9216,
            "moe_intermediate_size": 1024,
        }
    )
    assert flash.head_dim == 128 and flash.rope_dim == 64


def test_zero_key_value_heads_means_one_per_query_head():
    """LLaDA2.1's configuration (LLaDA2.0's divides by zero)."""
    assert LLaDA2MoeConfig(**{**TINY_CONFIG, "num_key_value_heads": 0}).num_key_value_heads == 4


def test_unknown_field_is_refused_by_name():
    with pytest.raises(ValueError, match="llada2_extra_knob"):
        LLaDA2MoeConfig(**TINY_CONFIG, llada2_extra_knob=3)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("score_function", "softmax"),
        ("norm_topk_prob", False),
        ("moe_router_enable_expert_bias", False),
        ("router_dtype", "bf16"),
        ("rotary_dim", 8),
        ("use_sliding_window", True),
        ("norm_head", True),
        ("norm_softmax", True),
        ("use_rmsnorm", False),
        ("using_split_qkv_in_self_attention", True),
        ("rope_scaling", {"rope_type": "linear", "factor": 2.0}),
        ("rope_scaling", {"type": "dynamic", "factor": 2.0}),
        ("n_group", 5),
        ("topk_group", 9),
        ("num_experts_per_tok", 17),
    ],
)
def test_unimplemented_values_are_refused(field, value):
    with pytest.raises(ValueError, match=f"`{field}=.*not implemented by dllm_edit's native class"):
        LLaDA2MoeConfig(**{**TINY_CONFIG, field: value})


def test_config_round_trip(tmp_path):
    config = LLaDA2MoeConfig(**REAL_CONFIG)
    config.save_pretrained(tmp_path)
    loaded = LLaDA2MoeConfig.from_pretrained(tmp_path)
    for key in REAL_CONFIG:
        if key not in ("architectures", "auto_map", "transformers_version", "torch_dtype"):
            assert getattr(loaded, key) == getattr(config, key) == REAL_CONFIG[key], key
    assert loaded.model_type == "llada2_moe" and loaded.rope_scaling is None
    loaded.save_pretrained(tmp_path / "again")
    assert LLaDA2MoeConfig.from_pretrained(tmp_path / "again").to_dict() == loaded.to_dict()


# 5. training ----------------------------------------------------------------------------------------


def _loss_and_grads(model: LLaDA2MoeForCausalLM) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(INPUT_IDS, labels=INPUT_IDS, attention_mask=block_causal_mask()).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attn", ATTN)
def test_gradient_checkpointing_gives_the_same_grads(attn):
    model = native_model(attn).train()
    loss, grads = _loss_and_grads(model)
    enable_activation_checkpointing(model)
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    loss_gc, grads_gc = _loss_and_grads(model)
    close(loss_gc, loss)
    assert grads.keys() == grads_gc.keys()
    assert (
        "model.layers.1.mlp.gate.weight" in grads
        and "model.layers.2.mlp.shared_experts.up_proj.weight" in grads
    )
    assert any(".mlp.experts." in name for name in grads)
    for name in grads:
        close(grads_gc[name], grads[name])


def test_training_mode_computes_the_eval_logits():
    """Dropout is 0 in the checkpoints: training mode runs the same model (the remote code switches to
    another expert dispatch in training; the native class has one)."""
    model = native_model("sdpa")
    with torch.no_grad():
        evaluated = model(INPUT_IDS).logits
        close(model.train()(INPUT_IDS).logits, evaluated)


def test_lora_attaches_to_attention_projections():
    peft = pytest.importorskip("peft")
    model = native_model("sdpa")
    with torch.no_grad():
        base = model(INPUT_IDS).logits
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query_key_value", "dense"])
    lora = peft.get_peft_model(model, config)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert (
        sum(".attention." in n for n in trainable)
        == len(trainable)
        == 2 * 2 * TINY_CONFIG["num_hidden_layers"]
    )
    with torch.no_grad():
        close(lora(input_ids=INPUT_IDS).logits, base)  # LoRA's B starts at zero
    lora.train()
    lora(input_ids=INPUT_IDS, labels=INPUT_IDS).loss.backward()
    assert all(p.grad is not None for n, p in lora.named_parameters() if p.requires_grad and "lora_A" in n)


# 6. decoding ----------------------------------------------------------------------------------------

#: LLaDA2.1's editing beside an unmasking rule (what its `generate()` runs), besides each rule alone.
EDITING = (["threshold_unmask", "token_edit"], ["threshold_unmask", "multi_block_edit"])
RULE_SETS = [[rule] for rule in unmasking_strategies()] + [list(names) for names in EDITING]
#: larger weights for decoding: with std 0.1 the tiny model fills nearly every mask with one token
DECODE_STD = 0.5


def _decode(model: torch.nn.Module, names: list[str], use_cache: bool) -> torch.Tensor | None:
    """Block-causal decoding of a left-padded batch; None when the adapter refuses the strategies."""
    ids = torch.tensor([[PAD, PAD, 5, 6, 7], [8, 9, 10, 11, 12]])  # [B, W] left-padded
    mask = (ids != PAD).long()  # [B, W]
    config = dllm_edit.EditGenerationConfig(
        strategies=[build(name, BLOCK) for name in names],
        block_length=BLOCK,
        max_new_tokens=2 * BLOCK,
        mask_token_id=MASK,
        eos_token_id=EOS,
        pad_token_id=PAD,
        use_cache=use_cache,
    )
    try:
        out = dllm_edit.generate(
            model,
            ids,
            attention_mask=mask,
            generation_config=config,
            adapter="block_causal",
            generator=torch.Generator().manual_seed(0),
        )
    except (ValueError, TypeError) as error:
        if "first forward" in str(error):
            raise
        return None
    return out.sequences


@pytest.mark.parametrize("use_cache", [False, True], ids=["no_cache", "cache"])
@pytest.mark.parametrize(
    ("family", "attn"), [("llada2_moe", "sdpa"), ("llada21_moe", "sdpa"), ("llada21_moe", "eager")]
)
def test_decoding_matches_remote_for_every_rule(family, attn, use_cache):
    """Same tokens as the remote class under the `block_causal` adapter, for every registered
    unmasking rule (and LLaDA2.1's editing). LLaDA2.0's eager path misreads the adapter's additive
    mask (see the module docstring), so it is compared under SDPA only."""
    remote, native = remote_model(family, attn, std=DECODE_STD), native_model(attn, std=DECODE_STD)
    decoded = []
    for names in RULE_SETS:
        want = _decode(remote, names, use_cache)
        got = _decode(native, names, use_cache)
        assert (want is None) == (got is None), names
        if want is None:
            continue
        assert got is not None and torch.equal(got, want), names
        decoded.append(got)
    assert len(decoded) >= len(unmasking_strategies()) - 1  # WINO needs a shadow block: bidirectional only
    assert len({tuple(seq.flatten().tolist()) for seq in decoded}) > 3  # the rules decode differently


@pytest.mark.parametrize("attn", ATTN)
def test_native_decoding_with_and_without_cache(attn):
    """Always run: the block-causal prefix cache is exact, so cached decoding gives the same tokens."""
    native = native_model(attn, std=DECODE_STD)
    for names in (["threshold_unmask"], ["quota_unmask"], ["threshold_unmask", "token_edit"]):
        uncached = _decode(native, names, use_cache=False)
        assert uncached is not None and not (uncached == MASK).any(), names
        assert torch.equal(_decode(native, names, use_cache=True), uncached), names
