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
        ValueError: no dataset or model named, one that cannot be loaded (see `loading`), or a
            `resume_from_checkpoint` that names no checkpoint (see `resolve_resume`).
    """
    from trl import get_peft_config

    from .loading import load_dataset_arg, load_model_and_tokenizer

    script_args, training_args, model_args = parser.parse_args_and_config(args=list(argv))
    training_args.resume_from_checkpoint = resolve_resume(
        training_args.resume_from_checkpoint, training_args.output_dir
    )
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


_RESUME_LAST = ("true", "yes", "1", "last")
_RESUME_NONE = ("", "false", "no", "0", "none")


def resolve_resume(value: Any, output_dir: str) -> str | None:
    """The checkpoint folder a recipe's `resume_from_checkpoint` names, checked before any loading.

    `true` (also `yes`, `1`, `last`, any case) means the newest `checkpoint-N` folder of
    `output_dir`, as `Trainer.train(resume_from_checkpoint=True)` would pick; `false`, `none` or
    nothing means a fresh run; anything else is a checkpoint folder.

    Raises:
        ValueError: `true` with no checkpoint in `output_dir`, or a path that is not a folder.

    Examples:
        >>> resolve_resume("false", "runs/x") is None
        True
    """
    import os

    if value is None or value is False:
        return None
    text = "true" if value is True else str(value).strip()
    if text.lower() in _RESUME_NONE:
        return None
    if text.lower() in _RESUME_LAST:
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise ValueError(
                f"resume_from_checkpoint={value!r} resumes the newest checkpoint-N folder of output_dir, "
                f"but {output_dir!r} has none; start without it, or pass a checkpoint folder."
            )
        return last
    if not os.path.isdir(text):
        raise ValueError(
            f"resume_from_checkpoint must be true, false or a checkpoint folder; {text!r} is not a "
            f"folder (the checkpoints of this recipe are {output_dir!r}/checkpoint-N)."
        )
    return text


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
