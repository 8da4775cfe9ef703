"""Registration of the native families with transformers' Auto classes, and the lookup by `model_type`.

Registering is what makes `AutoModel.from_pretrained(path)` (and `AutoModelForCausalLM`) build
dllm_edit's class for a checkpoint whose `config.json` says `model_type: llada` (or `dream`,
`lladamoe`, `llada2_moe`), with no remote code. To run a checkpoint's own code instead, use
`dllm_edit.load(path, native=False, trust_remote_code=True)`: through the Auto classes,
`trust_remote_code=True` picks the remote code on transformers 4.x, but 5.x prefers an explicitly
registered class.

Examples:
    >>> import dllm_edit
    >>> from transformers import AutoConfig
    >>> from dllm_edit.models.auto import NATIVE_FAMILIES
    >>> sorted(NATIVE_FAMILIES)
    ['Dream', 'llada', 'llada2_moe', 'lladamoe']
    >>> type(AutoConfig.for_model("llada2_moe")).__name__
    'LLaDA2MoeConfig'
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

#: model_type -> (config class, model class) of every native family.
NATIVE_FAMILIES: dict[str, tuple[type[Any], type[Any]]] = {}


def register_native(
    config_class: type[Any], model_class: type[Any], *, auto_model: type[Any] | None = None
) -> None:
    """Register a native family under its config's `model_type` with AutoConfig, AutoModel and
    AutoModelForCausalLM (the classes the families' model cards load with).

    Args:
        config_class: the family's `PretrainedConfig` subclass (its `model_type` is the key).
        model_class: the class with the LM head (`AutoModelForCausalLM`, and `dllm_edit.load`).
        auto_model: what `AutoModel` builds, when the family's own `auto_map` gives another class
            than `model_class` (LLaDA2.x: the base model).
    """
    model_type = config_class.model_type
    AutoConfig.register(model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, auto_model or model_class, exist_ok=True)
    AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)
    NATIVE_FAMILIES[model_type] = (config_class, model_class)


def native_model_class(model_type: str | None) -> type[Any] | None:
    """dllm_edit's class for checkpoints of `model_type`, or None when it has none."""
    family = NATIVE_FAMILIES.get(model_type or "")
    return family[1] if family else None
