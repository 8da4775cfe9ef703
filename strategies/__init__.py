"""Composable decoding strategies and threshold schedules (installed as `dllm_edit.strategies`)."""

from .base import StepContext, StepResult, Strategy
from .edit import TokenEdit, select_edits
from .multi_block import MultiBlockEdit
from .registry import (
    ENTRY_POINT_GROUP,
    available_strategies,
    get_strategy,
    register_strategy,
    strategy_from_dict,
)
from .remask import LowConfidenceRemask
from .repeat_penalty import AdjacentRepeatPenalty
from .schedules import Constant, Cosine, Linear, Schedule, Stepwise, as_schedule, schedule_from_dict
from .unmask import QuotaUnmask, ThresholdUnmask, masked_count_quota, quota_schedule, select_unmask

for _cls in (ThresholdUnmask, QuotaUnmask, TokenEdit, MultiBlockEdit, LowConfidenceRemask):
    register_strategy()(_cls)
del _cls

# the algorithm zoo, part 1 (docs/concepts/algorithms.md)
from .dream import DreamUnmask  # noqa: E402
from .eb_sampler import EBSampler  # noqa: E402
from .fast_dllm import FastDLLMFactor, FastDLLMThreshold  # noqa: E402
from .prophet import Prophet  # noqa: E402
from .random_order import LLaDARandom  # noqa: E402

register_strategy("fast_dllm_threshold")(FastDLLMThreshold)
register_strategy("fast_dllm_factor")(FastDLLMFactor)
register_strategy("eb_sampler")(EBSampler)
register_strategy("prophet")(Prophet)
register_strategy("dream")(DreamUnmask)
register_strategy("llada_random")(LLaDARandom)

# the algorithm zoo, part 2 (docs/concepts/algorithms-klass-pc-wino.md)
from .klass import KLASS  # noqa: E402
from .pc_sampler import PCSampler  # noqa: E402
from .token_prior import estimate_token_prior, load_token_prior  # noqa: E402
from .wino import WINO  # noqa: E402

register_strategy("klass")(KLASS)
register_strategy("pc_sampler")(PCSampler)
register_strategy("wino")(WINO)

__all__ = [
    "ENTRY_POINT_GROUP",
    "KLASS",
    "WINO",
    "AdjacentRepeatPenalty",
    "Constant",
    "Cosine",
    "DreamUnmask",
    "EBSampler",
    "FastDLLMFactor",
    "FastDLLMThreshold",
    "LLaDARandom",
    "Linear",
    "LowConfidenceRemask",
    "MultiBlockEdit",
    "PCSampler",
    "Prophet",
    "QuotaUnmask",
    "Schedule",
    "StepContext",
    "StepResult",
    "Stepwise",
    "Strategy",
    "ThresholdUnmask",
    "TokenEdit",
    "as_schedule",
    "available_strategies",
    "estimate_token_prior",
    "get_strategy",
    "load_token_prior",
    "masked_count_quota",
    "quota_schedule",
    "register_strategy",
    "schedule_from_dict",
    "select_edits",
    "select_unmask",
    "strategy_from_dict",
]
