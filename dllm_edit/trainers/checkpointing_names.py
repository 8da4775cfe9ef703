"""Activation checkpointing under its transformers 5.25 name, on every supported transformers.

transformers 5.25 renamed `gradient_checkpointing` / `gradient_checkpointing_kwargs` to
`activation_checkpointing` / `activation_checkpointing_kwargs` and warns on the old names, while TRL
still gives the old name a default (`True`), so every TRL config warned on construction. The trainers'
configs (`EditSFTConfig`, `EBPOConfig`) therefore:

- on transformers >= 5.25, leave the old name unset by default and give the new one TRL's default,
  so a config built without either name warns nothing (one built with the old name still gets
  transformers' own deprecation warning: the name is the caller's);
- on transformers 4.x, take `activation_checkpointing` / `activation_checkpointing_kwargs` as their
  own fields and pass them on to the old names, so code written with the new names runs on both.

Either way, after `__post_init__` both names hold the same value.

Examples:
    >>> from dllm_edit.trainers.checkpointing_names import CHECKPOINTING_FIELDS
    >>> CHECKPOINTING_FIELDS
    ('activation_checkpointing', 'activation_checkpointing_kwargs')
"""

from __future__ import annotations

from typing import Any

from transformers import TrainingArguments

#: The names a config of this package takes for activation checkpointing, on every transformers.
CHECKPOINTING_FIELDS = ("activation_checkpointing", "activation_checkpointing_kwargs")

#: Whether the installed transformers has the 5.25 names (and warns on `gradient_checkpointing`).
TRANSFORMERS_HAS_NEW_NAMES = "activation_checkpointing" in TrainingArguments.__dataclass_fields__

#: The help strings of the fields this package declares itself.
OLD_NAME_HELP = "Deprecated alias of `activation_checkpointing` (transformers 5.25), left unset by default."
NEW_NAME_HELP = (
    "Enable activation checkpointing to trade compute for memory (recomputes each layer's forward in the "
    "backward). None: TRL's default, True."
)
NEW_KWARGS_HELP = "Keyword arguments passed to the model's checkpointing enable call."


def resolve_checkpointing_names(args: Any, default: bool = True) -> None:
    """Settle the old and new checkpointing names of `args` before `TrainingArguments.__post_init__`.

    Args:
        args: an `EditSFTConfig` or `EBPOConfig` being built.
        default: the value when neither name was given (TRL's: True).
    """
    if TRANSFORMERS_HAS_NEW_NAMES:
        if args.activation_checkpointing is None and args.gradient_checkpointing is None:
            args.activation_checkpointing = default
        return
    # transformers 4.x: the new names are this package's own fields; when given they win (as on 5.25)
    if args.activation_checkpointing is not None:
        args.gradient_checkpointing = bool(args.activation_checkpointing)
    if args.gradient_checkpointing is None:
        args.gradient_checkpointing = default
    args.activation_checkpointing = args.gradient_checkpointing
    if args.activation_checkpointing_kwargs is not None:
        args.gradient_checkpointing_kwargs = args.activation_checkpointing_kwargs
    args.activation_checkpointing_kwargs = args.gradient_checkpointing_kwargs
