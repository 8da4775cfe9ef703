"""Speed and token agreement of the approximate caches of bidirectional models (CPU).

Decodes random full-attention Llamas (run under a full 4-D mask, the way LLaDA-8B attends) with
LLaDA-1's settings as Fast-dLLM runs them (`block_start="prompt_end"`, block 32, no editing, no
post step, no EOS stop), under two unmasking rules:

* `threshold`: Fast-dLLM's parallel decoding, every mask with `p > 0.9` plus the most confident;
* `quota`: LLaDA-1's low-confidence remasking, `--quota-steps` steps per block (16: two tokens a step).

and five adapters: `bidirectional` (no cache, exact), `bidirectional_approx_cache` (Fast-dLLM's
prefix cache), `bidirectional_dual_cache` (Fast-dLLM's dual cache, refreshed at block starts), and
the dual cache also refreshed every 8 and every 4 steps. Each row reports the median wall time of
`--repeats` runs with its spread (min-max), the forwards, tokens/s (completion tokens per second),
the speed-up over no cache (ratio of medians), and the agreement with the uncached decode (share of
completion tokens equal, position by position). The runs alternate in one process (every adapter
once per round), so a slow spell of a shared machine hits all of them.

A random model is not a trained one: its cached keys/values are no better an approximation than its
weights make them, so the agreement here says how far the approximation moves a decode of *this*
model, not what accuracy a trained LLaDA keeps (Fast-dLLM reports that). The weights are drawn with
a larger `--init` than transformers' 0.02 (which predicts nearly the same token everywhere, so no
cache can change it) and the head is scaled by `--head-scale` so that the 0.9 threshold changes
decisions.

    python benchmarks/dual_cache.py                 # tiny (hidden 64, 2 layers) and CPU-sized (512, 3)
    python benchmarks/dual_cache.py --tiny          # seconds-long check
    python benchmarks/dual_cache.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.adapters import DualCacheBidirectionalAdapter, ModelAdapter


def build_model(vocab: int, hidden: int, layers: int, init: float, head_scale: float, seed: int):
    """A random Llama with a scaled head whose last id (the mask token) is never the argmax."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(2, hidden // 64),
        num_key_value_heads=max(2, hidden // 64),
        max_position_embeddings=4096,
        initializer_range=init,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(cfg).eval()
    head = torch.nn.Linear(hidden, vocab, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * head_scale)
        head.bias.zero_()
        head.bias[vocab - 1] = -1e4
    model.lm_head = head
    return model


def configs(vocab: int, block: int, gen: int, quota_steps: int) -> dict[str, dllm_edit.EditGenerationConfig]:
    ids = dict(mask_token_id=vocab - 1, eos_token_id=1, pad_token_id=0)
    threshold = dllm_edit.EditGenerationConfig(
        threshold=0.9,
        num_to_transfer=1,
        editing_threshold=None,
        max_post_steps=0,
        block_start="prompt_end",
        eos_early_stop=False,
        suppress_mask_token=False,
        block_length=block,
        max_new_tokens=gen,
        **ids,
    )
    quota = dllm_edit.EditGenerationConfig.from_mode(
        "llada", block_length=block, steps=quota_steps, max_new_tokens=gen, **ids
    )
    return {"threshold": threshold, "quota": quota}


# per model: vocabulary, width, depth, completion length, weight scale, head scale
MODELS: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab=256, hidden=64, layers=2, gen=256, init=0.1, head_scale=4.0),
    "cpu-sized": dict(vocab=2048, hidden=512, layers=3, gen=128, init=0.05, head_scale=8.0),
}

ADAPTERS: dict[str, str | ModelAdapter] = {
    "no cache": "bidirectional",
    "prefix cache": "bidirectional_approx_cache",
    "dual cache": "bidirectional_dual_cache",
    "dual, refresh 8": DualCacheBidirectionalAdapter(refresh_every=8),
    "dual, refresh 4": DualCacheBidirectionalAdapter(refresh_every=4),
}


def run(model, prompt, cfg, adapter) -> tuple[float, Any]:
    start = time.perf_counter()
    out = dllm_edit.generate(model, prompt, generation_config=cfg, adapter=adapter)
    return time.perf_counter() - start, out


def measure(name: str, model, prompt: torch.Tensor, cfg, repeats: int) -> list[dict[str, Any]]:
    prompt_length = prompt.shape[1]
    times: dict[str, list[float]] = {label: [] for label in ADAPTERS}
    outputs: dict[str, Any] = {}
    run(model, prompt, cfg, "bidirectional")  # warm-up
    for _ in range(repeats):
        for label, adapter in ADAPTERS.items():
            wall, out = run(model, prompt, cfg, adapter)
            times[label].append(wall)
            outputs[label] = out  # greedy: every run of an adapter decodes the same tokens
    exact = outputs["no cache"].sequences[0, prompt_length:]  # [G]
    base = statistics.median(times["no cache"])
    rows = []
    for label in ADAPTERS:
        out = outputs[label]
        completion = out.sequences[0, prompt_length:]  # [G]
        median = statistics.median(times[label])
        rows.append(
            dict(
                model=name,
                adapter=label,
                median_s=median,
                min_s=min(times[label]),
                max_s=max(times[label]),
                forwards=int(out.num_forwards[0]),
                tokens_per_s=completion.numel() / median,
                speedup=base / median,
                agreement=(completion == exact).float().mean().item(),
            )
        )
    return rows


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print("| adapter | wall s (median) | spread (min-max) | forwards | tokens/s | speed-up | agreement |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['adapter']} | {r['median_s']:.3f} | {r['min_s']:.3f}-{r['max_s']:.3f} | {r['forwards']} | "
            f"{r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {100 * r['agreement']:.1f}% |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--quota-steps", type=int, default=16, help="steps per block of the quota rule")
    parser.add_argument("--init", type=float, default=None, help="initializer_range (default: per model)")
    parser.add_argument("--head-scale", type=float, default=None, help="head scale (default: per model)")
    parser.add_argument("--gen", type=int, default=None, help="completion length (default: per model)")
    parser.add_argument("--models", type=str, default="tiny,cpu-sized")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: robust to a shared CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="the tiny model, 64 tokens: a seconds-long check")
    parser.add_argument("--json", type=str, default=None, help="write the rows to this file")
    args = parser.parse_args()
    for name in ("repeats", "prompt_len", "block", "quota_steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.quota_steps > args.block:
        parser.error(f"--quota-steps ({args.quota_steps}) must be <= --block ({args.block})")
    if args.tiny:
        args.models = "tiny"

    torch.set_num_threads(args.threads)
    chosen = [m.strip() for m in args.models.split(",")]
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose among {sorted(MODELS)}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); prompt {args.prompt_len} random "
        f"tokens, block {args.block}, quota {args.quota_steps} steps per block, {args.repeats} repeats"
    )
    all_rows = []
    for name in chosen:
        spec = dict(MODELS[name])
        if args.tiny:
            spec["gen"] = 64
        for key in ("init", "head_scale", "gen"):
            if getattr(args, key) is not None:
                spec[key] = getattr(args, key)
        vocab, hidden, layers, gen = spec["vocab"], spec["hidden"], spec["layers"], spec["gen"]
        model = build_model(vocab, hidden, layers, spec["init"], spec["head_scale"], args.seed)
        g = torch.Generator().manual_seed(args.seed)
        prompt = torch.randint(2, vocab - 1, (1, args.prompt_len), generator=g)  # [1, P]
        for rule, cfg in configs(vocab, args.block, gen, args.quota_steps).items():
            rows = measure(name, model, prompt, cfg, args.repeats)
            for r in rows:
                r.update(rule=rule, **spec)
            title = (
                f"{name} (vocab {vocab}, hidden {hidden}, {layers} layers, init {spec['init']}, head "
                f"x{spec['head_scale']}), gen {gen}, rule {rule}"
            )
            print_table(title, rows)
            all_rows += rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_rows, f, indent=1)


if __name__ == "__main__":
    main()
