"""dllm_edit: editable decoding for diffusion language models on the Hugging Face stack.

Examples:
    >>> import dllm_edit
    >>> cfg = dllm_edit.EditGenerationConfig.from_mode("quality", max_new_tokens=64)
    >>> cfg.editing_threshold
    0.5
"""

from dllm_edit import strategies
from dllm_edit.adapters import (
    BidirectionalAdapter,
    BlockCausalAdapter,
    BlockCausalShiftedAdapter,
    MaskedLMAdapter,
    ModelAdapter,
    ShiftedLogitsAdapter,
    available_adapters,
    detect_adapter,
    register_adapter,
    resolve_adapter,
)
from dllm_edit.config import MODES, EditGenerationConfig
from dllm_edit.generation import generate
from dllm_edit.hf import (
    CUSTOM_GENERATE_DIR,
    EditGenerationMixin,
    custom_generate,
    generate_hf,
    patch_generate,
)
from dllm_edit.infill import infill, parse_template
from dllm_edit.loading import load
from dllm_edit.output import EditGenerationOutput, StepRecord
from dllm_edit.shipped import DEFAULT_MODEL_DIR, load_default
from dllm_edit.strategies import register_strategy
from dllm_edit.terminal_streamer import TerminalEditStreamer

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> object:
    # `dllm_edit.models` imports transformers' modelling code (seconds, and triton through Hugging
    # Face's `kernels`): imported on first use, by `dllm_edit.load` or `import dllm_edit.models`
    if name == "models":
        import importlib

        return importlib.import_module("dllm_edit.models")
    raise AttributeError(f"module 'dllm_edit' has no attribute {name!r}")


__all__ = [
    "CUSTOM_GENERATE_DIR",
    "DEFAULT_MODEL_DIR",
    "MODES",
    "BidirectionalAdapter",
    "BlockCausalAdapter",
    "BlockCausalShiftedAdapter",
    "EditGenerationConfig",
    "EditGenerationMixin",
    "EditGenerationOutput",
    "MaskedLMAdapter",
    "ModelAdapter",
    "ShiftedLogitsAdapter",
    "StepRecord",
    "TerminalEditStreamer",
    "available_adapters",
    "custom_generate",
    "detect_adapter",
    "generate",
    "generate_hf",
    "infill",
    "load",
    "load_default",
    "models",
    "parse_template",
    "patch_generate",
    "register_adapter",
    "register_strategy",
    "resolve_adapter",
    "strategies",
]
