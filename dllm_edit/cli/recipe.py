"""What `dllm-edit sft` and `dllm-edit ebpo` share: parse a TRL-style recipe, load, train, save.

Also their short `--help` (the recipe first, the common fields, the trainer's own fields; the full
list of several hundred TRL / transformers fields behind `--help-all`), and the checks that run
before anything is loaded: the recipe file and its keys, unknown flags, `output_dir`.
"""

from __future__ import annotations

import dataclasses
import difflib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import check_writable_dir
from .parsing import UsageError, one_line_errors, unknown_option_hint

COMMON_FIELDS = (
    "model_name_or_path",
    "dataset_name",
    "dataset_train_split",
    "output_dir",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "use_peft",
    "lora_r",
    "lora_target_modules",
    "trust_remote_code",
    "resume_from_checkpoint",
    "report_to",
    "use_cpu",
)
"""Fields shown by the short `--help` of both trainers, before the trainer's own."""


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

    argv = check_recipe_argv(parser, argv)
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    except ValueError as err:
        if "not used by the HfArgumentParser" not in str(err):
            raise
        _, unknown = parser.parse_known_args(_without_config(argv))
        options = [s for action in parser._actions for s in action.option_strings]
        raise UsageError(
            f"unrecognized arguments: {' '.join(unknown)}.{unknown_option_hint(unknown, options)} "
            f"({parser.prog} --help-all lists every field)"
        ) from None
    check_writable_dir(training_args.output_dir, "output_dir")
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


def check_recipe_argv(parser: Any, argv: Sequence[str]) -> list[str]:
    """`argv` with `--config=FILE` spelled `--config FILE` (TRL reads only that form), after checking
    the recipe: it exists, is a YAML mapping, and every key is a field (with the closest names).

    Raises:
        UsageError: `--config` without a file.
        FileNotFoundError: no recipe at the path.
        ValueError: not YAML, not a mapping, or unknown keys.
    """
    import yaml

    args: list[str] = []
    for arg in argv:
        args.extend(["--config", arg.split("=", 1)[1]] if arg.startswith("--config=") else [arg])
    if "--config" not in args:
        return args
    at = args.index("--config")
    if at + 1 >= len(args) or args[at + 1].startswith("--"):
        raise UsageError(f"--config needs a recipe file, e.g. {parser.prog} --config recipe.yaml.")
    path = Path(args[at + 1]).expanduser()
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"--config {args[at + 1]!r}: the recipe file {what}.")
    try:
        recipe = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(
            f"--config {args[at + 1]!r} is not valid YAML: {' '.join(str(err).split())}"
        ) from None
    if not isinstance(recipe, dict):
        raise ValueError(
            f"--config {args[at + 1]!r} must hold a YAML mapping of fields (e.g. 'max_steps: 100')."
        )
    fields = {action.dest for action in parser._actions} - {"help"}
    unknown = sorted(str(key) for key in recipe if key != "env" and key not in fields)
    if unknown:
        hints = {key: difflib.get_close_matches(key, sorted(fields), n=2) for key in unknown}
        raise ValueError(
            f"--config {args[at + 1]!r}: unknown field(s) {unknown}; closest valid names: {hints} "
            f"({parser.prog} --help-all lists every field)."
        )
    return args


def _without_config(argv: list[str]) -> list[str]:
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    return argv[:at] + argv[at + 2 :]


def prepare_parser(parser: Any) -> Any:
    """A `TrlParser` without prefix matching whose usage mistakes are one line (`UsageError`)."""
    parser.allow_abbrev = False
    parser.usage = f"{parser.prog} --config RECIPE.yaml [--FIELD VALUE ...]"
    return one_line_errors(parser)


def help_requested(
    parser: Any, argv: Sequence[str], summary: str, own: type, parent: type, extra: Sequence[str] = ()
) -> bool:
    """Print the short help (`-h` / `--help`) or the full one (`--help-all`); True if printed.

    Args:
        parser: the command's `TrlParser`.
        argv: the command line after the command name.
        summary: one sentence on what the command does.
        own: the trainer's config class; its fields that `parent` lacks are listed.
        parent: the TRL config class it extends.
        extra: more fields to list with the trainer's own (e.g. EBPO's `reward_funcs`).
    """
    if "--help-all" in argv:
        print(f"{parser.prog}: every field, as --FIELD VALUE or as a key of the --config recipe\n")
        print(parser.format_help())
        return True
    if not any(arg in ("-h", "--help") for arg in argv):
        return False
    actions = {action.dest: action for action in parser._actions}
    inherited = {f.name for f in dataclasses.fields(parent)}
    ours = [f.name for f in dataclasses.fields(own) if f.name not in inherited]
    lines = [
        f"usage: {parser.prog} --config RECIPE.yaml [--FIELD VALUE ...]",
        "",
        textwrap.fill(summary, width=80),
        "",
        "  --config RECIPE.yaml   the recipe, a YAML file of fields (examples/recipes/),",
        "                         which --FIELD VALUE flags override",
        "",
        "common fields:",
        *_field_lines(actions, COMMON_FIELDS),
        "",
        f"{own.__name__} fields:",
        *_field_lines(actions, [*extra, *(name for name in ours if name not in COMMON_FIELDS)]),
        "",
        textwrap.fill(
            f"{parser.prog} --help-all lists all {len(actions) - 1} fields (TRL's {parent.__name__}, "
            "transformers' TrainingArguments, TRL's ModelConfig and ScriptArguments).",
            width=80,
        ),
    ]
    print("\n".join(lines))
    return True


def _field_lines(actions: dict[str, Any], names: Sequence[str]) -> list[str]:
    lines = []
    for name in names:
        action = actions.get(name)
        if action is None:
            continue
        text = " ".join(str(action.help or "").replace("%%", "%").split())
        first = text.split(". ")[0].rstrip(".")
        short = textwrap.wrap(first, width=44, max_lines=2, placeholder=" ...") or [""]
        lines.append(f"  --{name:<30} {short[0]}".rstrip())
        lines.extend(f"{'':<35}{more}" for more in short[1:])
    return lines


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
