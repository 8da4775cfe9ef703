"""Dream-7B / Dream-Coder-7B / DiffuCoder-7B (`model_type` `"Dream"`): a Qwen2 with bidirectional
attention whose logits at `i` predict token `i + 1` (decode with the `shifted` adapter).

Examples:
    >>> from dllm_edit.models.dream import DreamConfig, DreamModel
    >>> DreamConfig.model_type, DreamModel.config_class is DreamConfig
    ('Dream', True)
"""

from .configuration_dream import DreamConfig
from .modeling_dream import DreamBaseModel, DreamModel, DreamPreTrainedModel

__all__ = ["DreamBaseModel", "DreamConfig", "DreamModel", "DreamPreTrainedModel"]
