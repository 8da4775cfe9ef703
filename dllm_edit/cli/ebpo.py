"""`dllm-edit ebpo`: EBPO reinforcement learning from a TRL-style YAML recipe or flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trl import ScriptArguments

PROG = "dllm-edit ebpo"


@dataclass
class EBPOScriptArguments(ScriptArguments):
    """TRL's `ScriptArguments` plus the reward functions, named `package.module:function`."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["dllm_edit.trainers.rewards:exact_match_reward"],
        metadata={
            "help": "Reward functions as 'package.module:function' (default: exact match on 'answer')."
        },
    )


def build_parser():  # type: ignore[no-untyped-def]
    from trl import ModelConfig, TrlParser

    from dllm_edit.trainers import EBPOConfig

    return TrlParser((EBPOScriptArguments, EBPOConfig, ModelConfig), prog=PROG)


def run(argv: Sequence[str]) -> int:
    """Parse the recipe and flags, run EBPO, save the model (or adapter) and tokenizer to `output_dir`."""
    from trl import get_peft_config

    from dllm_edit.trainers import EBPOTrainer

    from .loading import load_dataset_arg, load_model_and_tokenizer

    script_args, training_args, model_args = build_parser().parse_args_and_config(args=list(argv))
    if not script_args.dataset_name:
        raise ValueError(
            "dataset_name is required: a .json/.jsonl/.csv/.parquet file with a 'prompt' column, a folder "
            "saved with Dataset.save_to_disk, or a Hub dataset id (in the recipe or as --dataset_name)."
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
    trainer = EBPOTrainer(
        model,
        reward_funcs=script_args.reward_funcs,
        args=training_args,
        train_dataset=train,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    print(f"Saved to {training_args.output_dir}")
    return 0
