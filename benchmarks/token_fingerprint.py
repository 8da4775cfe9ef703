"""The tokens every decoding path writes, as fingerprints: run it before and after a change that
should not change one token (a refactor of the loop, an adapter or a rule) and compare the lines.

Each case decodes a fixed batch (two left-padded prompts, one with an infill mask) on a small seeded
model and hashes what the call returns: the sequences, the forwards and edits per row, tokens per
forward and, with the trace, every step's commits, edits and probabilities (two hashes per line:
the tokens, forwards and edits; then the rest). The cases: every
registered unmasking rule alone and with T2T editing (S), the S / Q presets, multi-block editing and
`eos_fill`, on every adapter each family takes (the shipped model on its detected adapter; LLaDA's
native class with the approximate and dual caches; Dream's shifted adapters; a Llama as the
block-causal model; LLaDA2.x's native MoE class block-causal, with the prefix cache and the
StaticCache; LLaDA-MoE's native class with the bidirectional adapters).

    python benchmarks/token_fingerprint.py > runs/fingerprint-before.txt
    # ... change the code ...
    python benchmarks/token_fingerprint.py > runs/fingerprint-after.txt
    diff runs/fingerprint-before.txt runs/fingerprint-after.txt && echo "no token changed"
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.strategies import get_strategy


def _seeded(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return model.eval()


def models() -> Iterator[tuple[str, Any, list[str], int]]:
    """(name, model, adapters, mask id) of each case model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dllm_edit.models import (
        DreamConfig,
        DreamModel,
        LLaDA2MoeConfig,
        LLaDA2MoeModelLM,
        LLaDAConfig,
        LLaDAModelLM,
        LLaDAMoEConfig,
        LLaDAMoEModelLM,
    )

    shipped, _ = dllm_edit.load_default()
    detected = dllm_edit.detect_adapter(shipped)
    yield "shipped", shipped, [detected], int(shipped.generation_config.mask_token_id)
    vocab = 64
    llada = LLaDAConfig(
        d_model=32, n_heads=4, n_kv_heads=4, n_layers=2, mlp_hidden_size=64, vocab_size=vocab,
        embedding_size=vocab, mask_token_id=vocab - 1, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    yield (
        "llada",
        _seeded(LLaDAModelLM(llada), 1),
        ["bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"],
        vocab - 1,
    )
    dream = DreamConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, mask_token_id=vocab - 1, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    yield "dream", _seeded(DreamModel(dream), 2), ["shifted", "block_causal_shifted"], vocab - 1
    llama = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, eos_token_id=1, pad_token_id=0, bos_token_id=2,
    )  # fmt: skip
    yield "llama", _seeded(LlamaForCausalLM(llama), 3), ["block_causal"], vocab - 1
    llada2 = LLaDA2MoeConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=80, moe_intermediate_size=8, num_experts=32,
        num_experts_per_tok=4, num_attention_heads=4, num_key_value_heads=1, head_dim=8, rotary_dim=4,
        num_hidden_layers=3, first_k_dense_replace=1, num_shared_experts=1, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    yield "llada2", _seeded(LLaDA2MoeModelLM(llada2), 4), ["block_causal", "block_causal_static"], vocab - 1
    llada_moe = LLaDAMoEConfig(
        vocab_size=vocab, hidden_size=32, dense_intermediate_size=64, expert_intermediate_size=16,
        num_experts=16, num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=4,
        num_hidden_layers=2, max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
        mask_token_id=vocab - 1,
    )  # fmt: skip
    yield (
        "lladamoe",
        _seeded(LLaDAMoEModelLM(llada_moe), 5),
        ["bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"],
        vocab - 1,
    )


def settings(block_length: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, config fields) of each decoding setting."""
    for mode in ("speedy", "quality"):
        yield f"mode={mode}", {"mode": mode}
    yield "mode=speedy+multi_block_edit", {"mode": "speedy", "multi_block_edit": True}
    yield "mode=speedy+eos_fill", {"mode": "speedy", "eos_fill": True}
    for name in unmasking_strategies():
        cls = get_strategy(name)
        fields = {"block_length": block_length, "steps": block_length // 2} if name == "quota_unmask" else {}
        yield f"rule={name}", {"strategies": [cls(**fields)]}
        edit = get_strategy("token_edit")(threshold=0.0)
        yield f"rule={name}+edit", {"strategies": [cls(**fields), edit]}


def fingerprint(out: Any) -> str:
    """Two hashes: the tokens (sequences, forwards and edits per row), then everything else the call
    returned (tokens per forward and the trace), so a change of counting shows apart from the tokens."""
    tokens, rest = hashlib.sha256(), hashlib.sha256()
    for tensor in (out.sequences, out.num_forwards, out.num_edits):
        tokens.update(tensor.cpu().numpy().tobytes())
    rest.update(out.tokens_per_forward.cpu().numpy().tobytes())
    for record in out.trace or []:
        for tensor in (record.active, record.masked, record.commit, record.edit, record.after, record.probs):
            rest.update(tensor.cpu().numpy().tobytes())
    return f"{tokens.hexdigest()[:16]} {rest.hexdigest()[:12]}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block-length", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    overall = hashlib.sha256()
    for model_name, model, adapters, mask in models():
        attention = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
        for adapter in adapters:
            # row 1 infills where the adapter takes prompt masks (the uncached full-attention ones)
            infill = mask if adapter in ("bidirectional", "shifted") else 10
            prompts = torch.tensor([[0, 0, 5, 6, 7, 8], [9, infill, 11, 12, 13, 14]])  # [B, W]
            for label, fields in settings(args.block_length):
                mode = fields.pop("mode", "speedy")
                config = dllm_edit.EditGenerationConfig.from_mode(
                    mode, max_new_tokens=args.max_new_tokens, block_length=args.block_length,
                    mask_token_id=mask, output_trace=True, **fields,
                )  # fmt: skip
                case = f"{model_name:8s} {adapter:27s} {label}"
                try:
                    out = dllm_edit.generate(
                        model, prompts, attention_mask=attention, generation_config=config, adapter=adapter,
                        generator=torch.Generator().manual_seed(0),
                    )  # fmt: skip
                except (ValueError, TypeError) as error:  # a refusal is part of the fingerprint
                    line = f"{case}  refused: {str(error).splitlines()[0][:80]}"
                else:
                    line = f"{case}  {fingerprint(out)}"
                print(line, flush=True)
                overall.update(line.encode())
    print(f"overall {overall.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
