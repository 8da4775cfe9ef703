"""The speed levers of decoding: the preallocated block cache, `compile=True`, and the
`decode_speed.py --vs-reference --tiny` check CI runs (tokens only, never a time)."""

import runpy
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.adapters.cache import BlockKVCache, crop_to
from tests.helpers import EOS, MASK, tiny_llama

ROOT = Path(__file__).resolve().parents[2]


def _kv(rows, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, length, 4, generator=g), torch.randn(rows, 2, length, 4, generator=g)


def test_block_cache_returns_what_dynamic_cache_returns():
    """Appends, crops (to a length, and back to it after a longer step), growth past the capacity
    and row selection give the same keys/values as a `DynamicCache`."""
    ours, theirs = BlockKVCache(capacity=6), DynamicCache()
    for step, (new, keep) in enumerate([(4, 4), (3, 4), (5, 8), (2, 8)]):
        k, v = _kv(3, new, step)
        for layer in (0, 1):
            got = ours.update(k + layer, v, layer)
            want = theirs.update(k + layer, v, layer)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        crop_to(ours, keep)
        crop_to(theirs, keep)
        assert ours.get_seq_length() == theirs.get_seq_length() == keep
    index = torch.tensor([0, 2])
    ours.batch_select_indices(index)
    theirs.batch_select_indices(index)
    k, v = _kv(2, 1, 9)
    got, want = ours.update(k, v, 1), theirs.update(k, v, 1)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_block_cache_is_what_the_block_causal_adapter_uses(llama_sdpa):
    from dllm_edit.adapters import BlockCausalAdapter
    from dllm_edit.layout import build_canvas

    ids = torch.tensor([[5, 6, 7]])
    layout, _ = build_canvas(ids, torch.ones_like(ids), 4, 8, MASK, 0)
    session = BlockCausalAdapter().open(llama_sdpa, layout, use_cache=True)
    assert isinstance(session.cache, BlockKVCache) and session.cache.capacity == layout.canvas_length


@pytest.mark.parametrize("adapter", ["block_causal", "block_causal_static"])
def test_compile_equals_eager(adapter):
    """`compile=True` decodes the tokens of eager mode, with the preallocated cache and with
    transformers' StaticCache. torch.compile takes minutes on this CPU for the shared tiny models, so
    this runs the smallest model that exercises the cache: one layer, hidden 16, two blocks of 4 (one
    shape per block phase). A second decode of the same shapes compiles nothing new."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            attn_implementation="sdpa",
        )
    ).eval()
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality",
        max_new_tokens=8,
        block_length=4,
        mask_token_id=MASK,
        eos_token_id=EOS,
        eos_early_stop=False,
    )
    prompt = torch.tensor([[5, 6, 7, 8]])
    eager = dllm_edit.generate(model, prompt, generation_config=cfg, adapter=adapter)
    compiled = dllm_edit.generate(model, prompt, generation_config=cfg, adapter=adapter, compile=True)
    assert torch.equal(compiled.sequences, eager.sequences)
    assert torch.equal(compiled.num_forwards, eager.num_forwards)
    from torch._dynamo.utils import counters

    frames = sum(counters["frames"].values())
    again = dllm_edit.generate(model, prompt, generation_config=cfg, adapter=adapter, compile=True)
    assert torch.equal(again.sequences, eager.sequences)
    assert sum(counters["frames"].values()) == frames, dict(counters["frames"])


def test_compile_is_refused_where_the_adapter_cannot():
    with pytest.raises(ValueError, match="compile=True but the 'bidirectional' adapter"):
        dllm_edit.generate(
            tiny_llama(),
            torch.tensor([[5, 6]]),
            adapter="bidirectional",
            compile=True,
            max_new_tokens=4,
            block_length=4,
            mask_token_id=MASK,
            eos_token_id=EOS,
        )
    with pytest.raises(TypeError, match="`compile` must be a bool"):
        dllm_edit.EditGenerationConfig(compile="yes")


def test_decode_speed_vs_reference_tiny(capsys):
    """The CI mode of the speed benchmark: S and Q presets, tokens identical to the reference
    decoder (batch 1 and row 0 of the batch); it checks tokens, never a time."""
    main = runpy.run_path(str(ROOT / "benchmarks" / "decode_speed.py"))["main"]
    assert main(["--vs-reference", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert "tokens identical to the reference in every run: True" in out
    assert out.count("| True |") == 2


def test_decode_speed_reports_the_ceiling_and_the_moe_forward_cost(capsys):
    """The vs-reference table has a ceiling column (reference time / time inside forward); the
    forward-cost table has a row per experts implementation transformers offers. Times are printed,
    never asserted."""
    main = runpy.run_path(str(ROOT / "benchmarks" / "decode_speed.py"))["main"]
    assert main(["--vs-reference", "--tiny", "--modes", "speedy"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| preset"))
    assert "| ceiling |" in header
    assert main(["--moe-forward", "--hidden", "32", "--layers", "1", "--vocab", "64", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ") and "ms," not in line]
    assert rows[0].startswith("| eager | no |") and len(rows[0].split("|")) == 8
