"""The small diffusion LM shipped inside the package: `load_default()`.

It is a Llama architecture (loads with `from_pretrained`, no remote code) decoding block-causally,
with its own byte-level BPE tokenizer, trained in two stages (next-token SFT from
`examples/recipes/default_model_medium_ar_stage.yaml`, then `dllm-edit sft` from
`examples/recipes/default_model_medium_two_stage.yaml --seed 1`) on data the recipes build
themselves (synthetic tasks and functions of the Python standard library). Its model card
(`DEFAULT_MODEL_DIR / "README.md"`) gives the recipe, the training time and the held-out numbers per
preset. It is a demonstration model: a few million parameters trained for under two hours on a CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_MODEL_DIR = Path(__file__).parent / "default_model"


def load_default(device: str | None = None) -> tuple[Any, Any]:
    """The shipped model (eval mode) and its tokenizer, from the package folder (never the network).

    Args:
        device: where to put the model (default: CPU).

    Returns:
        `(model, tokenizer)`; the model's config carries the mask, EOS and pad ids, so
        `dllm_edit.generate(model, ids)` needs nothing else.

    Raises:
        FileNotFoundError: the package was installed without its model files.

    Examples:
        >>> import dllm_edit
        >>> model, tokenizer = dllm_edit.load_default()
        >>> model.config.model_type, tokenizer.mask_token
        ('llama', '<|mask|>')
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (DEFAULT_MODEL_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"The shipped model is missing from {DEFAULT_MODEL_DIR} (an install without package data?). "
            "Reinstall dllm-edit, or pass your own model."
        )
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    if device is not None:
        torch.nn.Module.to(model, torch.device(device))  # in place (transformers retypes `.to`)
    return model.eval(), tokenizer
