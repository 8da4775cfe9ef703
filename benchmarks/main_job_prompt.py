"""Find prompts for the README's main job: held-out prompts on which `dllm-edit generate PROMPT`
(nothing else: the speedy preset, greedy, the CLI's defaults) writes the right answer in more than one
token per forward with at least one edit that repairs the draft.

    python benchmarks/main_job_prompt.py                         # the shipped model, every family
    python benchmarks/main_job_prompt.py runs/default-model-medium-two-stage --family sort --top 10

An edit *repairs* when it rewrites a completion token that differs from the reference into the
reference's token at that position; the final text must then equal the reference. Each prompt is
decoded exactly as the CLI decodes it (`dllm_edit.cli.decode.Session`), one prompt at a time, so the
edits, forwards and tokens per forward printed here are the ones `dllm-edit generate --json` prints.
The prompts are the held-out test split of `dllm_edit:default_mix` (never seen in training). The table
lists the qualifying prompts, the most repairs first, then the most tokens per forward, then the
shortest prompt (a README example should be short), and a summary line counts them per family.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from dllm_edit.cli.decode import Session, build_generate_parser
from dllm_edit.data.builtin import builtin_rows


def repairs(result: dict[str, Any], reference_tokens: list[str]) -> list[dict[str, Any]]:
    """The edits of a CLI result that turn a wrong token into the reference's token at its position.

    Examples:
        >>> edit = {"forward": 2, "position": 1, "from": "7", "to": "8"}
        >>> repairs({"edits": [edit]}, ["7", "8"])
        [{'forward': 2, 'position': 1, 'from': '7', 'to': '8'}]
        >>> repairs({"edits": [edit]}, ["7", "7"])
        []
    """
    found = []
    for edit in result["edits"]:
        position = edit["position"]
        if position < len(reference_tokens):
            wanted = reference_tokens[position]
            if edit["to"] == wanted and edit["from"] != wanted:
                found.append(edit)
    return found


def search(model: str | None, family: str | None, prompts: int) -> tuple[list[dict[str, Any]], Counter]:
    """Decode each held-out prompt as `dllm-edit generate PROMPT --json` does; the qualifying ones."""
    rows = [r for r in builtin_rows("dllm_edit:default_mix", "test") if r["kind"] == "synthetic"]
    if family is not None:
        families = sorted({r["family"] for r in rows})
        if family not in families:
            raise ValueError(f"--family must be one of {families}, got {family!r}.")
        rows = [r for r in rows if r["family"] == family]
    rows = rows[:prompts]
    argv = [rows[0]["prompt"]] + ([] if model is None else ["--model", model])
    session = Session(build_generate_parser().parse_args(argv))  # loads the model once
    config = session.config("speedy")  # `dllm-edit generate` with no options
    found = []
    for row in rows:
        session.input_ids = session.encode(row["prompt"])  # [1, P], as the CLI encodes its prompt
        result = session.run(config)
        reference_ids = session.tokenizer(row["completion"], add_special_tokens=False)["input_ids"]
        reference_tokens = [session.tokenizer.decode([t]) for t in reference_ids]
        repaired = repairs(result, reference_tokens)
        if result["text"] == row["completion"] and result["tokens_per_forward"] > 1.0 and repaired:
            found.append({"prompt": row["prompt"], "family": row["family"], "repairs": repaired, **result})
    found.sort(key=lambda r: (-len(r["repairs"]), -r["tokens_per_forward"], len(r["prompt"])))
    return found, Counter(r["family"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", nargs="?", default=None, help="a model folder (default: the shipped one)")
    parser.add_argument("--family", default=None, help="one synthetic family (default: all)")
    parser.add_argument("--prompts", type=int, default=300, help="held-out prompts to try (default 300)")
    parser.add_argument("--top", type=int, default=15, help="rows of the table (default 15)")
    args = parser.parse_args()
    if args.prompts < 1 or args.top < 1:
        raise ValueError(f"--prompts and --top must be >= 1, got {args.prompts} and {args.top}.")
    found, tried = search(args.model, args.family, args.prompts)
    print("| prompt | answer | forwards | TPF | repairing edits | all edits |")
    print("|---|---|---:|---:|---|---:|")
    for r in found[: args.top]:
        shown = ", ".join(
            f"f{e['forward']} #{e['position']} {e['from']!r}->{e['to']!r}" for e in r["repairs"]
        )
        print(
            f"| `{r['prompt']}` | `{r['text']}` | {r['num_forwards']} | {r['tokens_per_forward']:.2f} "
            f"| {shown} | {r['num_edits']} |"
        )
    per_family = Counter(r["family"] for r in found)
    print(
        "Qualifying (right, > 1 token per forward, a repairing edit): "
        + ", ".join(f"{f} {per_family.get(f, 0)} of {n}" for f, n in sorted(tried.items()))
    )


if __name__ == "__main__":
    main()
