"""Random noise only vs + on-policy vs + remasking: what each adds to editing, on held-out data.

Decodes the held-out synthetic prompts and functions of the built-in mix (`dllm_edit:default_mix`,
test split) with each checkpoint under three settings — the S preset, the S preset with editing off
(`editing_threshold=None`, same τ_mask), and the S preset plus `LowConfidenceRemask(0.3)` (at most 8
remask steps per block, as `dllm-edit bench --remask`) — and reports exact match, tokens per
forward, the share of functions that parse, what editing did to the model's own drafts
(`verify_confidence.draft_fates`: wrong drafts rewritten / repaired, right drafts broken), and the
exact match of each synthetic family. The synthetic prompts are decoded once per setting, in batches
of 32 with the step trace on: exact match, TPF and the drafts' fates all come from that one decode.

`--bounds` adds two rows that bound what editing can repair: the Q preset, and one forward per
block (`steps=1`, editing off: every position of a block drafted at once from independent
marginals). Editing repairs the errors of parallel drafting; if one forward per block is about as
right as Q, the model's errors are not parallel-drafting errors, and editing has little to repair.

    dllm-edit sft --config examples/recipes/default_model_on_policy.yaml --output_dir runs/default-model-v5
    dllm-edit sft --config examples/recipes/default_model_no_on_policy.yaml
    python benchmarks/editing_ablation.py --model "random only=runs/default-model-no-on-policy" \\
        --model "+ on-policy=runs/default-model-v5" --synthetic 200 --code 50
"""

from __future__ import annotations

import argparse
import statistics

import torch
from verify_confidence import completion_text, decode_traced_batch, draft_fates, fate_table

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.evaluation import decode_prompts, exact_match, parse_rate
from dllm_edit.strategies import LowConfidenceRemask

BLOCK = 32


def settings(bounds: bool = False) -> dict[str, dllm_edit.EditGenerationConfig]:
    """name -> config for 16 new tokens (the synthetic answers); code decodes the same with 128.

    `bounds` adds the Q preset and one forward per block (`steps=1`, editing off).
    """
    speedy = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK)
    remask = LowConfidenceRemask(threshold=0.3, max_steps=8)
    rows = {
        "S": speedy,
        "S, editing off": speedy.replace(editing_threshold=None),
        "S + remasking": speedy.replace(strategies=[*speedy.build_strategies(), remask]),
    }
    if bounds:
        quality = dllm_edit.EditGenerationConfig.from_mode("quality", max_new_tokens=16, block_length=BLOCK)
        rows["Q"] = quality
        rows["one forward per block"] = quality.replace(steps=1, editing_threshold=None)
    return rows


def group_by_family(texts: list[str], rows: list[dict]) -> dict[str, list[tuple[str, dict]]]:
    """family -> [(decoded text, row)], families in sorted order."""
    groups: dict[str, list[tuple[str, dict]]] = {}
    for text, row in zip(texts, rows, strict=True):
        groups.setdefault(row["family"], []).append((text, row))
    return dict(sorted(groups.items()))


@torch.no_grad()
def evaluate(
    model, tokenizer, synthetic: list[dict], code: list[dict], bounds: bool = False
) -> list[tuple[str, ...]]:
    rows = []
    for name, config in settings(bounds).items():
        traced = decode_traced_batch(model, tokenizer, synthetic, config, batch=32)
        texts = [completion_text(t, tokenizer) for t in traced]
        tpf = statistics.fmean(float(t.out.tokens_per_forward[t.row]) for t in traced)
        parses, code_tpf_text = "—", "—"  # no functions asked for (--code 0)
        if code:
            code_config = config.replace(max_new_tokens=128)
            code_texts, code_tpf, _ = decode_prompts(
                model, tokenizer, [r["prompt"] for r in code], code_config, 16
            )
            parses, code_tpf_text = f"{parse_rate(code_texts, code):.1f}", f"{code_tpf:.2f}"
        by_family = " · ".join(
            f"{family} {exact_match([t for t, r in pairs], [r for t, r in pairs]):.0f}"
            for family, pairs in group_by_family(texts, synthetic).items()
        )
        fates = [f for t in traced for f in draft_fates(t)]
        edits = fate_table(fates)
        rows.append(
            (
                name,
                f"{exact_match(texts, synthetic):.1f}",
                f"{tpf:.2f}",
                parses,
                code_tpf_text,
                f"{edits['rewritten']:.1f}",
                f"{edits['repaired']:.1f}",
                f"{edits['broken']:.1f}",
                by_family,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", action="append", required=True, metavar="NAME=PATH", help="a checkpoint to compare"
    )
    parser.add_argument("--synthetic", type=int, default=200, help="held-out synthetic prompts")
    parser.add_argument("--code", type=int, default=50, help="held-out functions (0: none)")
    parser.add_argument(
        "--bounds",
        action="store_true",
        help="add the Q preset and one forward per block (steps=1, editing off): what editing can repair",
    )
    args = parser.parse_args()
    if args.synthetic < 1:
        parser.error(f"--synthetic must be >= 1 (the drafts are followed on them), got {args.synthetic}")
    if args.code < 0:
        parser.error(f"--code must be >= 0 (0 skips the functions), got {args.code}")
    models = []
    for spec in args.model:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            parser.error(f"--model takes NAME=PATH, got {spec!r}")
        models.append((name, path))
    test = builtin_rows("dllm_edit:default_mix", "test")
    synthetic = [r for r in test if r["kind"] == "synthetic"][: args.synthetic]
    code = [r for r in test if r["kind"] == "code"][: args.code]

    from dllm_edit.cli.loading import load_model_and_tokenizer

    header = [
        "model",
        "decoding",
        "exact match (%)",
        "TPF",
        "code parses (%)",
        "TPF (code)",
        "wrong drafts rewritten (%)",
        "repaired (%)",
        "right drafts broken (%)",
        "exact match by family (%)",
    ]
    print(
        f"{len(synthetic)} held-out synthetic prompts (drafts followed in each setting's own decode), "
        f"{len(code)} functions\n"
    )
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    for name, path in models:
        model, tokenizer = load_model_and_tokenizer(path)
        model.eval()
        for row in evaluate(model, tokenizer, synthetic, code, args.bounds):
            print(f"| {name} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
