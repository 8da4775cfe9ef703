"""The native model families at their real sizes: memory on paper (meta device), and decoding real
checkpoints when they are in the local Hugging Face cache (GPU).

    python benchmarks/native_models.py --memory                  # CPU, seconds: the table below
    python benchmarks/native_models.py --decode --device cuda    # each cached checkpoint: dual cache, 2 rules

`--memory` builds each family's published config on the meta device (no weights are allocated or
downloaded), counts the parameters of dllm_edit's native class, and prints the memory a decode
needs at batch 1: the weights (bf16), the keys and values of a 1,024-slot canvas (the prefix and
dual caches hold at most that), and the float32 logits of one 32-token block (what the decoding
step reads; the whole canvas's logits are what a no-cache bidirectional forward materialises).
`--decode` loads every checkpoint of `CHECKPOINTS` found in the local cache (never the network)
with `dllm_edit.load` and decodes one prompt with two algorithms and, on full-attention families,
the dual cache; it prints tokens, forwards and tokens/s.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

# Published configs, the fields that set the sizes (the rest are the classes' defaults). Sources: the
# checkpoints' config.json files as quoted in public repositories (LLaDA-8B-Instruct, Dream-v0-7B,
# LLaDA2.0-mini); LLaDA-MoE-7B-A1B from a public port's quote of its config (vocab: LLaDA2's tokenizer).
REAL_CONFIGS: dict[str, dict[str, Any]] = {
    "LLaDA-8B-Instruct (llada)": {
        "model_type": "llada",
        "d_model": 4096,
        "n_heads": 32,
        "n_kv_heads": 32,
        "n_layers": 32,
        "mlp_hidden_size": 12288,
        "vocab_size": 126464,
        "embedding_size": 126464,
        "max_sequence_length": 4096,
        "rope_theta": 500000.0,
        "mask_token_id": 126336,
    },
    "Dream-v0-Instruct-7B (Dream)": {
        "model_type": "Dream",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "mask_token_id": 151666,
    },
    "LLaDA-MoE-7B-A1B (lladamoe)": {
        "model_type": "lladamoe",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "expert_intermediate_size": 1024,
        "dense_intermediate_size": 8192,
        "vocab_size": 157184,
        "rope_theta": 50000.0,
        "max_position_embeddings": 8192,
        "qk_layernorm": True,
    },
    "LLaDA2.0-mini (llada2_moe)": {
        "model_type": "llada2_moe",
        "hidden_size": 2048,
        "head_dim": 128,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 20,
        "intermediate_size": 5120,
        "moe_intermediate_size": 512,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_shared_experts": 1,
        "n_group": 8,
        "topk_group": 4,
        "first_k_dense_replace": 1,
        "vocab_size": 157184,
        "partial_rotary_factor": 0.5,
        "rope_theta": 600000.0,
        "routed_scaling_factor": 2.5,
        "score_function": "sigmoid",
        "use_qk_norm": True,
        "max_position_embeddings": 32768,
    },
}

#: Hub ids `--decode` looks for in the local cache.
CHECKPOINTS = (
    "GSAI-ML/LLaDA-8B-Instruct",
    "GSAI-ML/LLaDA-1.5",
    "inclusionAI/LLaDA-MoE-7B-A1B-Instruct",
    "Dream-org/Dream-v0-Instruct-7B",
    "apple/DiffuCoder-7B-cpGRPO",
    "inclusionAI/LLaDA2.0-mini",
    "inclusionAI/LLaDA2.1-mini",
)

GIB = 1024**3


def _native_config(fields: dict[str, Any]) -> Any:
    from dllm_edit.models import NATIVE_FAMILIES

    fields = dict(fields)
    config_class = NATIVE_FAMILIES[fields.pop("model_type")][0]
    return config_class(**fields)


def memory_table(canvas: int = 1024, block: int = 32) -> list[dict[str, Any]]:
    """One row per family: parameters (total, and active per token for MoE) and decode memory."""
    from dllm_edit.models import NATIVE_FAMILIES

    rows = []
    for name, fields in REAL_CONFIGS.items():
        if fields["model_type"] not in NATIVE_FAMILIES:
            continue
        config = _native_config(fields)
        model_class = NATIVE_FAMILIES[fields["model_type"]][1]
        with torch.device("meta"):
            model = model_class(config)
        total = sum(p.numel() for p in model.parameters())
        expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
        num_experts = fields.get("num_experts")
        active = (
            total - expert + (expert * fields["num_experts_per_tok"] // num_experts if num_experts else 0)
        )
        layers = fields.get("n_layers") or fields["num_hidden_layers"]
        heads = fields.get("n_heads") or fields["num_attention_heads"]
        kv_heads = fields.get("n_kv_heads") or fields["num_key_value_heads"]
        hidden = fields.get("d_model") or fields["hidden_size"]
        head_dim = fields.get("head_dim") or hidden // heads
        vocab = fields.get("embedding_size") or fields["vocab_size"]
        kv_bytes = 2 * layers * kv_heads * head_dim * canvas * 2  # keys + values, bf16
        rows.append(
            {
                "family": name,
                "params_b": total / 1e9,
                "active_b": active / 1e9,
                "weights_gib": total * 2 / GIB,
                "kv_gib": kv_bytes / GIB,
                "block_logits_gib": block * vocab * 4 / GIB,
                "canvas_logits_gib": canvas * vocab * 4 / GIB,
            }
        )
    return rows


def print_memory(rows: list[dict[str, Any]], canvas: int, block: int) -> None:
    print(
        f"| family | parameters | active / token | weights (bf16) | K/V of {canvas} slots | "
        f"logits of a {block}-token block | logits of the canvas | total (cached decode) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        total = r["weights_gib"] + r["kv_gib"] + r["block_logits_gib"]
        print(
            f"| {r['family']} | {r['params_b']:.2f} B | {r['active_b']:.2f} B | {r['weights_gib']:.1f} GiB | "
            f"{r['kv_gib']:.2f} GiB | {r['block_logits_gib']:.3f} GiB | {r['canvas_logits_gib']:.2f} GiB | "
            f"{total:.1f} GiB |"
        )


def cached_checkpoints() -> list[tuple[str, str]]:
    """`(hub id, local folder)` of every `CHECKPOINTS` entry in the local cache (no network)."""
    from huggingface_hub import snapshot_download

    found = []
    for repo in CHECKPOINTS:
        try:
            found.append((repo, snapshot_download(repo, local_files_only=True)))
        except Exception:  # not in the cache
            continue
    return found


def decode_checkpoints(device: str, new_tokens: int) -> None:
    import dllm_edit

    found = cached_checkpoints()
    if not found:
        print(f"no checkpoint of {list(CHECKPOINTS)} in the local Hugging Face cache: nothing to decode")
        return
    print("| checkpoint | class | adapter | rule | tokens | forwards | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for repo, folder in found:
        model, tokenizer = dllm_edit.load(folder, dtype="bfloat16", device=device)
        ids = tokenizer("Question: what is 12 * 7? Answer:", return_tensors="pt")["input_ids"].to(device)
        adapter = dllm_edit.detect_adapter(model)
        runs = [("fast_dllm_threshold", adapter), ("eb_sampler", adapter)]
        if adapter == "bidirectional":
            runs.append(("fast_dllm_threshold", "bidirectional_dual_cache"))
        for rule, run_adapter in runs:
            config = dllm_edit.EditGenerationConfig(
                unmasking=rule, max_new_tokens=new_tokens, block_length=32, editing_threshold=None
            )
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = dllm_edit.generate(model, ids, generation_config=config, adapter=run_adapter)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            tokens = int(out.sequences.shape[1] - ids.shape[1])
            print(
                f"| {repo} | {type(model).__name__} | {run_adapter} | {rule} | {tokens} | "
                f"{int(out.num_forwards[0])} | {tokens / seconds:.1f} |"
            )
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--memory", action="store_true", help="the real configs' memory, from the meta device"
    )
    parser.add_argument("--decode", action="store_true", help="decode the checkpoints in the local cache")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--canvas", type=int, default=1024, help="canvas slots for the K/V figure")
    parser.add_argument("--block", type=int, default=32, help="block length for the logits figure")
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    if not (args.memory or args.decode):
        parser.error("pass --memory and/or --decode")
    if args.memory:
        print_memory(memory_table(args.canvas, args.block), args.canvas, args.block)
    if args.decode:
        decode_checkpoints(args.device, args.new_tokens)


if __name__ == "__main__":
    main()
