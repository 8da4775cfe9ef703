"""dllm_edit's cached adapters on the native LLaDA class against Fast-dLLM's own cached decoders.

Fast-dLLM (NVlabs/Fast-dLLM, `llada/`) ships a patched `modeling_llada.py` (keys/values as per-layer
tuples, a `replace_position` argument for the dual cache) and `generate.py` with
`generate_with_prefix_cache` and `generate_with_dual_cache`. Both run here, from
`DLLM_EDIT_REMOTE_CODE_DIR/fastdllm_llada/`, on the seeded tiny LLaDA weights of `test_llada.py`, and
dllm_edit's `bidirectional_approx_cache` / `bidirectional_dual_cache` adapters on the native class
with the same weights must give the same tokens and the same forward counts (Fast-dLLM spends one
more forward, which changes nothing, on every block its first forward fills; see
`tests/references/fast_dllm_cache.py`).

Departures, test-side only: Fast-dLLM's SDPA wrapper is `torch.compile`d; it is replaced by the
plain `F.scaled_dot_product_attention` it wraps (compiling costs minutes on a CPU and computes the
same attention). Its modules register with transformers' Auto classes at import; that is suppressed
so that the test process keeps dllm_edit's registration.
"""

from __future__ import annotations

import sys
import types
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
import transformers

import dllm_edit
from tests.helpers.remote_code import load_remote, seeded_state_dict
from tests.models.test_llada import EOS, MASK, PAD, SEED, TINY_CONFIG, native_model

PROMPTS = [[5, 17, 33, 40, 2], [7, 8, 90], [11, 12, 13, 14, 15, 16, 17]]
BLOCK, GEN = 4, 12


def _plain_sdpa(q, k, v, mask=None, attn_mask=None, dropout_p=0.0, is_causal=False):
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
    )


def fast_dllm() -> tuple[types.ModuleType, types.ModuleType]:
    """Fast-dLLM's patched `modeling_llada` and its `generate` module (skips when not provided)."""
    with (
        mock.patch.object(transformers.AutoConfig, "register"),
        mock.patch.object(transformers.AutoModel, "register"),
    ):
        modeling = load_remote("fastdllm_llada", "modeling_llada")
    modeling.scaled_dot_product_attention = _plain_sdpa  # uncompiled, the same attention
    package = types.ModuleType("model")  # generate.py imports `model.modeling_llada`
    package.__path__ = []  # type: ignore[attr-defined]
    with mock.patch.dict(sys.modules, {"model": package, "model.modeling_llada": modeling}):
        generate = load_remote("fastdllm_llada", "generate")
    return modeling, generate


def fast_dllm_model(modeling: types.ModuleType) -> torch.nn.Module:
    """Fast-dLLM's `LLaDAModelLM` on the tiny config with the seeded weights of the native tests."""
    try:
        model = modeling.LLaDAModelLM(modeling.LLaDAConfig(**TINY_CONFIG))
        model.load_state_dict(seeded_state_dict(model, SEED))
        with torch.no_grad():
            model(torch.tensor([[5, 6]]))
    except AttributeError as error:  # transformers 5.x drops the config's `use_cache`
        pytest.skip(f"Fast-dLLM's LLaDAModelLM does not run under this transformers: {error}")
    return model.eval()


def config_for(rule: dict[str, Any]) -> dllm_edit.EditGenerationConfig:
    """dllm_edit's config of Fast-dLLM's loop (as tests/adapters/test_dual_cache.py writes it)."""
    ids = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
    if "steps" in rule:
        return dllm_edit.EditGenerationConfig.from_mode(
            "llada", block_length=BLOCK, steps=rule["steps"], max_new_tokens=GEN, **ids
        )
    return dllm_edit.EditGenerationConfig(
        threshold=rule["threshold"],
        num_to_transfer=1,
        editing_threshold=None,
        max_post_steps=0,
        block_start="prompt_end",
        eos_early_stop=False,
        suppress_mask_token=False,
        block_length=BLOCK,
        max_new_tokens=GEN,
        output_trace=True,
        **ids,
    )


def blocks_filled_at_once(trace: Any) -> int:
    blocks = [record.block for record in trace]
    return sum(blocks.count(b) == 1 for b in set(blocks))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("rule", [dict(threshold=0.9), dict(threshold=0.01), dict(steps=4), dict(steps=2)])
@pytest.mark.parametrize(
    "adapter, reference",
    [
        ("bidirectional_dual_cache", "generate_with_dual_cache"),
        ("bidirectional_approx_cache", "generate_with_prefix_cache"),
    ],
)
def test_cached_adapters_match_fast_dllm(adapter, reference, rule, attn):
    modeling, generate = fast_dllm()
    remote, native = fast_dllm_model(modeling), native_model(attn)
    decoder = getattr(generate, reference)
    config = config_for(rule)
    steps = rule.get("steps", 1) * GEN // BLOCK  # Fast-dLLM's `steps` counts every block
    extras = 0
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        expected, nfe = decoder(
            remote,
            ids,
            steps=steps,
            gen_length=GEN,
            block_length=BLOCK,
            mask_id=MASK,
            threshold=rule.get("threshold"),
        )
        out = dllm_edit.generate(native, ids, generation_config=config, adapter=adapter)
        assert torch.equal(out.sequences, expected), prompt
        extra = blocks_filled_at_once(out.trace) if "threshold" in rule else 0
        assert int(out.num_forwards[0]) + extra == nfe, prompt
        extras += extra
    if rule.get("threshold") == 0.01:
        assert extras > 0  # the no-op forward of a block filled at once was met and counted
