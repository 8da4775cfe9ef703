"""Vocabulary-sized kernels with pure-torch references .

Each op has a folder: the public dispatcher in `__init__.py`, the pure-torch path in
`reference.py` and the Triton kernels in `triton.py`. Importing this package never imports triton;
see `docs/concepts/kernels.md` for the dispatch rules.
"""

from .candidates import (
    STAT_ALIASES,
    STAT_NAMES,
    CandidateStats,
    StatName,
    candidate_stats,
    candidate_stats_reference,
    candidates,
    candidates_reference,
    edit_candidates,
    edit_candidates_reference,
    resolve_stats,
)
from .masked_logprob import masked_logprob, masked_logprob_reference

__all__ = [
    "STAT_ALIASES",
    "STAT_NAMES",
    "CandidateStats",
    "StatName",
    "candidate_stats",
    "candidate_stats_reference",
    "candidates",
    "candidates_reference",
    "edit_candidates",
    "edit_candidates_reference",
    "masked_logprob",
    "masked_logprob_reference",
    "resolve_stats",
]
