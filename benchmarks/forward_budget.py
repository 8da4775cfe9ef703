"""Where do the forwards go? The forward budget of each preset on the shipped model, step by step.

Tokens per forward (TPF) counts the completion tokens returned (up to the first EOS) over all the
forwards a row spent. Not every forward can be saved by a lower unmask threshold: every block that
is decoded ends with at least one verification forward once its last mask is filled (the presets'
`max_post_steps` >= 1), and the positions after EOS up to the block's end (and past `max_new_tokens`)
must be unmasked too before the block ends. This script decodes held-out prompts one at a time with
`output_trace=True` and sorts every forward into one of:

- **draft, kept**: masks were left and the step unmasked at least one returned completion token;
- **draft, tail only**: masks were left but the step only unmasked positions after the first EOS or
  past `max_new_tokens` (work that is not counted as output);
- **verify, first**: the first forward of a block with no mask left (every block spends one);
- **verify, after an edit**: a later mask-free forward, spent because the one before it edited (the
  reference ends a block only after a mask-free forward that edits nothing).

The last kind is what editing costs in forwards: an edit made while masks remain is free, one made
in a verification forward buys another forward. The script also reports the median probability of
the candidates committed to returned tokens (how sure the model is when it drafts).

It also reports the *floor*: the fewest forwards any threshold could spend on the row with the same
blocks (one drafting forward plus one verification forward per decoded block), and the *ceiling*:
the TPF the S preset's rows would reach if every one of them were decoded at its floor (the mean
over rows of kept tokens / floor, the same mean as TPF). No threshold can go past it on those rows,
so `ceiling / TPF(Q)` is the largest S / Q ratio of tokens per forward the rows allow, however good
the model's drafts and edits (a bound, not a forecast: a different model writes other tokens).

    python benchmarks/forward_budget.py                      # 100 synthetic prompts, 20 functions
    python benchmarks/forward_budget.py --model runs/default-model --synthetic 40 --code 10
    python benchmarks/forward_budget.py --by-length --code 0   # S / Q by family and answer length
    python benchmarks/forward_budget.py --synthetic 400 --code 100 --code-tokens 128  # the card's rows
"""

from __future__ import annotations

import argparse
import statistics

import torch

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.generation import generate

PRESETS = {
    "Q": dict(mode="quality"),
    "S": dict(mode="speedy"),
    "τ_mask 0.3, S": dict(mode="speedy", threshold=0.3),
}
BLOCK = 32
KINDS = ("draft, kept", "draft, tail only", "verify, first", "verify, after an edit")


@torch.no_grad()
def budget(model, tokenizer, prompt: str, preset: dict, max_new_tokens: int) -> dict[str, float]:
    """The forwards of one decode, by kind, with the kept tokens and the floor."""
    overrides = {k: v for k, v in preset.items() if k != "mode"}
    config = dllm_edit.EditGenerationConfig.from_mode(
        preset["mode"], max_new_tokens=max_new_tokens, block_length=BLOCK, **overrides
    )
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]  # [1, P]
    prompt_length = ids.shape[1]
    out = generate(
        model,
        ids,
        generation_config=config,
        tokenizer=tokenizer,
        return_dict_in_generate=True,
        output_trace=True,
    )
    kept = int(out.completion_lengths[0])  # returned tokens incl. EOS
    counts = dict.fromkeys(KINDS, 0)
    blocks: set[int] = set()
    verified: set[int] = set()  # blocks that have had their first mask-free forward
    kept_probs: list[float] = []  # candidate probability of every commit to a returned token
    for step in out.trace:
        if not bool(step.active[0]):
            continue
        blocks.add(step.block)
        width = step.masked.shape[1]
        slots = torch.arange(step.span_start, step.span_start + width)  # [S] canvas slots = positions
        in_kept = (slots >= prompt_length) & (slots < prompt_length + kept)  # [S]
        kept_commits = step.commit[0] & in_kept  # [S]
        kept_probs += step.probs[0][kept_commits].tolist()
        if not bool(step.masked[0].any()):
            counts["verify, after an edit" if step.block in verified else "verify, first"] += 1
            verified.add(step.block)
        elif bool(kept_commits.any()):
            counts["draft, kept"] += 1
        else:
            counts["draft, tail only"] += 1
    forwards = sum(counts.values())
    if forwards != int(out.num_forwards[0]):
        raise RuntimeError(f"trace has {forwards} forwards, the output says {int(out.num_forwards[0])}")
    return {
        **counts,
        "forwards": forwards,
        "kept": kept,
        "floor": 2 * len(blocks),
        "edits": int(out.num_edits[0]),
        "kept_probs": kept_probs,
    }


def mean_tpf(runs: list[dict[str, float]]) -> float:
    """Mean over rows of kept tokens per forward (the paper's TPF, as `EditGenerationOutput` reports it)."""
    return statistics.fmean(run["kept"] / run["forwards"] for run in runs)


def ceiling_tpf(runs: list[dict[str, float]]) -> float:
    """The TPF of the same rows if each were decoded at its floor (one drafting and one verification
    forward per block): the most any threshold could reach on them, since `forwards >= floor`."""
    return statistics.fmean(run["kept"] / run["floor"] for run in runs)


def edit_cost(task: str, preset: str, runs: list[dict[str, float]]) -> str:
    """What the verification forwards bought by edits cost a preset's TPF (a reading of the table).

    The TPF the same rows would show with those forwards taken away is not what the preset would reach
    without editing (its edits changed the tokens); it bounds what editing costs in forwards.
    """
    without = statistics.fmean(run["kept"] / (run["forwards"] - run["verify, after an edit"]) for run in runs)
    share = statistics.fmean(run["verify, after an edit"] > 0 for run in runs)
    return (
        f"{task}, {preset}: {100 * share:.0f}% of rows spend verification forwards after an edit; "
        f"without those forwards the same rows would be at {without:.2f} TPF instead of {mean_tpf(runs):.2f}."
    )


def ceiling_sentence(task: str, q: list[dict[str, float]], s: list[dict[str, float]]) -> str:
    """Q's and S's forwards against the floor, and the S / Q TPF ratio the floor allows."""
    forwards_q = statistics.fmean(run["forwards"] for run in q)
    forwards_s = statistics.fmean(run["forwards"] for run in s)
    floor = statistics.fmean(run["floor"] for run in s)
    tpf_q, tpf_s, ceiling = mean_tpf(q), mean_tpf(s), ceiling_tpf(s)
    return (
        f"{task}: Q spends {forwards_q:.2f} forwards a row, S {forwards_s:.2f}; no threshold can go below "
        f"{floor:.2f} on S's blocks. S is at {tpf_s:.2f} TPF, {tpf_s / tpf_q:.2f}x Q's {tpf_q:.2f}; "
        f"with every row at its floor it would be at {ceiling:.2f} TPF, so no preset can reach more "
        f"than {ceiling / tpf_q:.2f}x Q's TPF on these rows."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder (default: the shipped model)")
    parser.add_argument("--synthetic", type=int, default=100, help="held-out synthetic prompts")
    parser.add_argument("--code", type=int, default=20, help="held-out functions")
    parser.add_argument(
        "--code-tokens", type=int, default=64, help="max_new_tokens for code (the model card uses 128)"
    )
    parser.add_argument(
        "--by-length", action="store_true", help="also tabulate synthetic rows by family and answer length"
    )
    args = parser.parse_args()
    if args.code_tokens < 1:
        parser.error(f"--code-tokens must be >= 1, got {args.code_tokens}")
    if args.model is None:
        model, tokenizer = dllm_edit.load_default()
    else:
        from dllm_edit.cli.loading import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(args.model)
        model.eval()
    test = builtin_rows("dllm_edit:default_mix", "test")
    tasks = {
        "synthetic": ([r for r in test if r["kind"] == "synthetic"][: args.synthetic], 16),
        "code": ([r for r in test if r["kind"] == "code"][: args.code], args.code_tokens),
    }
    preset_runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    columns = ["task", "preset", "forwards", *KINDS, "kept tokens", "TPF", "floor", "edits", "median p kept"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|" + "---:|" * (len(columns) - 2))
    edit_costs: list[str] = []
    for task, (rows, max_new_tokens) in tasks.items():
        if not rows:
            continue
        preset_runs[task] = {}
        for name, preset in PRESETS.items():
            runs = [budget(model, tokenizer, r["prompt"], preset, max_new_tokens) for r in rows]
            preset_runs[task][name] = runs
            mean = {k: statistics.fmean(run[k] for run in runs) for k in runs[0] if k != "kept_probs"}
            tpf = mean_tpf(runs)
            median_p = statistics.median(p for run in runs for p in run["kept_probs"])
            kinds = " | ".join(f"{mean[kind]:.2f}" for kind in KINDS)
            print(
                f"| {task} | {name} | {mean['forwards']:.2f} | {kinds} | {mean['kept']:.2f} | "
                f"{tpf:.2f} | {mean['floor']:.2f} | {sum(run['edits'] for run in runs)} | {median_p:.2f} |"
            )
            if mean["verify, after an edit"] > 0:
                edit_costs.append(edit_cost(task, name, runs))
    print()
    for task, runs_of in preset_runs.items():
        print(ceiling_sentence(task, runs_of["Q"], runs_of["S"]))
    for line in edit_costs:
        print(line)
    if args.by_length and "synthetic" in preset_runs:
        print_by_length(tasks["synthetic"][0], preset_runs["synthetic"], tokenizer)


def print_by_length(rows: list[dict], runs: dict[str, list[dict[str, float]]], tokenizer) -> None:
    """Q and S forwards and TPF grouped by family and by the answer's length in tokens (EOS excluded)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for index, row in enumerate(rows):
        length = len(tokenizer(row["completion"])["input_ids"])
        for key in ((row["family"], length), ("all", length)):
            groups.setdefault(key, []).append(index)
    print("\n| family | answer tokens | rows | Q forwards | S forwards | TPF Q | TPF S | S / Q TPF |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (family, length), indices in sorted(groups.items(), key=lambda item: (item[0][0] == "all", item[0])):
        q = [runs["Q"][i] for i in indices]
        s = [runs["S"][i] for i in indices]
        forwards_q = statistics.fmean(run["forwards"] for run in q)
        forwards_s = statistics.fmean(run["forwards"] for run in s)
        tpf_q, tpf_s = mean_tpf(q), mean_tpf(s)
        print(
            f"| {family} | {length} | {len(indices)} | {forwards_q:.2f} | {forwards_s:.2f} | "
            f"{tpf_q:.2f} | {tpf_s:.2f} | {tpf_s / tpf_q:.2f} |"
        )


if __name__ == "__main__":
    main()
