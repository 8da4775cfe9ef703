"""`dllm-edit sft`: edit-aware SFT from a TRL-style YAML recipe (`--config recipe.yaml`) or flags."""

from __future__ import annotations

from collections.abc import Sequence

PROG = "dllm-edit sft"


def build_parser():  # type: ignore[no-untyped-def]
    from trl import ModelConfig, ScriptArguments, TrlParser

    from dllm_edit.trainers import EditSFTConfig

    from .recipe import prepare_parser

    return prepare_parser(TrlParser((ScriptArguments, EditSFTConfig, ModelConfig), prog=PROG))


def run(argv: Sequence[str]) -> int:
    """Parse the recipe and flags, train, save the model (or adapter) and tokenizer to `output_dir`."""
    from trl import SFTConfig

    from dllm_edit.trainers import EditSFTConfig, EditSFTTrainer

    from .loading import load_dataset_arg
    from .recipe import help_requested, load_recipe, train_and_save

    parser = build_parser()
    summary = "Edit-aware SFT (the mixed M2T + T2T objective of LLaDA2.1) from a TRL-style recipe."
    if help_requested(parser, argv, summary, EditSFTConfig, SFTConfig):
        return 0
    loaded = load_recipe(parser, argv, "a .json/.jsonl/.csv/.parquet file")
    args, script = loaded.training_args, loaded.script_args
    evaluation = None
    if args.eval_strategy != "no":
        evaluation = load_dataset_arg(script.dataset_name, script.dataset_config, script.dataset_test_split)
    trainer = EditSFTTrainer(
        loaded.model,
        args=args,
        train_dataset=loaded.train_dataset,
        eval_dataset=evaluation,
        processing_class=loaded.tokenizer,
        peft_config=loaded.peft_config,
    )
    return train_and_save(trainer, args.output_dir, args.resume_from_checkpoint)
