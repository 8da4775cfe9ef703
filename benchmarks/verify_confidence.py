"""Why does a model not edit? How sure it is of its own tokens at the last verification forward.

T2T editing rewrites a written token when the model's argmax there differs from it (S preset:
`editing_threshold=0.0`, any disagreement) or is confident enough (Q preset). A model that copies
whatever it sees never disagrees with its own draft, right or wrong, so it never edits. This script
decodes held-out synthetic prompts one at a time with `output_trace=True`, takes the last
verification step (no mask left) of each row's first block, and reports the probability the model
gives to the candidate at each completion position — on the positions the draft got wrong and on
those it got right — with the share of positions where the candidate is the token already there.

    python benchmarks/verify_confidence.py --model runs/default-model-v4
    python benchmarks/verify_confidence.py --model runs/default-model --families sort --prompts 40
"""

from __future__ import annotations

import argparse
import statistics

import torch

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.generation import generate

BLOCK = 32


@torch.no_grad()
def verify_step_scores(model, tokenizer, row: dict, config) -> list[tuple[bool, float, bool]]:
    """(draft right at this position, candidate probability, candidate = current token) per position."""
    ids = tokenizer(row["prompt"], return_tensors="pt")["input_ids"]  # [1, P]
    prompt_length = ids.shape[1]
    out = generate(
        model,
        ids,
        generation_config=config,
        tokenizer=tokenizer,
        return_dict_in_generate=True,
        output_trace=True,
    )
    target = tokenizer(row["completion"])["input_ids"] + [tokenizer.eos_token_id]
    verify = [step for step in out.trace if bool(step.active[0]) and not bool(step.masked[0].any())]
    if not verify:
        return []
    last = [step for step in verify if step.block == verify[0].block][-1]  # the first block's last verify
    scores = []
    for k, wanted in enumerate(target):
        slot = prompt_length + k - last.span_start  # position in the step's span
        if not 0 <= slot < last.before.shape[1]:
            continue
        written = int(last.before[0, slot])
        kept = not bool(last.edit[0, slot])
        scores.append((written == wanted, float(last.probs[0, slot]), kept))
    return scores


def summary(values: list[float]) -> str:
    if not values:
        return "— | — | —"
    share = 100 * statistics.fmean(v > 0.9 for v in values)
    return f"{len(values)} | {statistics.median(values):.3f} | {share:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder (default: the shipped model)")
    parser.add_argument("--prompts", type=int, default=80, help="held-out synthetic prompts")
    parser.add_argument("--families", nargs="+", default=None, help="only these synthetic families")
    parser.add_argument("--mode", default="speedy", choices=["speedy", "quality"], help="the decoding preset")
    args = parser.parse_args()
    if args.model is None:
        model, tokenizer = dllm_edit.load_default()
    else:
        from dllm_edit.cli.loading import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(args.model)
        model.eval()
    rows = [r for r in builtin_rows("dllm_edit:default_mix", "test") if r["kind"] == "synthetic"]
    if args.families:
        unknown = sorted(set(args.families) - {r["family"] for r in rows})
        if unknown:
            parser.error(f"--families {unknown} are not in the built-in mix")
        rows = [r for r in rows if r["family"] in args.families]
    rows = rows[: args.prompts]
    config = dllm_edit.EditGenerationConfig.from_mode(args.mode, max_new_tokens=16, block_length=BLOCK)
    wrong, right, kept_wrong = [], [], []
    for row in rows:
        for is_right, prob, kept in verify_step_scores(model, tokenizer, row, config):
            (right if is_right else wrong).append(prob)
            if not is_right:
                kept_wrong.append(kept)
    print(f"{len(rows)} prompts, {args.mode} preset, last verification step of the first block\n")
    print("| draft at the position | positions | median candidate probability | candidate > 0.9 (%) |")
    print("|---|---:|---:|---:|")
    print(f"| wrong | {summary(wrong)} |")
    print(f"| right | {summary(right)} |")
    if kept_wrong:
        print(
            f"\nThe model kept its own wrong token at {100 * statistics.fmean(kept_wrong):.0f}% of the "
            f"{len(kept_wrong)} wrong positions (an edit needs its argmax to differ)."
        )


if __name__ == "__main__":
    main()
