"""Decoding presets (`EditGenerationConfig.from_mode`) and fitting a preset to a model's adapter.

`speedy` is LLaDA2.1's S Mode and `quality` its Q Mode (model card and SGLang JointThreshold
defaults). `llada` is LLaDA-1's `generate` (fixed steps, semi-autoregressive blocks from the end of
the prompt, low-confidence remasking, no editing), for bidirectional models. On a model whose
adapter has blocks at absolute positions only (block-causal models, the shipped one),
`fit_mode_to_adapter` runs LLaDA-1's rule on those blocks instead; `from_mode(..., model=...)`, the
CLI's `--mode` and the pipelines all go through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dllm_edit.strategies import QuotaUnmask

if TYPE_CHECKING:
    from dllm_edit.adapters import ModelAdapter
    from dllm_edit.config import EditGenerationConfig

MODES: dict[str, dict[str, Any]] = {
    "speedy": {
        "threshold": 0.5,
        "editing_threshold": 0.0,
        "max_post_steps": 16,
        "block_length": 32,
        "temperature": 0.0,
    },
    "quality": {
        "threshold": 0.7,
        "editing_threshold": 0.5,
        "max_post_steps": 16,
        "block_length": 32,
        "temperature": 0.0,
    },
    "llada": {
        "block_start": "prompt_end",
        "block_length": 32,
        "steps": 32,
        "threshold": 1.0,
        "editing_threshold": None,
        "max_post_steps": 0,
        "num_to_transfer": 1,
        "eos_early_stop": False,
        "suppress_mask_token": False,
        "temperature": 0.0,
    },
}
"""Decoding presets, by name (see the module docstring and `EditGenerationConfig.from_mode`)."""


def fit_mode_to_adapter(
    config: EditGenerationConfig, adapter: ModelAdapter
) -> tuple[EditGenerationConfig, str | None]:
    """`config` as it can run on `adapter`, and a note saying what changed (None: nothing).

    A fixed-steps config (`steps` set, LLaDA-1's `llada` preset) whose block origin the adapter
    cannot decode (blocks from the prompt's end on an adapter with blocks at absolute positions
    only) keeps LLaDA-1's rule, the block's masks spread over the steps, most confident first, on
    the adapter's blocks. Anything else is returned unchanged (the loop refuses what cannot run).

    Examples:
        >>> from dllm_edit import BlockCausalAdapter, EditGenerationConfig
        >>> fitted, note = fit_mode_to_adapter(EditGenerationConfig.from_mode("llada"), BlockCausalAdapter())
        >>> fitted.block_start, fitted.unmasking.spread, note is not None
        (None, 'masked_count', True)
    """
    if config.steps is None or config.block_start is None or config.block_start in adapter.block_starts:
        return config, None
    rule = QuotaUnmask(
        steps=config.steps,
        block_length=config.block_length,
        threshold=config.threshold,
        spread="masked_count",
    )
    note = (
        f"block_start={config.block_start!r} is not one the {adapter.name!r} adapter decodes (blocks at "
        f"{list(adapter.block_starts)}): LLaDA-1's fixed-steps rule runs on those blocks"
    )
    return config.replace(block_start=None, steps=None, unmasking=rule), note


__all__ = ["MODES", "fit_mode_to_adapter"]
