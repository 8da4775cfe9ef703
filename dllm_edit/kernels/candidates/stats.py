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

from collections.abc import Iterable
from typing import Literal, NamedTuple, get_args

import torch

#: The one name of each statistic `candidate_stats` can add, from the kernel to
#: `StepContext.stat(name)` and `Needs(stats=...)`: the field of `CandidateStats` that holds it.
#: `"top_prob"`, `"second_prob"` and `"logit_gap"` (the top-1 minus top-2 logit of the same
#: distribution, exact where `log(top_prob / second_prob)` underflows) come from the same top-2
#: values: asking for any computes all three.
#: A new statistic is a new name here, a field of `CandidateStats` and its computation in
#: `reference.py` / `triton.py`; the decoding loop hands every asked-for field to the strategies.
StatName = Literal["current_prob", "top_prob", "second_prob", "logit_gap", "entropy", "kl"]
STAT_NAMES: tuple[StatName, ...] = get_args(StatName)

#: The statistics read off the two largest values of each distribution (computed together).
TOP_TWO: tuple[StatName, ...] = ("top_prob", "second_prob", "logit_gap")

#: Names of earlier releases, still accepted wherever statistics are asked for.
STAT_ALIASES: dict[str, tuple[StatName, ...]] = {
    "current": ("current_prob",),
    "second": ("top_prob", "second_prob"),
    "kl_prev": ("kl",),
}


class CandidateStats(NamedTuple):
    """What one pass over the logits returns; a field not asked for is None.

    Attributes:
        token: LongTensor `[...]`, the candidate (argmax, or a sample at temperature > 0).
        prob: FloatTensor `[...]`, its probability.
        current_prob: FloatTensor `[...]`, the probability of the given current token.
        top_prob: FloatTensor `[...]`, the largest probability.
        second_prob: FloatTensor `[...]`, the second largest probability (0 when V = 1).
        logit_gap: FloatTensor `[...]`, the largest minus the second largest filtered,
            temperature-scaled logit (`log(top_prob / second_prob)` without its underflow: finite
            where `second_prob` is 0 in float32; `+inf` when only one token is left).
        entropy: FloatTensor `[...]`, `-sum_v p log p` in nats.
        kl: FloatTensor `[...]`, `KL(p || p_prev)` against the kept previous step (`+inf` without one).
        kept_logits: FloatTensor `[..., V]`, this step's filtered logits, to pass as `prev` next step.
        kept_lse: FloatTensor `[...]`, their log-sum-exp.
    """

    token: torch.Tensor
    prob: torch.Tensor
    current_prob: torch.Tensor | None = None
    top_prob: torch.Tensor | None = None
    second_prob: torch.Tensor | None = None
    logit_gap: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    kept_logits: torch.Tensor | None = None
    kept_lse: torch.Tensor | None = None

    def statistics(self) -> dict[str, torch.Tensor]:
        """The statistics this pass computed, by name (the fields of `STAT_NAMES` that are set)."""
        return {name: value for name in STAT_NAMES if (value := getattr(self, name)) is not None}

    def scatter_rows(self, rows: torch.Tensor, like: torch.Tensor) -> CandidateStats:
        """This result for a subset of rows (`[R, ...]` fields), written into a full batch.

        Args:
            rows: LongTensor `[R]`, the batch rows this result holds.
            like: the full batch's current tokens (`[B, ...]`): the candidate of a row outside
                `rows` is its current token; its statistics and probability are 0 (never read).

        Returns:
            `CandidateStats` with `[B, ...]` fields (`kept_*` stay `[R, ...]`: the caller keeps them).
        """
        zeros = torch.zeros(like.shape, device=like.device)  # [B, ...]
        filled = {
            name: zeros.index_copy(0, rows, value)
            for name in ("prob", *STAT_NAMES)
            if (value := getattr(self, name)) is not None
        }
        return self._replace(token=like.index_copy(0, rows, self.token), **filled)


def resolve_stats(op: str, stats: Iterable[str], companions: bool = True) -> frozenset[StatName]:
    """The statistic names of `stats`, earlier names (`STAT_ALIASES`) replaced by their own; with
    `companions`, the statistics computed together with them added (`TOP_TWO`: what a pass
    computes), without, exactly what was named (what a strategy declares).

    Raises:
        ValueError: a name that is neither a statistic nor an alias.

    Examples:
        >>> sorted(resolve_stats("demo", {"second", "entropy"}))
        ['entropy', 'logit_gap', 'second_prob', 'top_prob']
    """
    if isinstance(stats, str):
        raise TypeError(f"{op}: `stats` must be a set of names, not the string {stats!r}")
    out: set[StatName] = set()
    unknown = []
    for name in stats:
        if name in STAT_ALIASES:
            out.update(STAT_ALIASES[name])
        elif name in STAT_NAMES:
            out.add(name)  # type: ignore[arg-type]  # a StatName by the test above
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(
            f"{op}: unknown statistics {sorted(map(str, unknown))}; choose among {list(STAT_NAMES)}"
        )
    if companions and out & set(TOP_TWO):  # one pass writes them all
        out.update(TOP_TWO)
    return frozenset(out)


def check_stats(op: str, stats: Iterable[str], current: torch.Tensor | None) -> frozenset[StatName]:
    """The resolved names of `stats` (`resolve_stats`); `"current_prob"` needs the current tokens."""
    resolved = resolve_stats(op, stats)
    if "current_prob" in resolved and current is None:
        raise ValueError(f"{op}: the 'current_prob' statistic needs `current`, the token at each position")
    return resolved
