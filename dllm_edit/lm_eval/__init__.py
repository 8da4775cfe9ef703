"""lm-evaluation-harness model `dllm_edit`: score diffusion LMs with editable decoding on lm-eval tasks.

Importing this package registers the model with lm-eval (it needs the `eval` extra:
`pip install "dllm-edit[eval]"`). From the command line:

    dllm-edit eval --tasks gsm8k --model_args pretrained=PATH,mode=speedy,max_new_tokens=256
    accelerate launch -m dllm_edit.cli eval --tasks gsm8k --model_args pretrained=PATH   # N processes

`--model_args` takes the loading arguments of `DllmEditLM` and any `EditGenerationConfig` field
(`threshold`, `editing_threshold=None`, `block_length`, ...); unknown keys raise with the closest
valid names. See docs/how-to/scaling-out.md.
"""

from __future__ import annotations

try:
    import lm_eval.models  # noqa: F401  (fills lm-eval's registry first: it loads its own models lazily only when empty)
    from lm_eval.api.registry import register_model
except ImportError as err:  # pragma: no cover - exercised without the extra
    raise ImportError(
        f'dllm_edit.lm_eval needs lm-evaluation-harness: pip install "dllm-edit[eval]" ({err}).'
    ) from err

from dllm_edit.lm_eval.model import MODEL_ARGS, DllmEditLM

register_model("dllm_edit")(DllmEditLM)

__all__ = ["MODEL_ARGS", "DllmEditLM"]
