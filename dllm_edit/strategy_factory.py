"""The strategy factory: the strategies an `EditGenerationConfig` describes.

The config is a schema (its fields and their validation); this module turns it into the list of
`Strategy` objects the loop runs: the unmasking rule (the threshold rule, LLaDA's fixed-steps quota
or a registered rule of the zoo), then T2T editing and multi-block editing when they are on.
Explicit `strategies` replace everything built here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dllm_edit.strategies import (
    MultiBlockEdit,
    QuotaUnmask,
    Strategy,
    ThresholdUnmask,
    TokenEdit,
    get_strategy,
    strategy_from_dict,
)

if TYPE_CHECKING:
    from dllm_edit.config import EditGenerationConfig


def build_strategies(config: EditGenerationConfig, block_start: str | None = None) -> list[Strategy]:
    """The strategy list `config` describes (explicit `config.strategies` take precedence).

    Args:
        config: the decoding configuration.
        block_start: the block origin of the run (the adapter resolves `config.block_start`); None
            reads `config.block_start`, and `"absolute"` when that is None too. It picks the quota
            rule of the fixed-steps mode: LLaDA2.0's spread over the block length on absolute
            blocks, LLaDA-1's spread of the block's masks on blocks from the prompt's end.

    Examples:
        >>> from dllm_edit import EditGenerationConfig
        >>> [type(s).__name__ for s in build_strategies(EditGenerationConfig.from_mode("quality"))]
        ['ThresholdUnmask', 'TokenEdit']
    """
    if config.strategies is not None:
        return list(config.strategies)
    origin = block_start or config.block_start or "absolute"
    out: list[Strategy] = []
    if config.unmasking is not None:
        out.append(config.unmasking)
    elif config.steps is None:
        out.append(ThresholdUnmask(threshold=config.threshold, num_to_transfer=config.num_to_transfer))
    else:
        out.append(
            QuotaUnmask(
                steps=config.steps,
                block_length=config.block_length,
                threshold=config.threshold,
                spread="masked_count" if origin == "prompt_end" else "block_length",
            )
        )
    if config.editing_threshold is not None:
        out.append(TokenEdit(threshold=config.editing_threshold))
    if config.multi_block_edit:
        mbe_threshold = config.multi_block_threshold
        if mbe_threshold is None:
            mbe_threshold = config.editing_threshold if config.editing_threshold is not None else 0.9
        out.append(MultiBlockEdit(window=config.multi_block_window, threshold=mbe_threshold))
    return out


def load_unmasking(value: Any) -> Any:
    """A registered strategy's name or dict -> the Strategy (its defaults, or the dict's fields);
    anything else is returned as it is (the config's validation refuses what is no strategy)."""
    if isinstance(value, str):
        return get_strategy(value)()
    if isinstance(value, dict):
        return strategy_from_dict(value)
    return value
