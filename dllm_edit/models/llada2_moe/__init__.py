"""LLaDA2.0 / LLaDA2.1 (mini, flash), `model_type: "llada2_moe"`: dllm_edit's native classes."""

from .configuration_llada2_moe import LLaDA2MoeConfig
from .modeling_llada2_moe import (
    LLaDA2MoeForCausalLM,
    LLaDA2MoeModel,
    LLaDA2MoeModelLM,
    LLaDA2MoePreTrainedModel,
)

__all__ = [
    "LLaDA2MoeConfig",
    "LLaDA2MoeForCausalLM",
    "LLaDA2MoeModel",
    "LLaDA2MoeModelLM",
    "LLaDA2MoePreTrainedModel",
]
