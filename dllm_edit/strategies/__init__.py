"""Composable decoding strategies, threshold schedules, and the toolkit to write new ones.

A strategy is a frozen dataclass with a pure `step(ctx) -> StepResult` and one declaration of what
it needs of the loop (`requires() -> Needs`). The toolkit a new rule is written with:
`dllm_edit.strategies.fields` (validators), `dllm_edit.strategies.selection` (masks of the block,
ranks with the tie rule, top-k, LLaDA's quota, the confidence kinds) and `register_strategy`
(snake_case names; the entry-point group `dllm_edit.strategies` for other packages). See
CONTRIBUTING.md, "Add a decoding algorithm".
"""

from . import fields, selection
from .base import InputName, StepContext, StepResult, Strategy
from .canvas_view import CanvasView
from .dream import DreamUnmask
from .eb_sampler import EBSampler
from .edit import TokenEdit, select_edits
from .fast_dllm import FastDLLMFactor, FastDLLMThreshold
from .klass import KLASS
from .multi_block import MultiBlockEdit
from .needs import Needs, merge_needs
from .pc_sampler import PCSampler
from .prophet import Prophet
from .random_order import LLaDARandom
from .registry import (
    ENTRY_POINT_GROUP,
    available_strategies,
    canonical_name,
    get_strategy,
    register_strategy,
    strategy_from_dict,
)
from .remask import LowConfidenceRemask
from .repeat_penalty import AdjacentRepeatPenalty
from .schedules import Constant, Cosine, Linear, Schedule, Stepwise, as_schedule, schedule_from_dict
from .selection import masked_count_quota, rank_descending
from .token_prior import estimate_token_prior, load_token_prior
from .unmask import QuotaUnmask, ThresholdUnmask, quota_schedule, select_unmask
from .wino import WINO

# One style of name, snake_case; each class's own name stays an alias (the name the LLaDA2.1 rules
# had in earlier releases). The zoo's pages: docs/concepts/algorithms.md, algorithms-klass-pc-wino.md.
_BUILT_INS: dict[str, type[Strategy]] = {
    "threshold_unmask": ThresholdUnmask,
    "quota_unmask": QuotaUnmask,
    "token_edit": TokenEdit,
    "multi_block_edit": MultiBlockEdit,
    "low_confidence_remask": LowConfidenceRemask,
    "fast_dllm_threshold": FastDLLMThreshold,
    "fast_dllm_factor": FastDLLMFactor,
    "eb_sampler": EBSampler,
    "prophet": Prophet,
    "dream": DreamUnmask,
    "llada_random": LLaDARandom,
    "klass": KLASS,
    "pc_sampler": PCSampler,
    "wino": WINO,
}
for _name, _cls in _BUILT_INS.items():
    register_strategy(_name)(_cls)
del _name, _cls

__all__ = [
    "ENTRY_POINT_GROUP",
    "KLASS",
    "WINO",
    "AdjacentRepeatPenalty",
    "CanvasView",
    "Constant",
    "Cosine",
    "DreamUnmask",
    "EBSampler",
    "FastDLLMFactor",
    "FastDLLMThreshold",
    "InputName",
    "LLaDARandom",
    "Linear",
    "LowConfidenceRemask",
    "MultiBlockEdit",
    "Needs",
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
    "canonical_name",
    "estimate_token_prior",
    "fields",
    "get_strategy",
    "load_token_prior",
    "masked_count_quota",
    "merge_needs",
    "quota_schedule",
    "rank_descending",
    "register_strategy",
    "schedule_from_dict",
    "select_edits",
    "select_unmask",
    "selection",
    "strategy_from_dict",
]
