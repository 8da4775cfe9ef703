"""Cookbook: S vs Q mode, and how to read tokens per forward, forwards and edits.

On the CPU (offline) the small model shipped in the package (`dllm_edit.load_default()`) decodes the
same held-out prompts — synthetic tasks with exact answers and function headers from standard-library
modules it never saw — with the S preset, the Q preset and the S preset without T2T editing; each
line reports exact match (or the fraction of completions that parse), tokens per forward, forwards
and edits. `--tiny` (CI) decodes a handful of prompts. `--hub MODEL_ID` runs the comparison on a
real checkpoint (GPU and Hub access needed).

    python examples/s_vs_q_modes.py            # ~1 min on a 2-core CPU
    python examples/s_vs_q_modes.py --tiny     # seconds (CI)
    python examples/s_vs_q_modes.py --hub inclusionAI/LLaDA2.1-mini   # GPU, transformers 4.57
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.evaluation import exact_match, parse_rate


def decode(model: Any, tokenizer: Any, prompts: list[str], cfg: dllm_edit.EditGenerationConfig):
    """Decode `prompts` as one left-padded batch; returns (completions, EditGenerationOutput)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left").to(model.device)
    out = dllm_edit.generate(
        model,
        enc["input_ids"],
        attention_mask=enc["attention_mask"],
        generation_config=cfg,
        tokenizer=tokenizer,  # the mask / EOS / pad ids come from here when the config has none
    )
    completions = out.sequences[:, enc["input_ids"].shape[1] :]  # [B, max_new_tokens]
    return tokenizer.batch_decode(completions, skip_special_tokens=True), out


def summary(out: dllm_edit.EditGenerationOutput) -> str:
    """The three counters, averaged (TPF, forwards) or summed (edits) over the batch."""
    return (
        f"tokens/forward {out.tokens_per_forward.mean().item():.2f}  "
        f"forwards/row {out.num_forwards.float().mean().item():.1f}  "
        f"edits {out.num_edits.sum().item()}"
    )


# --8<-- [start:hub]
def run_on_hub(model_id: str, max_new_tokens: int = 256) -> None:
    """S vs Q on a real LLaDA2.1 checkpoint: needs a GPU, the Hub and `trust_remote_code=True`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=True)
    tokenizer.padding_side = "left"  # batched prompts must be left-padded
    model = AutoModelForCausalLM.from_pretrained(
        model_id, trust_remote_code=True, dtype=torch.bfloat16, device_map="auto"
    ).eval()
    questions = [
        "Write a Python function that returns the n-th Fibonacci number.",
        "A train travels 120 km in 1.5 hours. What is its average speed in km/h?",
    ]
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in questions
    ]
    for mode in ("speedy", "quality"):
        # the presets as published: blocks of 32, 16 post steps, greedy
        cfg = dllm_edit.EditGenerationConfig.from_mode(mode, max_new_tokens=max_new_tokens)
        texts, out = decode(model, tokenizer, prompts, cfg)
        print(
            f"{mode:>8}: {summary(out)}; per row TPF {[round(v, 2) for v in out.tokens_per_forward.tolist()]}"
        )
        print(f"          {texts[0][:200]!r}")


# --8<-- [end:hub]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="a handful of prompts (CI)")
    parser.add_argument(
        "--hub", metavar="MODEL_ID", help="a Hub checkpoint (GPU), e.g. inclusionAI/LLaDA2.1-mini"
    )
    args = parser.parse_args()
    if args.hub:
        run_on_hub(args.hub, max_new_tokens=32 if args.tiny else 256)
        return

    model, tokenizer = dllm_edit.load_default()  # in the package: no download, no GPU
    synthetic = builtin_rows("dllm_edit:synthetic", "test")[: 8 if args.tiny else 200]
    code = builtin_rows("dllm_edit:code", "test")[: 4 if args.tiny else 50]
    configs = {
        "S (speedy)": dllm_edit.EditGenerationConfig.from_mode("speedy"),
        "Q (quality)": dllm_edit.EditGenerationConfig.from_mode("quality"),
        "S without T2T": dllm_edit.EditGenerationConfig.from_mode("speedy", editing_threshold=None),
    }
    for task, rows, max_new_tokens, score in [
        ("synthetic tasks, exact match", synthetic, 16, exact_match),
        ("held-out code, % that parses", code, 64, parse_rate),
    ]:
        print(f"{task} ({len(rows)} prompts):")
        for name, cfg in configs.items():
            # the presets as published (blocks of 32, 16 post steps); only the length is set here
            texts, out = decode(
                model, tokenizer, [r["prompt"] for r in rows], cfg.replace(max_new_tokens=max_new_tokens)
            )
            print(f"  {name:>13}: {score(texts, rows):5.1f}  {summary(out)}")
    # the last run (S without T2T, code): the first completion that parses, if any
    parsed = [(r["prompt"], t) for r, t in zip(code, texts, strict=True) if parse_rate([t], [r]) == 100]
    if parsed:
        print("e.g. a completion that parses:\n" + parsed[0][0] + parsed[0][1])


if __name__ == "__main__":
    main()
