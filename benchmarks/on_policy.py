"""Does the on-policy editing stream teach a model to rewrite its own wrong tokens? (CPU, a toy)

Trains the same small block-causal model (`benchmarks/edit_sft.py`'s Llama, from the same
initialisation) on the same synthetic tasks, with the trainer's default noise (random and
editing-stream noise), three ways:

- `random`: the default noise only, `--steps` optimizer steps;
- `random+on-policy`: the same, plus the on-policy stream (`on_policy_rate`, drafts after a
  warm-up of a third of the steps, `on_policy_confidence`), `--steps` steps;
- `random, matched`: the default noise only, with as many more steps as the draft forwards cost
  (a no-grad forward counted as a third of a training step): the same compute as `random+on-policy`.

Each checkpoint decodes the held-out split with the S preset and reports exact match with editing on
and off (`editing_threshold=None`), tokens per forward, and — at the last verification forward of the
first block (`benchmarks/verify_confidence.py`) — the share of the model's own wrong tokens that it
rewrites. Repeated over `--seeds` (model initialisation and noise); the table gives the median and
the range.

    python benchmarks/on_policy.py                     # the toy of docs/concepts/training.md (~20 min)
    python benchmarks/on_policy.py --steps 40 --seeds 0 --test-per-family 5   # a smoke run
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings

from datasets import Dataset
from edit_sft import FAMILIES, build_model, evaluate
from verify_confidence import decode_traced_batch, draft_fates, fate_table

import dllm_edit
from dllm_edit.data import build_char_tokenizer, synthetic_mixture
from dllm_edit.trainers import EditSFTConfig, EditSFTTrainer


def variants(args: argparse.Namespace) -> dict[str, tuple[int, dict]]:
    """name -> (optimizer steps, extra EditSFTConfig fields)."""
    warmup = args.steps // 3
    drafted_steps = args.steps - warmup
    matched = args.steps + math.ceil(drafted_steps * args.on_policy_rate / 3)
    on_policy = dict(
        on_policy_rate=args.on_policy_rate,
        on_policy_warmup_steps=warmup,
        on_policy_confidence=args.on_policy_confidence,
    )
    return {
        "random": (args.steps, {}),
        "random+on-policy": (args.steps, on_policy),
        "random, matched": (matched, {}),
    }


def train(steps: int, fields: dict, seed: int, args: argparse.Namespace, tokenizer, data: Dataset):
    model = build_model(len(tokenizer), args.hidden, args.layers, seed=seed)
    config = EditSFTConfig(
        output_dir="/tmp/dllm_edit_bench_on_policy",
        block_length=args.block_length,
        max_length=32,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, steps // 20),
        max_steps=steps,
        logging_steps=max(1, steps // 5),
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        seed=seed,
        disable_tqdm=True,
        **fields,
    )
    trainer = EditSFTTrainer(model, args=config, train_dataset=data, processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    return trainer.model.eval(), time.perf_counter() - start


def rewrite_share(model, tokenizer, test: list[dict], block_length: int) -> float:
    """% of the model's own wrong drafts that a later edit rewrites (S preset, whole decode)."""
    config = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=block_length)
    fates = [f for t in decode_traced_batch(model, tokenizer, test, config, 32) for f in draft_fates(t)]
    return fate_table(fates)["rewritten"]


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--block-length", type=int, default=8)
    parser.add_argument("--on-policy-rate", type=float, default=0.5)
    parser.add_argument("--on-policy-confidence", type=float, default=0.5)
    parser.add_argument("--train-per-family", type=int, default=2000)
    parser.add_argument("--test-per-family", type=int, default=25)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)

    tokenizer = build_char_tokenizer()
    data = Dataset.from_list(synthetic_mixture(FAMILIES, args.train_per_family, split="train", seed=0))
    test = synthetic_mixture(FAMILIES, args.test_per_family, split="test", seed=0)
    print(
        f"model: Llama hidden {args.hidden}, {args.layers} layers, char vocab {len(tokenizer)}; batch "
        f"{args.batch_size}; block {args.block_length}; held-out {len(test)} prompts "
        f"({', '.join(FAMILIES)}); seeds {args.seeds}",
        flush=True,
    )
    results: dict[str, dict[str, list[float]]] = {}
    table = variants(args)
    for seed in args.seeds:
        for name, (steps, fields) in table.items():
            model, seconds = train(steps, fields, seed, args, tokenizer, data)
            s_edit, tpf = evaluate(model, tokenizer, test, dict(mode="speedy"), args)
            s_off, _ = evaluate(model, tokenizer, test, dict(mode="speedy", editing_threshold=None), args)
            rewritten = rewrite_share(model, tokenizer, test, args.block_length)
            row = results.setdefault(name, {})
            for key, value in (
                ("steps", steps),
                ("S", s_edit),
                ("S, no edit", s_off),
                ("TPF", tpf),
                ("rewritten", rewritten),
                ("seconds", seconds),
            ):
                row.setdefault(key, []).append(value)
            print(
                f"  seed {seed} {name:<17} {steps} steps: S {s_edit:5.1f}%  S no edit {s_off:5.1f}%  "
                f"TPF {tpf:.2f}  own wrong tokens rewritten {rewritten:5.1f}%  ({seconds:.0f} s)",
                flush=True,
            )
    print(
        "\n| training | steps | exact match S (%) | exact match S, editing off (%) | tokens / forward (S) "
        "| own wrong tokens rewritten (%) | training time (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in results.items():
        print(
            f"| {name} | {row['steps'][0]:.0f} | {spread(row['S'])} | {spread(row['S, no edit'])} | "
            f"{statistics.median(row['TPF']):.2f} | {spread(row['rewritten'])} | "
            f"{statistics.median(row['seconds']):.0f} |"
        )


if __name__ == "__main__":
    main()
