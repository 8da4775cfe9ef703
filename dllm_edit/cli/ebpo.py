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

    from .recipe import prepare_parser

    return prepare_parser(TrlParser((EBPOScriptArguments, EBPOConfig, ModelConfig), prog=PROG))


def run(argv: Sequence[str]) -> int:
    """Parse the recipe and flags, run EBPO, save the model (or adapter) and tokenizer to `output_dir`."""
    from trl import GRPOConfig

    from dllm_edit.trainers import EBPOConfig, EBPOTrainer

    from .recipe import help_requested, load_recipe, train_and_save

    parser = build_parser()
    summary = "EBPO reinforcement learning with verifiable rewards (--reward_funcs) from a TRL-style recipe."
    if help_requested(parser, argv, summary, EBPOConfig, GRPOConfig, extra=("reward_funcs",)):
        return 0
    loaded = load_recipe(parser, argv, "a .json/.jsonl/.csv/.parquet file with a 'prompt' column")
    trainer = EBPOTrainer(
        loaded.model,
        reward_funcs=loaded.script_args.reward_funcs,
        args=loaded.training_args,
        train_dataset=loaded.train_dataset,
        processing_class=loaded.tokenizer,
        peft_config=loaded.peft_config,
    )
    args = loaded.training_args
    return train_and_save(trainer, args.output_dir, args.resume_from_checkpoint)
