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

__all__ = [
    "ENTRY_POINT_GROUP",
    "AdjacentRepeatPenalty",
    "Constant",
    "Cosine",
    "Linear",
    "LowConfidenceRemask",
    "MultiBlockEdit",
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
    "get_strategy",
    "masked_count_quota",
    "quota_schedule",
    "register_strategy",
    "schedule_from_dict",
    "select_edits",
    "select_unmask",
    "strategy_from_dict",
]
