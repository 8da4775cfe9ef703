"""Evaluate a checkpoint trained by the shipped recipe; optionally install it as the shipped model
(`dllm_edit/default_model/`, with its model card quoting both stages of the recipe).

    python benchmarks/ar_baseline.py --config examples/recipes/default_model_medium_ar_stage.yaml \\
        --output_dir runs/ar-medium-1200                                 # stage 1: autoregressive start
    dllm-edit sft --config examples/recipes/default_model_medium_two_stage.yaml --seed 1 \\
        --output_dir runs/default-model-medium-two-stage-seed1           # stage 2: the conversion
    python benchmarks/default_model.py runs/default-model-medium-two-stage-seed1        # evaluate
    python benchmarks/default_model.py runs/default-model-medium-two-stage-seed1 --install \\
        --stage-two-args "--seed 1 --output_dir runs/default-model-medium-two-stage-seed1"  # and ship

`--install` copies it into the package (or `--target DIR`) with a model card quoting both recipe
files (`--recipes STAGE_ONE STAGE_TWO`, default the shipped recipe's) and the flags the second stage
ran with (`--stage-two-args`); these options, `--train-seconds` and `--train-note` only shape the
card, so without `--install` they are refused.

Held-out measures (splits from another seed / whole held-out modules, never seen in training):

- synthetic tasks: exact match and tokens per forward for the Q preset, the S preset, and M2T only
  (the S preset with editing off);
- editing: of the S preset's own wrong drafts on the synthetic prompts (the token M2T first wrote at a
  position, where it differs from the reference), the share a later T2T edit rewrote, the share it
  repaired, and the share of right drafts an edit broke (`benchmarks/verify_confidence.py`);
- code (functions of held-out standard-library modules, prompt = the `def` header): the fraction of
  completions that parse (`ast`), tokens per forward, and a likelihood bound: the masked-diffusion ELBO
  of the held-out function bodies in nats per token (`dllm_edit.trainers.elbo_token_logps`, 8 stratified
  timesteps, `inverse_t` weights; lower is better).
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer
from verify_confidence import decode_traced_batch, draft_fates, fate_table

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.evaluation import decode_prompts, exact_match, parse_rate
from dllm_edit.trainers import DiffusionForward, elbo_token_logps, resolve_attention_form

PRESETS = {
    "Q": dict(mode="quality"),
    "S": dict(mode="speedy"),
    "M2T only": dict(mode="speedy", editing_threshold=None),
}
BLOCK = 32
#: The shipped recipe's two stages (examples/recipes/), quoted in the model card as committed.
RECIPE_FILES = ("default_model_medium_ar_stage.yaml", "default_model_medium_two_stage.yaml")
RECIPES_DIR = Path(__file__).resolve().parents[1] / "examples" / "recipes"


def decode(model, tokenizer, prompts: list[str], preset: dict, max_new_tokens: int, batch: int = 32):
    """Completions (text up to EOS) and the mean tokens per forward."""
    overrides = {k: v for k, v in preset.items() if k != "mode"}
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        preset["mode"], max_new_tokens=max_new_tokens, block_length=BLOCK, **overrides
    )
    texts, tpf, _ = decode_prompts(model, tokenizer, prompts, cfg, batch)
    return texts, tpf


@torch.no_grad()
def elbo_nats_per_token(model, tokenizer, rows: list[dict], timesteps: int = 8) -> float:
    """Masked-diffusion ELBO of the completions given their prompts, in nats per completion token."""
    forward = DiffusionForward(model, resolve_attention_form(model, "auto"), BLOCK)  # as trained
    total, tokens = 0.0, 0
    for i in range(0, len(rows), 16):
        chunk = rows[i : i + 16]
        seqs = [tokenizer(r["prompt"] + r["completion"])["input_ids"] for r in chunk]
        prompt_lens = [len(tokenizer(r["prompt"])["input_ids"]) for r in chunk]
        width = -(-max(len(s) for s in seqs) // BLOCK) * BLOCK
        clean = torch.full((len(chunk), width), tokenizer.pad_token_id)
        valid = torch.zeros((len(chunk), width), dtype=torch.bool)
        supervised = torch.zeros_like(valid)
        for j, (s, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
            clean[j, : len(s)] = torch.tensor(s)
            valid[j, : len(s)] = True
            supervised[j, p : len(s)] = True
        seeds = torch.arange(i, i + len(chunk))
        logp = elbo_token_logps(
            forward,
            clean,
            valid,
            supervised,
            seeds,
            mask_token_id=tokenizer.mask_token_id,
            num_timesteps=timesteps,
            t_min=0.05,
            t_max=1.0,
        )
        total += float(logp.sum())
        tokens += int(supervised.sum())
    return -total / tokens


@dataclass
class Evaluation:
    """What the card reports: one row per preset, the code likelihood bound, the drafts' fates."""

    rows: list[tuple[str, float, float, float, float]]  # (preset, exact %, TPF, parses %, code TPF)
    bound: float  # nats per code token
    edits: dict  # `verify_confidence.fate_table` of the S preset's drafts
    synthetic: int  # prompts decoded
    code: int  # functions decoded

    def editing_sentence(self) -> str:
        e = self.edits
        return (
            f"Of its {e['wrong_drafts']} wrong drafts on the synthetic prompts (S preset) the model "
            f"rewrote {e['rewritten']:.1f}% and repaired {e['repaired']:.1f}%; edits broke "
            f"{e['broken']:.1f}% of its {e['right_drafts']} right drafts."
        )

    def table(self) -> str:
        lines = [
            "| preset | synthetic exact match (%) | TPF (synthetic) | code that parses (%) | TPF (code) |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [f"| {n} | {a:.1f} | {t:.2f} | {p:.1f} | {ct:.2f} |" for n, a, t, p, ct in self.rows]
        return "\n".join(lines)


def evaluate(model, tokenizer, synthetic: list[dict], code: list[dict]) -> Evaluation:
    """Decode the held-out prompts with each preset (printing as it goes) and follow the S drafts."""
    rows = []
    for name, preset in PRESETS.items():
        texts, tpf = decode(model, tokenizer, [r["prompt"] for r in synthetic], preset, 16)
        acc = exact_match(texts, synthetic)
        ctexts, ctpf = decode(model, tokenizer, [r["prompt"] for r in code], preset, 128)
        parse = parse_rate(ctexts, code)
        rows.append((name, acc, tpf, parse, ctpf))
        print(f"{name:<9} synthetic exact match {acc:5.1f}%  TPF {tpf:.2f}", end="   ")
        print(f"code parses {parse:5.1f}%  TPF {ctpf:.2f}")
    bound = elbo_nats_per_token(model, tokenizer, code)
    print(f"held-out code ELBO bound: {bound:.3f} nats/token")
    speedy = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK)
    fates = [f for t in decode_traced_batch(model, tokenizer, synthetic, speedy, 16) for f in draft_fates(t)]
    return Evaluation(rows, bound, fate_table(fates), len(synthetic), len(code))


def install(
    model,
    tokenizer,
    evaluation: Evaluation,
    target: Path,
    *,
    checkpoint: str,
    recipes: tuple[str, str] = RECIPE_FILES,
    stage_two_args: str = "",
    train_seconds: float | None = None,
    train_note: str = "",
) -> None:
    """Write the model, a full decoding config, the tokenizer, the card and eval.json to `target`
    (replacing what is there). The card quotes the two recipe files of examples/recipes/ as committed.

    Raises:
        ValueError: `target` exists but is not a model folder (it has no config.json): it is not
            deleted.
    """
    check_target(target)
    if target.exists():
        shutil.rmtree(target)
    model.save_pretrained(target)
    # a full decoding config (a plain one written "from the model config" loses our fields on load)
    dllm_edit.EditGenerationConfig(
        block_length=BLOCK,
        mask_token_id=tokenizer.mask_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(target)
    tokenizer.save_pretrained(target)
    # transformers 5 names the fast tokenizer class "TokenizersBackend", which transformers 4.x (still
    # needed by LLaDA2.x remote code) cannot import; "PreTrainedTokenizerFast" loads in both.
    tokenizer_config = target / "tokenizer_config.json"
    fields = json.loads(tokenizer_config.read_text())
    fields["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_config.write_text(json.dumps(fields, indent=2) + "\n")
    (target / "README.md").write_text(
        card(model, evaluation, checkpoint, recipes, stage_two_args, train_seconds, train_note)
    )
    (target / "eval.json").write_text(
        json.dumps(
            {"rows": evaluation.rows, "elbo_nats_per_token": evaluation.bound, "editing": evaluation.edits},
            indent=1,
        )
    )
    print(f"installed in {target}")


def check_target(target: Path) -> None:
    """Refuse to replace a folder that holds anything but a model (the install deletes it first)."""
    if target.exists() and not (target / "config.json").is_file():
        raise ValueError(
            f"--target {str(target)!r} exists and is not a model folder (no config.json); the install "
            "replaces the folder it writes to, so it refuses this one. Name a new folder or a model folder."
        )


def wrap_prose(markdown: str, width: int = 100) -> str:
    """Refill the prose paragraphs of a Markdown text to `width` columns; code blocks, tables,
    headings, lists and front matter are kept as they are.

    Examples:
        >>> wrap_prose("# T\\n\\nsome words here\\nand more\\n\\n| a |\\n", width=12)
        '# T\\n\\nsome words\\nhere and\\nmore\\n\\n| a |\\n'
    """
    import textwrap

    out: list[str] = []
    paragraph: list[str] = []
    fenced = front_matter = False

    def flush() -> None:
        if paragraph:
            out.extend(
                textwrap.wrap(" ".join(paragraph), width, break_on_hyphens=False, break_long_words=False)
            )
            paragraph.clear()

    for index, line in enumerate(markdown.split("\n")):
        if line.strip() == "---" and (index == 0 or front_matter):
            front_matter = index == 0
        if line.startswith("```"):
            fenced = not fenced
        verbatim = fenced or front_matter or line.startswith(("```", "#", "|", "- ", "---", "    "))
        if verbatim or not line.strip():
            flush()
            out.append(line)
        else:
            paragraph.append(line.strip())
    flush()
    return "\n".join(out)


def weights_fingerprint(checkpoint: str) -> str:
    """A card sentence with the sha256 of the checkpoint's `model.safetensors` (the file training
    wrote, before the install re-saves it), so that a rerun of the recipe on the same kind of CPU can
    be compared byte for byte without the original files; empty when the checkpoint has no such file.
    (On another CPU the same recipe writes other bytes: an Intel Xeon rerun of the shipped recipe,
    docs/benchmarks.md.)"""
    import hashlib

    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        return ""
    with weights.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    return f"The weights training wrote (`{weights}`) have sha256 `{digest}`; a rerun of the recipe \
on the same kind of CPU that writes the same file reproduces this model. Another CPU's kernels round \
float sums differently, so a rerun there writes other weights: compare it by this evaluation."


def card(
    model,
    evaluation: Evaluation,
    checkpoint: str,
    recipes: tuple[str, str],
    stage_two_args: str,
    train_seconds: float | None,
    train_note: str,
) -> str:
    """The model card (README.md): the model, its data, the held-out results and both recipe stages."""
    params = sum(p.numel() for p in model.parameters())
    stage_one_file, stage_two_file = recipes
    stage_one, stage_two = ((RECIPES_DIR / name).read_text() for name in recipes)
    flags = f" {stage_two_args.strip()}" if stage_two_args.strip() else ""
    stage_one_output = yaml.safe_load(stage_two)["model_name_or_path"]  # stage 2 starts where 1 saved
    trained = f"{train_seconds / 60:.0f} minutes" if train_seconds else "not recorded"
    declared = getattr(model.config, "dllm_edit_adapter", None)
    adapter = f" with the `{declared}` adapter (declared in config.json)" if declared else ""
    note = f" {train_note}" if train_note else ""
    size = (
        f"{params / 1e6:.1f} M parameters, hidden {model.config.hidden_size}, "
        f"{model.config.num_hidden_layers} layers, vocabulary {model.config.vocab_size}, byte-level BPE"
    )
    return wrap_prose(f"""---
library_name: transformers
tags: [dllm-edit, diffusion-lm, block-diffusion, editable-decoding]
---

# dllm_edit default model

A small block-causal diffusion language model shipped inside `dllm_edit` so that the toolkit runs
offline out of the box (`dllm_edit.load_default()`, `dllm-edit generate`). Llama architecture
({size}), decoding block-causally in blocks of {BLOCK}{adapter}. It is a demonstration model: it was \
trained for {trained} on a 2-core CPU.{note}

## Data

Built by the recipe itself, nothing downloaded (`dllm_edit.data.builtin`, `dllm_edit:default_mix`):
three verifiable synthetic task families with answers of 2 to 10 tokens (sorting digits, reversing
digits, closing brackets; 5,000 examples each) and the functions of the Python standard library
(prompt = the `def` header, completion = the body), with whole modules held out for evaluation.

## Held-out results

Synthetic: {evaluation.synthetic} prompts from another seed, exact match. Code: {evaluation.code} \
functions of held-out modules, greedy completions that parse with `ast`; likelihood bound \
(masked-diffusion ELBO of the bodies, 8 timesteps): {evaluation.bound:.3f} nats/token. TPF = completion \
tokens per forward. "M2T only" is this model decoded with the S preset and editing off \
(`editing_threshold=None`).

{evaluation.table()}

{evaluation.editing_sentence()} (A draft is the token M2T first wrote at a position; a rewrite is \
any later T2T edit of it: `benchmarks/verify_confidence.py`.)

Command: `python benchmarks/default_model.py {checkpoint} --install`. The files load with
transformers 4.57 and 5.x (`AutoModelForCausalLM`, `AutoTokenizer`; no remote code). \
{weights_fingerprint(checkpoint)}

## Recipe

Two stages, both committed under `examples/recipes/` and quoted here as they are.

Stage 1 (`examples/recipes/{stage_one_file}`), the autoregressive start:
`python benchmarks/ar_baseline.py --config examples/recipes/{stage_one_file} --output_dir {stage_one_output}`

```yaml
{stage_one}```

Stage 2 (`examples/recipes/{stage_two_file}`), the conversion, trained with
`dllm-edit sft --config examples/recipes/{stage_two_file}{flags}`:

```yaml
{stage_two}```
""")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint")
    parser.add_argument("--train-seconds", type=float, default=None, help="wall time of the training run")
    parser.add_argument(
        "--train-note", default="", help="a sentence for the model card after the training time"
    )
    parser.add_argument("--synthetic", type=int, default=400, help="held-out synthetic prompts")
    parser.add_argument("--code", type=int, default=100, help="held-out code prompts")
    parser.add_argument(
        "--install", action="store_true", help="copy into dllm_edit/default_model/ with a card"
    )
    parser.add_argument(
        "--recipes",
        nargs=2,
        default=list(RECIPE_FILES),
        metavar=("STAGE_ONE", "STAGE_TWO"),
        help="the two recipe files under examples/recipes/ that trained it, quoted in the card "
        f"(default: {' '.join(RECIPE_FILES)})",
    )
    parser.add_argument(
        "--stage-two-args",
        default="",
        help="flags given to `dllm-edit sft` after the stage-two recipe, quoted in the card's "
        "command (e.g. '--seed 1 --output_dir runs/x')",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="where --install writes (default: the package's dllm_edit/default_model/)",
    )
    args = parser.parse_args()
    missing = [name for name in args.recipes if not (RECIPES_DIR / name).is_file()]
    if missing:
        parser.error(f"--recipes names files of examples/recipes/; {missing} are not there")
    if args.synthetic < 1 or args.code < 1:
        parser.error(f"--synthetic and --code must be >= 1, got {args.synthetic} and {args.code}")
    install_only = {
        "--target": args.target is not None,
        "--stage-two-args": bool(args.stage_two_args),
        "--recipes": tuple(args.recipes) != RECIPE_FILES,
        "--train-seconds": args.train_seconds is not None,
        "--train-note": bool(args.train_note),
    }
    unused = [name for name, given in install_only.items() if given]
    if unused and not args.install:
        parser.error(f"{', '.join(unused)} only shape the installed model card; add --install or drop them")

    target = Path(args.target) if args.target else Path(dllm_edit.__file__).parent / "default_model"
    if args.install:
        try:  # before the evaluation's minutes, not after
            check_target(target)
        except ValueError as error:
            parser.error(str(error))
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    test = builtin_rows("dllm_edit:default_mix", "test")
    synthetic = [r for r in test if r["kind"] == "synthetic"][: args.synthetic]
    code = [r for r in test if r["kind"] == "code"][: args.code]
    evaluation = evaluate(model, tokenizer, synthetic, code)
    print(evaluation.editing_sentence())
    print("\n" + evaluation.table())
    if args.install:
        install(
            model,
            tokenizer,
            evaluation,
            target,
            checkpoint=args.checkpoint,
            recipes=tuple(args.recipes),
            stage_two_args=args.stage_two_args,
            train_seconds=args.train_seconds,
            train_note=args.train_note,
        )


if __name__ == "__main__":
    main()
