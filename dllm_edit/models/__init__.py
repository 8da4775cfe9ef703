"""dllm_edit's own transformers classes for the diffusion LM families people load, no remote code.

| family | `model_type` | config / model classes | adapter detected |
|---|---|---|---|
| LLaDA-8B, LLaDA-1.5 | `llada` | `LLaDAConfig`, `LLaDAModelLM` | `bidirectional` |
| LLaDA-MoE-7B-A1B | `lladamoe` | `LLaDAMoEConfig`, `LLaDAMoEModelLM` | `bidirectional` |
| Dream-7B, DiffuCoder-7B | `Dream` | `DreamConfig`, `DreamModel` | `shifted` |
| LLaDA2.0 / 2.1 mini, flash | `llada2_moe` | `LLaDA2MoeConfig`, `LLaDA2MoeModelLM` | `block_causal` |

The full-attention families also decode with the approximate prefix and dual caches
(`bidirectional_approx_cache`, `bidirectional_dual_cache`, chosen by name); LLaDA2.x's block-causal
prefix cache is exact. LLaDA-MoE's hub checkpoints say `model_type: llada`: `dllm_edit.load` routes
them to `LLaDAMoEModelLM` by their `architectures`.

Importing `dllm_edit.models` (which `dllm_edit.load` does; a bare `import dllm_edit` stays light)
registers each family with transformers' `AutoConfig`, `AutoModel` and `AutoModelForCausalLM` under
the checkpoints' own `model_type`, so `AutoModel.from_pretrained(path)`
builds the native class from the checkpoint's `config.json` and safetensors as they are, without
`trust_remote_code`. `dllm_edit.load` picks the native class without asking; `native=False,
trust_remote_code=True` runs the checkpoint's own code instead, imported from its `auto_map` (through
the Auto classes, `trust_remote_code=True` still picks the remote code on transformers 4.x, while 5.x
prefers an explicitly registered class such as these). Each class takes a transformers `Cache`
(through `Cache.update`), any 4-D attention mask (eager and SDPA), position ids and gradient
checkpointing; its logits equal the family's published modeling file (tests/models/). See the Models
page of the docs.

Examples:
    >>> import torch
    >>> from dllm_edit.models import LLaDAConfig, LLaDAModelLM, native_model_class
    >>> native_model_class("llada") is LLaDAModelLM, native_model_class("llama") is None
    (True, True)
    >>> config = LLaDAConfig(d_model=32, n_heads=4, n_kv_heads=4, n_layers=1, mlp_hidden_size=64,
    ...                      vocab_size=64, embedding_size=64, mask_token_id=63)
    >>> LLaDAModelLM(config)(torch.tensor([[1, 2, 63]])).logits.shape
    torch.Size([1, 3, 64])
"""

from __future__ import annotations

from .auto import NATIVE_FAMILIES, native_model_class, register_native
from .dream import DreamBaseModel, DreamConfig, DreamModel
from .llada import LLaDAConfig, LLaDAModel, LLaDAModelLM
from .llada2_moe import LLaDA2MoeConfig, LLaDA2MoeForCausalLM, LLaDA2MoeModel, LLaDA2MoeModelLM
from .llada_moe import LLaDAMoEConfig, LLaDAMoEModel, LLaDAMoEModelLM

# AutoModel gives what each family's own auto_map gives: the LM for LLaDA, LLaDA-MoE and Dream, the
# base model for LLaDA2.x
register_native(LLaDAConfig, LLaDAModelLM)
register_native(LLaDAMoEConfig, LLaDAMoEModelLM)
register_native(DreamConfig, DreamModel)
register_native(LLaDA2MoeConfig, LLaDA2MoeModelLM, auto_model=LLaDA2MoeModel)

__all__ = [
    "NATIVE_FAMILIES",
    "DreamBaseModel",
    "DreamConfig",
    "DreamModel",
    "LLaDA2MoeConfig",
    "LLaDA2MoeForCausalLM",
    "LLaDA2MoeModel",
    "LLaDA2MoeModelLM",
    "LLaDAConfig",
    "LLaDAMoEConfig",
    "LLaDAMoEModel",
    "LLaDAMoEModelLM",
    "LLaDAModel",
    "LLaDAModelLM",
    "native_model_class",
    "register_native",
]
