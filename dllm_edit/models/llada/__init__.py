"""LLaDA-8B / LLaDA-1.5 (`model_type: "llada"`) as native transformers classes: `LLaDAConfig`,
`LLaDAModelLM` (the checkpoints' architecture), `LLaDAModel`."""

from .configuration_llada import LLaDAConfig
from .modeling_llada import LLaDAModel, LLaDAModelLM, LLaDAPreTrainedModel

__all__ = ["LLaDAConfig", "LLaDAModel", "LLaDAModelLM", "LLaDAPreTrainedModel"]
