"""Train the autoregressive baseline of a diffusion recipe: same starting model, data and budget.

What a user would otherwise pick is an ordinary causal LM of the same size, trained on the same data
and decoded with plain `model.generate`. This script reads a `dllm-edit sft` recipe (by default the
from-scratch one, default_model_from_scratch.yaml), keeps what defines the budget — starting model,
dataset, steps, batch size, maximum length, optimiser, schedule, seed — and trains with TRL's own
`SFTTrainer` (next-token loss on the completion, causal attention) instead of the edit-aware
objective. The trade-off benchmark then compares it with `--ar-model`:

    python benchmarks/ar_baseline.py                       # -> runs/default-model-ar
    dllm-edit bench --model edit=runs/default-model --model m2t=runs/default-model-m2t \\
        --ar-model ar=runs/default-model-ar --plot tradeoff.png

It is also stage 1 of the shipped model's recipe (an autoregressive start, then the conversion):

    python benchmarks/ar_baseline.py --config examples/recipes/default_model_ar_stage.yaml \\
        --output_dir runs/ar-small-1200
    dllm-edit sft --config examples/recipes/default_model.yaml

Later `--key value` pairs override the recipe (`--model_name_or_path dllm_edit:init/tiny`) or set any
`SFTConfig` field (`--max_steps 50`). It trains in resumable chunks as `dllm-edit sft` does: with
`save_strategy: steps` in the recipe, `--resume_from_checkpoint true` continues from the newest
`checkpoint-N` of the output folder (or name a checkpoint folder); a resumed run writes the same
weights as one that ran in one go.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

# The recipe fields that define the training budget and carry over unchanged; the edit-aware ones
# (rates, loss weights, block length, MTF) have no autoregressive meaning.
SHARED_FIELDS = (
    "max_length",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "num_train_epochs",
    "logging_steps",
    "save_strategy",
    "save_steps",
    "activation_checkpointing",
    "bf16",
    "seed",
    "report_to",
)
DEFAULT_RECIPE = (
    Path(__file__).resolve().parents[1] / "examples" / "recipes" / "default_model_from_scratch.yaml"
)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_RECIPE), help="the dllm-edit sft recipe (YAML)")
    parser.add_argument("--output_dir", default="runs/default-model-ar", help="where the model is saved")
    return parser.parse_known_args(argv)


def load_config(argv: list[str]) -> tuple[argparse.Namespace, dict, Any]:
    """The options, the recipe (with overrides applied) and the `SFTConfig` this run trains with."""
    from trl import SFTConfig

    from dllm_edit.cli.recipe import resolve_resume
    from dllm_edit.trainers.checkpointing_names import TRANSFORMERS_HAS_NEW_NAMES

    args, overrides = parse_args(argv)
    recipe = yaml.safe_load(Path(args.config).read_text())
    if not isinstance(recipe, dict) or "model_name_or_path" not in recipe or "dataset_name" not in recipe:
        raise ValueError(
            f"--config {args.config!r} must be a recipe with model_name_or_path and dataset_name."
        )
    if len(overrides) % 2:
        raise ValueError(f"Expected --key value pairs after the options, got {overrides!r} (odd count).")
    fields = {k: recipe[k] for k in SHARED_FIELDS if k in recipe}
    # later `--key value` pairs override the recipe, as with `dllm-edit sft`
    for key, value in zip(overrides[::2], overrides[1::2], strict=True):
        if not key.startswith("--"):
            raise ValueError(f"Expected --key value pairs after the options, got {key!r}.")
        name = key[2:]
        if name in ("model_name_or_path", "dataset_name", "dataset_train_split"):
            recipe[name] = value
        else:
            fields[name] = yaml.safe_load(value)
    if not TRANSFORMERS_HAS_NEW_NAMES and "activation_checkpointing" in fields:  # TRL's own SFTConfig on 4.x
        fields["gradient_checkpointing"] = fields.pop("activation_checkpointing")
    elif TRANSFORMERS_HAS_NEW_NAMES and "gradient_checkpointing" not in fields:
        # TRL gives the old name a default (True), which transformers >= 5.25 warns on: give the new
        # name TRL's default instead, as `EditSFTConfig` does (checkpointing_names); an old name the
        # caller passed is kept, with transformers' own warning
        fields.setdefault("activation_checkpointing", True)
        fields["gradient_checkpointing"] = None
    config = SFTConfig(output_dir=args.output_dir, completion_only_loss=True, **fields)
    # checked here, before any loading: `true` must find a checkpoint, a path must be a folder
    config.resume_from_checkpoint = resolve_resume(config.resume_from_checkpoint, args.output_dir)
    return args, recipe, config


def main(argv: list[str]) -> int:
    from trl import SFTTrainer

    from dllm_edit.cli.loading import load_dataset_arg, load_model_and_tokenizer

    args, recipe, config = load_config(argv)
    model, tokenizer = load_model_and_tokenizer(recipe["model_name_or_path"])
    train = load_dataset_arg(recipe["dataset_name"], None, recipe.get("dataset_train_split", "train"))
    train = train.select_columns(["prompt", "completion"])
    trainer = SFTTrainer(model=model, args=config, train_dataset=train, processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    seconds = time.perf_counter() - start
    trainer.save_model(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    params = sum(p.numel() for p in model.parameters())
    print(f"Saved to {args.output_dir}: {params / 1e6:.2f} M parameters, trained in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
