"""dllm_edit's own transformers classes for the diffusion LM families people load, no remote code.

| family | `model_type` | classes | adapter |
|---|---|---|---|
| LLaDA-8B / LLaDA-1.5 | `llada` | `LLaDAConfig`, `LLaDAModelLM` | `bidirectional` (+ approx / dual cache) |

Importing `dllm_edit` registers each family with transformers' `AutoConfig`, `AutoModel` and
`AutoModelForCausalLM` under the checkpoints' own `model_type`, so `AutoModel.from_pretrained(path)`
builds the native class from the checkpoint's `config.json` and safetensors as they are;
`trust_remote_code=True` still runs the checkpoint's own code instead. `dllm_edit.load` picks the
native class without asking (`native=False` opts out). See the Models page of the docs.

Examples:
    >>> from dllm_edit.models import native_model_class
    >>> native_model_class("llama") is None  # transformers has its own class for Llama
    True
"""

from __future__ import annotations

from .auto import NATIVE_FAMILIES, native_model_class, register_native

__all__ = ["NATIVE_FAMILIES", "native_model_class", "register_native"]
