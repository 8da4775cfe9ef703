"""Triton kernel for candidate selection: one pass over the vocabulary per row.

Each program owns one row of logits and streams it once, tile by tile (`BLOCK` ids per tile),
keeping per-lane running statistics in registers:

* the online softmax: running max `m` and running sum `s` of `exp(x - m)`;
* the argmax key (the logit for greedy, the logit plus Gumbel noise when sampling), its index and
  (sampling) its logit;
* the first NaN index.

A final reduction over the lanes gives the token (lowest index among equal keys, like
`torch.argmax`), its probability `exp(x_token - max) / sum` and, for `edit_candidates`, the
probability of the current token (one extra element load per row). Nothing of size `V` is written.

Sampling is Gumbel-max with Triton's counter-based Philox (`tl.rand`): the counter is
`row * V + id` and the key a 64-bit seed drawn from the caller's `torch.Generator` (one small
device-side draw per call, no host sync). The same generator state gives the same tokens, but the
stream differs from the torch reference's `torch.rand` (so sampled tokens differ between backends;
their distribution is the same).

Top-k / top-p are not fused: the dispatcher sends those calls to the torch reference. Importing
this module imports triton; the dispatcher imports it only when a Triton kernel is about to run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .reference import check_prev
from .stats import CandidateStats, check_stats

_INT32_MAX = 2**31 - 1
#: Largest tile (ids per loop iteration). 4096 fp32 lanes over 8 warps is 16 registers per lane
#: array per thread.
MAX_BLOCK = 4096


@triton.jit
def _candidates_kernel(
    x_ptr,
    inner,
    stride_outer,
    stride_inner,
    vocab,
    cur_ptr,
    sup_ptr,
    seed_ptr,
    temperature,
    tok_ptr,
    prob_ptr,
    cur_prob_ptr,
    top_ptr,
    second_ptr,
    gap_ptr,
    ent_ptr,
    kl_ptr,
    prev_ptr,
    prev_lse_ptr,
    kept_ptr,
    kept_lse_ptr,
    NUM_SUP: tl.constexpr,
    SAMPLE: tl.constexpr,
    HAS_CUR: tl.constexpr,
    SECOND: tl.constexpr,
    ENTROPY: tl.constexpr,
    KL: tl.constexpr,
    KEEP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + (row // inner) * stride_outer + (row % inner) * stride_inner
    lanes = tl.arange(0, BLOCK)
    big = 2147483647
    neg_inf = float("-inf")
    m = tl.full([BLOCK], neg_inf, tl.float32)  # running max of x per lane
    s = tl.zeros([BLOCK], tl.float32)  # running sum of exp(x - m) per lane
    best = tl.full([BLOCK], neg_inf, tl.float32)  # best argmax key per lane
    best_x = tl.full([BLOCK], neg_inf, tl.float32)  # x at the best key (sampling)
    best_i = tl.full([BLOCK], big, tl.int32)  # its id
    nan_i = tl.full([BLOCK], big, tl.int32)  # first NaN id per lane
    v1 = tl.full([BLOCK], neg_inf, tl.float32)  # largest x per lane ("second")
    v2 = tl.full([BLOCK], neg_inf, tl.float32)  # second largest x per lane
    t = tl.zeros([BLOCK], tl.float32)  # sum of exp(x - m) * (x - m) per lane ("entropy")
    d = tl.zeros([BLOCK], tl.float32)  # sum of exp(x - m) * (x - x_prev) per lane ("kl")
    if SAMPLE:
        seed = tl.load(seed_ptr)
    for start in range(0, vocab, BLOCK):
        offs = start + lanes  # [BLOCK] int32
        x = tl.load(base + offs, mask=offs < vocab, other=neg_inf).to(tl.float32)
        for j in tl.static_range(NUM_SUP):
            x = tl.where(offs == tl.load(sup_ptr + j), neg_inf, x)
        if SAMPLE:
            x = x / temperature
        is_nan = x != x
        nan_i = tl.minimum(nan_i, tl.where(is_nan, offs, big))
        x = tl.where(is_nan, neg_inf, x)  # NaN is reported separately; max() of NaN differs by backend
        m_new = tl.maximum(m, x)
        # a lane that has seen only -inf keeps m = -inf and s = 0; shifting by 0 there avoids -inf - -inf
        shift = tl.where(m_new == neg_inf, 0.0, m_new)
        scale = tl.exp(m - shift)
        e = tl.exp(x - shift)
        if ENTROPY:
            # sum e^(x-m')(x-m') = e^(m-m') (t + (m-m') s) + e^(x-m')(x-m'); no 0 * -inf terms
            moved = tl.where(m == neg_inf, 0.0, m - shift)
            t = scale * (t + moved * s) + tl.where(e > 0, e * (x - shift), 0.0)
        if KL:
            xp = tl.load(prev_ptr + row * vocab + offs, mask=offs < vocab, other=neg_inf)
            d = d * scale + tl.where(e > 0, e * (x - xp), 0.0)
        if KEEP:
            tl.store(kept_ptr + row * vocab + offs, x, mask=offs < vocab)
        if SECOND:
            v2 = tl.maximum(v2, tl.minimum(v1, x))
            v1 = tl.maximum(v1, x)
        s = s * scale + e
        m = m_new
        if SAMPLE:
            u = tl.maximum(tl.rand(seed, row * vocab + offs), 1e-20)
            key = x - tl.log(tl.maximum(-tl.log(u), 1e-20))  # x + Gumbel noise
        else:
            key = x
        better = key > best  # strict: the earliest id keeps a tie
        best = tl.where(better, key, best)
        best_i = tl.where(better, offs, best_i)
        if SAMPLE:
            best_x = tl.where(better, x, best_x)
    row_max = tl.max(m, 0)
    empty = row_max == neg_inf  # every entry -inf: prob is NaN (0/0), as in the reference
    row_shift = tl.where(empty, 0.0, row_max)
    total = tl.sum(s * tl.exp(m - row_shift), 0)
    total = tl.where(empty, 1.0, total)
    top = tl.max(best, 0)
    token = tl.min(tl.where(best == top, best_i, big), 0)
    if SAMPLE:  # noqa: SIM108 (a constexpr branch of the kernel)
        chosen = tl.max(tl.where(best_i == token, best_x, neg_inf), 0)
    else:
        chosen = top
    token = tl.where(token == big, 0, token)  # every entry -inf: id 0, like torch.argmax
    prob = tl.exp(chosen - row_shift) / total
    first_nan = tl.min(nan_i, 0)
    has_nan = first_nan < big
    prob = tl.where(empty, float("nan"), prob)
    token = tl.where(has_nan, first_nan, token)
    prob = tl.where(has_nan, float("nan"), prob)
    tl.store(tok_ptr + row, token.to(tl.int64))
    tl.store(prob_ptr + row, prob)
    bad = has_nan | empty
    lane_w = tl.exp(m - row_shift)  # [BLOCK] each lane's rescaling to the row max
    lse = tl.where(empty, neg_inf, row_max + tl.log(total))
    if SECOND:
        top_lane = tl.min(tl.where(v1 == row_max, lanes, BLOCK), 0)
        second_x = tl.max(tl.where(lanes == top_lane, v2, v1), 0)
        tl.store(top_ptr + row, tl.where(bad, float("nan"), tl.exp(row_max - row_shift) / total))
        second = tl.where(second_x == neg_inf, 0.0, tl.exp(second_x - row_shift) / total)
        tl.store(second_ptr + row, tl.where(has_nan, float("nan"), second))
        gap = tl.where(second_x == neg_inf, float("inf"), row_max - second_x)
        tl.store(gap_ptr + row, tl.where(bad, float("nan"), gap))
    if ENTROPY:
        # sum_v p (x - M) over lanes, then H = log(total) - that
        moved_l = tl.where(m == neg_inf, 0.0, m - row_shift)
        mean_shifted = tl.sum(lane_w * (t + moved_l * s), 0) / total
        tl.store(ent_ptr + row, tl.where(bad, float("nan"), tl.log(total) - mean_shifted))
    if KL:
        prev_lse = tl.load(prev_lse_ptr + row)
        drift = tl.sum(tl.where(s > 0, lane_w * d, 0.0), 0) / total
        kl = tl.maximum(drift - (lse - prev_lse), 0.0)
        tl.store(kl_ptr + row, tl.where(bad, float("nan"), kl))
    if KEEP:
        tl.store(kept_lse_ptr + row, lse)
    if HAS_CUR:
        cur = tl.load(cur_ptr + row)
        valid = (cur >= 0) & (cur < vocab)
        at = tl.load(base + cur, mask=valid, other=neg_inf).to(tl.float32)
        for j in tl.static_range(NUM_SUP):
            at = tl.where(cur == tl.load(sup_ptr + j), neg_inf, at)
        if SAMPLE:
            at = at / temperature
        cur_prob = tl.exp(at - row_shift) / total
        cur_prob = tl.where(has_nan | empty, float("nan"), cur_prob)
        tl.store(cur_prob_ptr + row, cur_prob)


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int, int]:
    """`x` `[..., V]` as rows without copying where the strides allow.

    Returns `(tensor, rows, inner, stride_outer, stride_inner)`: row `r` starts at element
    `(r // inner) * stride_outer + (r % inner) * stride_inner` of `tensor`.
    """
    vocab = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    if x.dim() == 1:
        x = x[None]
    rows = x.numel() // vocab if vocab else 0
    try:
        flat = x.view(-1, vocab)  # [N, V]
        return flat, rows, max(rows, 1), 0, flat.stride(0)
    except RuntimeError:
        pass
    try:
        x3 = x.view(-1, x.shape[-2], vocab)  # [A, S, V], e.g. a slice of the sequence dimension
        return x3, rows, x3.shape[1], x3.stride(0), x3.stride(1)
    except RuntimeError:
        flat = x.reshape(-1, vocab)  # a copy
        return flat, rows, max(rows, 1), 0, flat.stride(0)


def _seed(generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """A 64-bit Philox key drawn from `generator` (or the default generator of `device`): `[1]`."""
    where = generator.device if generator is not None else device
    seed = torch.randint(0, 2**62, (1,), generator=generator, device=where, dtype=torch.int64)
    return seed.to(device)


def candidates_triton(
    logits: torch.Tensor,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    current: torch.Tensor | None = None,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Fused candidates (and the current token's probability) of every row of `logits` `[..., V]`.

    Semantics of `edit_candidates_reference` without top-k / top-p (greedy: same tokens, and
    probabilities to float rounding; sampling: another random stream).

    Args:
        logits: `[..., V]` float32 / float16 / bfloat16 logits on CUDA (or on the CPU under
            `TRITON_INTERPRET=1`).
        temperature: 0 for greedy; > 0 samples.
        generator: torch.Generator the sampling seed is drawn from.
        suppress_ids: ids whose logit is treated as -inf; negative ids count from the end.
        current: LongTensor `[...]` or None; when given, the third output is its probability.
        block: ids per tile (a power of two; default `min(4096, next_pow2(V))`).

    Returns:
        `(token, prob, current_prob)`: LongTensor `[...]`, FloatTensor `[...]` (float32), and the
        float32 current-token probability `[...]` or None.

    Examples:
        >>> import torch
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU needs TRITON_INTERPRET=1
        >>> logits = torch.tensor([[0.0, 2.0, 1.0]], device=device)
        >>> tok, p, cur = candidates_triton(logits, current=torch.tensor([2], device=device))
        >>> tok.tolist(), round(p.item(), 4), round(cur.item(), 4)
        ([1], 0.6652, 0.2447)
    """
    stats = frozenset({"current_prob"}) if current is not None else frozenset()
    out = candidate_stats_triton(logits, stats, current, None, temperature, generator, suppress_ids, block)
    return out.token, out.prob, out.current_prob


def _new_outputs(
    stats: frozenset[str], lead: torch.Size, vocab: int, device: torch.device
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The uninitialised float32 outputs the kernel writes: the token's probability `[...]` and
    `{name: tensor}` for the statistics of `stats` (`kept_logits` `[..., V]`, the others `[...]`;
    the caller adds `"kl"` once it has checked `prev`)."""

    def new(with_vocab: bool = False) -> torch.Tensor:
        shape = (*lead, vocab) if with_vocab else tuple(lead)
        return torch.empty(shape, dtype=torch.float32, device=device)

    prob = new()
    out: dict[str, torch.Tensor] = {"current_prob": new()} if "current_prob" in stats else {}
    if "top_prob" in stats:
        out["top_prob"], out["second_prob"], out["logit_gap"] = new(), new(), new()
    if "entropy" in stats:
        out["entropy"] = new()
    if "kl" in stats:
        out["kept_logits"], out["kept_lse"] = new(with_vocab=True), new()
    return prob, out


def _suppress_tensor(suppress_ids: tuple[int, ...], vocab: int, device: torch.device) -> torch.Tensor:
    """The suppressed ids, each in `[0, V)`, as an int64 tensor (`[0]` when there are none: the
    kernel reads `NUM_SUP` of them); a ValueError for an id outside `[-V, V)`."""
    for i in suppress_ids:
        if not -vocab <= i < vocab:
            raise ValueError(
                f"candidates: suppress_ids must lie in [-V, V) = [{-vocab}, {vocab}), got {i}; "
                "drop ids the vocabulary does not have"
            )
    return torch.tensor([i % vocab for i in suppress_ids] or [0], dtype=torch.int64, device=device)


def candidate_stats_triton(
    logits: torch.Tensor,
    stats: frozenset[str] | set[str] = frozenset(),
    current: torch.Tensor | None = None,
    prev: tuple[torch.Tensor, torch.Tensor] | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    block: int | None = None,
) -> CandidateStats:
    """Fused `candidate_stats_reference` (without top-k / top-p): the statistics of `stats` from the
    same single pass over each row (the top-2 values, the entropy's and the KL's sums are running
    per-lane accumulators, rescaled with the online softmax; `"kl"` also writes the row's filtered
    logits once, as `kept_logits`, and its lse).

    Args:
        logits: `[..., V]` logits on CUDA (or on the CPU under `TRITON_INTERPRET=1`).
        stats: names of `STAT_NAMES`.
        current: LongTensor `[...]`, for `"current_prob"`.
        prev: the previous call's `(kept_logits, kept_lse)`, for `"kl"` (None: KL is `+inf`).
        temperature: as in `candidates_triton`.
        generator: as in `candidates_triton`.
        suppress_ids: as in `candidates_triton`.
        block: as in `candidates_triton`.

    Returns:
        `CandidateStats`.

    Examples:
        >>> import torch
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU needs TRITON_INTERPRET=1
        >>> out = candidate_stats_triton(torch.tensor([[0.0, 2.0, 1.0]], device=device), {"second_prob"})
        >>> round(out.top_prob.item(), 4), round(out.second_prob.item(), 4)
        (0.6652, 0.2447)
    """
    stats = check_stats("candidate_stats", stats, current)
    lead = logits.shape[:-1]
    vocab = logits.shape[-1]
    device = logits.device

    token = torch.empty(lead, dtype=torch.long, device=device)
    prob, out = _new_outputs(stats, lead, vocab, device)
    has_cur = "current_prob" in stats
    second, keep = "top_prob" in stats, "kl" in stats
    kl = keep and prev is not None
    if kl:
        assert prev is not None
        check_prev("candidate_stats", prev, logits)
        out["kl"] = torch.empty_like(prob)
        prev_x = prev[0].to(device=device, dtype=torch.float32).contiguous()  # [..., V]
        prev_lse = prev[1].to(device=device, dtype=torch.float32).contiguous()  # [...]
    x, rows, inner, stride_outer, stride_inner = _rows(logits)
    if rows == 0:
        return CandidateStats(token=token, prob=prob, **out)
    sup = _suppress_tensor(suppress_ids, vocab, device)
    sample = temperature > 0
    seed = _seed(generator, device) if sample else sup
    cur = (
        current.reshape(-1).to(device=device, dtype=torch.long).contiguous()
        if has_cur and current is not None
        else sup
    )
    if block is None:
        block = min(MAX_BLOCK, triton.next_power_of_2(vocab))
    _candidates_kernel[(rows,)](
        x,
        inner,
        stride_outer,
        stride_inner,
        vocab,
        cur,
        sup,
        seed,
        float(temperature) if sample else 1.0,
        token,
        prob,
        out.get("current_prob", prob),
        out.get("top_prob", prob),
        out.get("second_prob", prob),
        out.get("logit_gap", prob),
        out.get("entropy", prob),
        out.get("kl", prob),
        prev_x if kl else prob,
        prev_lse if kl else prob,
        out.get("kept_logits", prob),
        out.get("kept_lse", prob),
        NUM_SUP=len(suppress_ids),
        SAMPLE=sample,
        HAS_CUR=has_cur,
        SECOND=second,
        ENTROPY="entropy" in stats,
        KL=kl,
        KEEP=keep,
        BLOCK=block,
        num_warps=8 if block >= 2048 else 4,
    )
    if keep and not kl:
        out["kl"] = torch.full(lead, float("inf"), dtype=torch.float32, device=device)
    return CandidateStats(token=token, prob=prob, **out)
