"""Forwards saved by finishing rows early: `eos_fill` and Prophet's authors' regime.

Two models, each decoded one prompt at a time with and without the "finish the row" action:

- **the shipped model** (`dllm_edit.load_default()`, block-causal): `eos_fill` (once a row commits
  EOS, fill the rest of it with EOS and stop) against the plain Q and S presets; exact match is the
  completion equal to the built-in test set's answer, and "same" the completion equal to the one
  without the action. Prophet's authors' regime (`regime="canvas"`) is refused there: block-causal
  forwards never predict the blocks ahead; only the per-block rule applies.
- **a tiny bidirectional model** (the tests' sharpened random Llama, run with full attention): the
  paper's setting, 256 new tokens in blocks of 32, LLaDA's low-confidence quota (one token per
  step), Prophet with the answer region at completion offset 200 (ahead of the first blocks) in
  the per-block and the authors' regime, and `eos_fill`. A random model has no right answer, so
  "same" (the completion equal to the plain quota decode's) stands for exact match.

    python benchmarks/finish_row.py                 # 20 shipped-model prompts, 8 tiny-model prompts
    python benchmarks/finish_row.py --shipped 40 --tiny 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

# the checkout's root first: its dllm_edit, and tests.helpers for the tiny model
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import dllm_edit
from dllm_edit.data.builtin import builtin_rows

TINY_THRESHOLDS = ((1.5, 1.0, 0.5), (0.8, 0.5, 0.3))


def _completion(out, prompt_length: int) -> list[int]:
    return out.sequences[0, prompt_length : prompt_length + int(out.completion_lengths[0])].tolist()


def shipped(n: int, max_new_tokens: int) -> list[tuple[str, float, float, float]]:
    model, tok = dllm_edit.load_default()
    rows = builtin_rows("synthetic", "test")[:n]
    table = []
    for mode in ("quality", "speedy"):
        results: dict[bool, list[tuple[int, bool, list[int]]]] = {False: [], True: []}
        for fill in (False, True):
            cfg = dllm_edit.EditGenerationConfig.from_mode(
                mode, max_new_tokens=max_new_tokens, block_length=32, eos_fill=fill
            )
            for row in rows:
                ids = tok(row["prompt"], return_tensors="pt")["input_ids"]  # [1, P]
                out = dllm_edit.generate(model, ids, generation_config=cfg, tokenizer=tok)
                tokens = _completion(out, ids.shape[1])
                text = tok.decode(tokens, skip_special_tokens=True).strip()
                results[fill].append((int(out.num_forwards[0]), text == row["completion"].strip(), tokens))
        for fill in (False, True):
            forwards = statistics.mean(f for f, _, _ in results[fill])
            exact = statistics.mean(e for _, e, _ in results[fill])
            same = statistics.mean(a[2] == b[2] for a, b in zip(results[fill], results[False]))
            table.append((f"shipped, {mode}" + (", eos_fill" if fill else ""), forwards, exact, same))
    return table


def tiny(n: int) -> list[tuple[str, float, float, float]]:
    from tests.helpers import EOS, MASK, PAD, tiny_llama

    model = tiny_llama()
    gen, bl = 256, 32
    base = {
        "type": "quota_unmask",
        "steps": bl,
        "block_length": bl,
        "threshold": 1.0,
        "spread": "masked_count",
    }

    def prophet(regime: str, thresholds: tuple[float, float, float]) -> dict:
        return {
            "type": "prophet",
            "base": base,
            "thresholds": thresholds,
            "answer_start": 200,
            "regime": regime,
        }

    runs: dict[str, dict] = {
        "LLaDA quota (plain)": dict(unmasking=base),
        "+ eos_fill": dict(unmasking=base, eos_fill=True),
    }
    # a random model's logit gaps are small: thresholds below the paper's (7.5, 5.0, 2.5)
    for thresholds in TINY_THRESHOLDS:
        for regime in ("block", "canvas"):
            name = f"Prophet {thresholds}, regime={regime!r}"
            runs[name] = dict(unmasking=prophet(regime, thresholds))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, MASK, (1, 8), generator=g) for _ in range(n)]
    outs: dict[str, list[tuple[int, list[int]]]] = {}
    for name, fields in runs.items():
        cfg = dllm_edit.EditGenerationConfig.from_mode(
            "llada",
            steps=None,
            block_length=bl,
            max_new_tokens=gen,
            mask_token_id=MASK,
            eos_token_id=EOS,
            pad_token_id=PAD,
            **fields,
        )
        outs[name] = []
        for ids in prompts:
            out = dllm_edit.generate(model, ids, generation_config=cfg, adapter="bidirectional")
            outs[name].append((int(out.num_forwards[0]), _completion(out, ids.shape[1])))
    plain = outs["LLaDA quota (plain)"]
    table = []
    for name, rows in outs.items():
        forwards = statistics.mean(f for f, _ in rows)
        same = statistics.mean(a[1] == b[1] for a, b in zip(rows, plain))
        table.append((f"tiny bidirectional, {name}", forwards, float("nan"), same))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shipped", type=int, default=20, help="shipped-model prompts (0: skip)")
    parser.add_argument("--tiny", type=int, default=8, help="tiny-model prompts (0: skip)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="shipped model's new tokens")
    args = parser.parse_args()
    torch.manual_seed(0)
    table = []
    if args.shipped:
        table += shipped(args.shipped, args.max_new_tokens)
    if args.tiny:
        table += tiny(args.tiny)
    print("| run | forwards / row | exact match | same as without |")
    print("|---|---|---|---|")
    for name, forwards, exact, same in table:
        em = "–" if exact != exact else f"{exact:.0%}"
        print(f"| {name} | {forwards:.1f} | {em} | {same:.0%} |")


if __name__ == "__main__":
    main()
