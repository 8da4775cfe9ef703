"""Per-position statistics of the candidate distribution, beyond the candidate and its probability.

The field's decoding rules read more of each position's distribution than its argmax: the
top-1/top-2 margin (Dream's `topk_margin`, Prophet), the entropy (EB-Sampler, Dream's `entropy`),
how far the distribution moved since the previous forward (KLASS). `candidate_stats` computes what a
run asks for in the same pass over the logits as the candidates (`Strategy.needs_stats` says what),
and nothing else.

The KL to the previous step needs that step's distribution at each position. It is kept as the
filtered, temperature-scaled float32 logits and their log-sum-exp (`kept_logits` `[..., V]`,
`kept_lse` `[...]`): `log p = logits - lse`. That is the only `[..., V]` tensor that outlives a
step, and only when a strategy asks for `"kl"`: `4 * V` bytes per position (LLaDA2's
157,184-token vocabulary: 629 kB per position, 20.1 MB for a block of 32, per row).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

#: The statistics `candidate_stats` can add: `"current"` (the current token's probability),
#: `"second"` (the top-1 and top-2 probabilities), `"entropy"`, `"kl"` (to the kept previous step).
STAT_NAMES = ("current", "second", "entropy", "kl")


class CandidateStats(NamedTuple):
    """What one pass over the logits returns; a field not asked for is None.

    Attributes:
        token: LongTensor `[...]`, the candidate (argmax, or a sample at temperature > 0).
        prob: FloatTensor `[...]`, its probability.
        current_prob: FloatTensor `[...]`, the probability of the given current token (`"current"`).
        top_prob: FloatTensor `[...]`, the largest probability (`"second"`).
        second_prob: FloatTensor `[...]`, the second largest probability (`"second"`; 0 when V = 1).
        entropy: FloatTensor `[...]`, `-sum_v p log p` in nats (`"entropy"`).
        kl: FloatTensor `[...]`, `KL(p || p_prev)` against the kept previous step (`"kl"`).
        kept_logits: FloatTensor `[..., V]`, this step's filtered logits, to pass as `prev` next step.
        kept_lse: FloatTensor `[...]`, their log-sum-exp.
    """

    token: torch.Tensor
    prob: torch.Tensor
    current_prob: torch.Tensor | None = None
    top_prob: torch.Tensor | None = None
    second_prob: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    kept_logits: torch.Tensor | None = None
    kept_lse: torch.Tensor | None = None


def check_stats(op: str, stats: frozenset[str] | set[str], current: torch.Tensor | None) -> None:
    """Refuse unknown statistic names, and `"current"` without the current tokens."""
    unknown = sorted(set(stats) - set(STAT_NAMES))
    if unknown:
        raise ValueError(f"{op}: unknown statistics {unknown}; choose among {list(STAT_NAMES)}")
    if "current" in stats and current is None:
        raise ValueError(f"{op}: the 'current' statistic needs `current`, the token at each position")
