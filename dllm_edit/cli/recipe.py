"""What `dllm-edit sft` and `dllm-edit ebpo` share: parse a TRL-style recipe, load, train, save."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Loaded:
    """The parsed recipe and what it names, ready for a trainer."""

    script_args: Any
    training_args: Any
    model_args: Any
    model: Any
    tokenizer: Any
    train_dataset: Any
    peft_config: Any


def load_recipe(parser: Any, argv: Sequence[str], dataset_hint: str) -> Loaded:
    """Parse `--config recipe.yaml` and flags, then load the model, tokenizer and training split.

    Raises:
        ValueError: no dataset or model named, or one that cannot be loaded (see `loading`).
    """
    from trl import get_peft_config

    from .loading import load_dataset_arg, load_model_and_tokenizer

    script_args, training_args, model_args = parser.parse_args_and_config(args=list(argv))
    if training_args.dataloader_pin_memory and not _has_accelerator():
        # pinning needs an accelerator: without one torch pins nothing and warns on every DataLoader
        training_args.dataloader_pin_memory = False
    if not script_args.dataset_name:
        raise ValueError(
            f"dataset_name is required: {dataset_hint}, a folder saved with Dataset.save_to_disk, or a Hub "
            "dataset id (in the recipe or as --dataset_name)."
        )
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required (in the recipe or as --model_name_or_path).")
    model, tokenizer = load_model_and_tokenizer(
        model_args.model_name_or_path,
        trust_remote_code=training_args.trust_remote_code,
        revision=model_args.model_revision,
        dtype=model_args.dtype,
        attn_implementation=model_args.attn_implementation,
    )
    train = load_dataset_arg(
        script_args.dataset_name, script_args.dataset_config, script_args.dataset_train_split
    )
    return Loaded(
        script_args, training_args, model_args, model, tokenizer, train, get_peft_config(model_args)
    )


def _has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def train_and_save(trainer: Any, output_dir: str, resume_from_checkpoint: Any) -> int:
    """Train (resuming if asked), save the model or adapter and the tokenizer; exit status 0."""
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    trainer.save_model(output_dir)
    print(f"Saved to {output_dir}")
    return 0
