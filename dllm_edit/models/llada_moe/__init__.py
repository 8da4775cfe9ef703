"""LLaDA-MoE (`model_type: "lladamoe"`, `LLaDAMoEModelLM`) as a native transformers model: no remote code.

Examples:
    >>> from dllm_edit.models.llada_moe import LLaDAMoEConfig, LLaDAMoEModelLM
    >>> LLaDAMoEConfig.model_type, LLaDAMoEModelLM.config_class is LLaDAMoEConfig
    ('lladamoe', True)
"""

from .configuration_llada_moe import LLaDAMoEConfig
from .modeling_llada_moe import LLaDAMoEModel, LLaDAMoEModelLM, LLaDAMoEPreTrainedModel

__all__ = ["LLaDAMoEConfig", "LLaDAMoEModel", "LLaDAMoEModelLM", "LLaDAMoEPreTrainedModel"]
