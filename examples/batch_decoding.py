"""Cookbook: batch decoding for offline evaluation and RL rollouts.

1. Offline evaluation: a dataset of prompts is decoded in left-padded chunks (greedy); each row
   gets its own tokens per forward, forwards and edits. A row decoded alone gives the same tokens
   and forwards as in its batch.
2. Rollouts: every prompt repeated `--group` times and sampled (temperature 1) with a seeded
   `torch.Generator`: the same seed gives the same rollouts, another seed other ones.

Offline on the CPU, with a small model trained for a few seconds (`--tiny`: a tiny random model, CI).

    python examples/batch_decoding.py          # ~30 s on a 2-core CPU (training included)
    python examples/batch_decoding.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import torch
from cookbook_models import BLOCK_LENGTH, char_tokenizer, held_out, small_model

import dllm_edit


def chunks(rows: list[dict[str, str]], size: int) -> Iterator[list[dict[str, str]]]:
    """Consecutive chunks of `size` rows (the last one may be shorter)."""
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def decode(
    model: Any, tokenizer: Any, prompts: list[str], cfg: dllm_edit.EditGenerationConfig, **kwargs: Any
) -> tuple[list[str], dllm_edit.EditGenerationOutput]:
    """One left-padded batch: completions (special tokens dropped) and the output with its counters."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True)  # the tokenizer pads on the left
    out = dllm_edit.generate(
        model,
        enc["input_ids"],
        attention_mask=enc["attention_mask"],  # 0 on the left padding
        generation_config=cfg,
        tokenizer=tokenizer,
        **kwargs,
    )
    texts = tokenizer.batch_decode(out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model, few prompts (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per chunk (default 4 / 64)")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt")
    args = parser.parse_args()
    batch_size = args.batch_size or (4 if args.tiny else 64)

    tokenizer = char_tokenizer()
    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK_LENGTH)

    # 1. offline evaluation, chunk by chunk
    rows = held_out(10 if args.tiny else 256)
    correct, tpf, forwards = [], [], []
    for chunk in chunks(rows, batch_size):
        texts, out = decode(model, tokenizer, [r["prompt"] for r in chunk], cfg)
        correct += [t == r["completion"] for t, r in zip(texts, chunk)]
        tpf += out.tokens_per_forward.tolist()  # one value per row
        forwards += out.num_forwards.tolist()
    print(
        f"evaluation: {len(rows)} prompts in chunks of {batch_size}: "
        f"exact match {sum(correct) / len(rows):.2f}, "
        f"tokens/forward mean {sum(tpf) / len(tpf):.2f} (min {min(tpf):.2f}, max {max(tpf):.2f}), "
        f"forwards {sum(forwards)}"
    )
    print(f"  per-row tokens/forward, first rows: {[round(v, 2) for v in tpf[: min(batch_size, 8)]]}")

    # a row decoded alone = the same row in its batch (greedy): padding never changes a row
    alone_texts, alone = decode(model, tokenizer, [rows[1]["prompt"]], cfg)
    batch_texts, batch = decode(model, tokenizer, [r["prompt"] for r in rows[:batch_size]], cfg)
    same = alone_texts[0] == batch_texts[1] and alone.num_forwards[0] == batch.num_forwards[1]
    print(f"  row 1 alone == row 1 in its batch (text and forwards): {bool(same)}")

    # 2. rollouts: each prompt `group` times, sampled, reproducible with a seeded generator
    prompts = [r["prompt"] for r in rows[:2] for _ in range(args.group)]  # [p0, p0, ..., p1, p1, ...]
    sample = cfg.replace(temperature=1.0)
    first, out = decode(model, tokenizer, prompts, sample, generator=torch.Generator().manual_seed(0))
    again, _ = decode(model, tokenizer, prompts, sample, generator=torch.Generator().manual_seed(0))
    other, _ = decode(model, tokenizer, prompts, sample, generator=torch.Generator().manual_seed(1))
    print(f"rollouts: {len(prompts)} rows ({args.group} per prompt), temperature 1.0")
    print(f"  same seed, same rollouts: {first == again}; another seed, other rollouts: {first != other}")
    print(
        f"  distinct completions per prompt: {[len(set(first[i : i + args.group])) for i in (0, args.group)]}"
    )
    print(f"  per-row tokens/forward: {[round(v, 2) for v in out.tokens_per_forward.tolist()]}")


if __name__ == "__main__":
    main()
