"""Registration of the native families with transformers' Auto classes, and the lookup by `model_type`.

Registering is what makes `AutoModel.from_pretrained(path)` (and `AutoModelForCausalLM`) build
dllm_edit's class for a checkpoint whose `config.json` says `model_type: llada` (or `dream`,
`lladamoe`, `llada2_moe`), with no remote code. `trust_remote_code=True` still runs the checkpoint's
own code: transformers prefers a config's `auto_map` when remote code is trusted.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

#: model_type -> (config class, model class) of every native family.
NATIVE_FAMILIES: dict[str, tuple[type[Any], type[Any]]] = {}


def register_native(config_class: type[Any], model_class: type[Any]) -> None:
    """Register a native family under its config's `model_type` with AutoConfig, AutoModel and
    AutoModelForCausalLM (the classes the families' model cards load with)."""
    model_type = config_class.model_type
    AutoConfig.register(model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)
    AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)
    NATIVE_FAMILIES[model_type] = (config_class, model_class)


def native_model_class(model_type: str | None) -> type[Any] | None:
    """dllm_edit's class for checkpoints of `model_type`, or None when it has none."""
    family = NATIVE_FAMILIES.get(model_type or "")
    return family[1] if family else None
