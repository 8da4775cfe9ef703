"""Pure-torch candidate selection: the ground truth and the CPU path.

For every row of logits, return the candidate token and its probability under the (optionally
temperature-scaled, top-k / top-p filtered) softmax, and for `edit_candidates_reference` also the
probability of the token currently at that position. Rows are processed in chunks so that no
float32 copy of the whole `[N, V]` logits (let alone a kept softmax) is materialised at once: every
chunk is computed in two preallocated float32 buffers of about `_CHUNK_BYTES / 2` each (the
working copy; the sampling noise, then the softmax), so the working set is the same in every call and every
process.

Greedy float32 logits without top-k / top-p, the decoding loop's usual call, need no working copy:
without suppressed ids the chunks read the caller's logits as they are; with them, and only when the
caller says the logits are its own (`in_place=True`: the loop passes it for its forwards' logits),
the suppressed ids are set to -inf in the caller's logits for the call and restored, bit for bit,
before it returns (even when it raises). Writing bumps the tensor's version counter, so a tensor that
autograd saved (a `detach()`ed view of one included, which nothing here can tell apart) must not be
lent: the default copies. Logits that cannot be written safely even when lent (they require grad,
are an inference tensor outside inference mode, or have rows that share memory) take the copy.

The probability is computed as the references compute it, `softmax(x)[token]` (`exp(x_token -
max) / sum(exp(x - max))`; the Triton kernel's online softmax gives the same expression), never as
`exp(x_token - logsumexp(x))`: near 1 the latter is limited by the float32 spacing of the
log-sum-exp (about 2e-6 for logits near 20), so distinct probabilities like 0.9999937 and 0.9999923
collapse to one value and their order is lost. Near-1 values differing by more than float32's
spacing below 1 (6e-8) keep their order. Exact ties are broken by the strategies toward the lower
position (see `dllm_edit.strategies.unmask.rank_descending`).

Special values (the Triton kernel in `triton.py` follows the same rules):

* a NaN anywhere in a row (after suppression) makes that row's `prob` (and `current_prob`) NaN and
  its token the index of the first NaN, as `torch.argmax` does;
* a row whose entries are all `-inf` has token 0 and `prob` NaN (0/0);
* a `current` id outside `[0, V)` has `current_prob` 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from .stats import CandidateStats, check_stats

# Rows per chunk are chosen so a chunk's float32 working copy stays near this many bytes.
_CHUNK_BYTES = 16 * 2**20
# `first_argmax` splits rows of at least this many entries into this many blocks.
_ARGMAX_BLOCKS, _ARGMAX_MIN_VOCAB = 16, 4096


def first_argmax(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`torch.argmax(x, dim=-1, out=out)` for `x` `[n, V]`, the same index in every case (the first
    maximum; the first NaN of a row holding one), in two passes that CPU kernels run several times
    faster: the maximum of each of 16 blocks of the row (`amax` is vectorised, `argmax` is not), then
    the argmax inside the first block that holds the row's maximum. Rows that do not split into 16
    equal blocks of at least 256 entries take `torch.argmax` itself.

    Examples:
        >>> import torch
        >>> x = torch.zeros(2, 8192); x[0, 5000] = x[0, 7000] = 3.0; x[1, 9] = float("nan")
        >>> first_argmax(x, torch.empty(2, dtype=torch.long)).tolist()
        [5000, 9]
    """
    n, vocab = x.shape
    if vocab < _ARGMAX_MIN_VOCAB or vocab % _ARGMAX_BLOCKS or x.device.type != "cpu":
        return torch.argmax(x, dim=-1, out=out)
    width = vocab // _ARGMAX_BLOCKS
    blocks = x.view(n, _ARGMAX_BLOCKS, width)  # [n, K, W]
    block_max = blocks.amax(-1)  # [n, K]; NaN where a block holds a NaN
    row_max = block_max.amax(-1, keepdim=True)  # [n, 1]
    hit = (block_max == row_max) | block_max.isnan()  # [n, K] blocks holding the row's maximum (or a NaN)
    first = hit.to(torch.uint8).argmax(-1)  # [n] the first such block
    inside = blocks[torch.arange(n, device=x.device), first].argmax(-1)  # [n] within it
    return torch.add(inside, first * width, out=out)


def filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the `top_k` largest logits of each row, set the rest to -inf. `logits`: `[N, V]`."""
    k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # [N, 1]
    return logits.masked_fill(logits < kth, -float("inf"))  # [N, V]


def filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest prefix of sorted tokens whose mass reaches `top_p`.

    The most likely token is always kept. `logits`: `[N, V]`.
    """
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)  # [N, V]
    cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)  # [N, V]
    remove_sorted = cum > top_p  # [N, V]
    remove_sorted[:, 1:] = remove_sorted[:, :-1].clone()
    remove_sorted[:, 0] = False
    remove = torch.zeros_like(remove_sorted).scatter_(-1, sorted_idx, remove_sorted)  # [N, V]
    return logits.masked_fill(remove, -float("inf"))


def _candidates_chunk(
    logits: torch.Tensor,
    work: torch.Tensor | None,
    scratch: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
    suppress_ids: tuple[int, ...],
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    current: torch.Tensor | None = None,
    extra: dict[str, torch.Tensor] | None = None,
    prev: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """One chunk of rows, computed in the caller's buffers (`work`, `scratch`: `[n, V]` float32) and
    written to `out` = (token `[n]`, prob `[n]`, current_prob `[n]` or None). Nothing of size `[n, V]`
    is allocated unless top-k / top-p filtering is on, or `extra` asks for the entropy or the KL (one
    `[n, V]` temporary per chunk). `work` None: `logits` are float32 with `suppress_ids` already at
    -inf (`_suppressed_in_place`), greedy and unfiltered, and are read as they are.

    `extra` holds the chunk's slices of the optional outputs of `candidate_stats_reference`
    (`top_prob`, `second_prob`, `logit_gap`, `entropy`, `kl`: `[n]`; `kept_logits`: `[n, V]`,
    `kept_lse`: `[n]`); `prev` the previous step's kept `(logits [n, V], lse [n])` that `kl` compares
    against."""
    token_out, prob_out, current_out = out
    if work is None:  # greedy float32 logits, already suppressed by `_suppressed_in_place`: read them
        x = logits  # [n, V]
    else:
        x = work.copy_(logits)  # [n, V] float32 working copy; the caller's logits are not written
        if suppress_ids:
            x.index_fill_(-1, torch.tensor(suppress_ids, device=x.device), -float("inf"))
    if temperature > 0:
        x.div_(temperature)
    if top_k is not None:
        x.copy_(filter_top_k(x, top_k))
    if top_p is not None:
        x.copy_(filter_top_p(x, top_p))
    if temperature > 0:
        # Gumbel-max: argmax(x + G) is a sample of softmax(x); in place, the same operations as
        # -log(-log(u.clamp_min(1e-20)).clamp_min(1e-20)) + x
        u = torch.rand(
            x.shape, generator=generator, device=x.device, dtype=torch.float32, out=scratch
        )  # [n, V]
        key = u.clamp_min_(1e-20).log_().neg_().clamp_min_(1e-20).log_().neg_().add_(x)  # [n, V]
        first_argmax(key, token_out)  # [n]
    else:
        first_argmax(x, token_out)  # [n]
    # softmax, then gather, as the reference decoders do (torch.softmax's own exp(x - max) / sum):
    # exp(x_token - logsumexp) would lose near-1 probabilities (logsumexp's float32 spacing at
    # |x| ~ 20 is ~2e-6, which maps 0.9999937, 0.9999923 and 0.9999911 to one value)
    probs = torch.softmax(x, dim=-1, out=scratch)  # [n, V]; NaN rows for a NaN or all -inf row
    prob_out.copy_(probs.gather(-1, token_out[:, None]).squeeze(-1))  # [n]
    if current_out is not None and current is not None:
        vocab = x.shape[-1]
        valid = (current >= 0) & (current < vocab)  # [n]
        at = probs.gather(-1, current.clamp(0, vocab - 1)[:, None]).squeeze(-1)  # [n]
        current_out.copy_(torch.where(valid | prob_out.isnan(), at, 0.0))  # [n]
    if extra:
        _extra_stats(x, probs, prob_out.isnan(), extra, prev)


def _extra_stats(
    x: torch.Tensor,
    probs: torch.Tensor,
    bad: torch.Tensor,
    extra: dict[str, torch.Tensor],
    prev: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    """The optional statistics of one chunk from its filtered logits `x` `[n, V]` and softmax `probs`
    `[n, V]`; `bad` `[n]` marks NaN rows (every statistic NaN there, as `prob` is)."""
    nan = torch.tensor(float("nan"), device=x.device)
    if "top_prob" in extra:
        top2 = torch.topk(probs, min(2, probs.shape[-1]), dim=-1).values  # [n, 2]
        extra["top_prob"].copy_(top2[:, 0])
        second = top2[:, 1] if top2.shape[-1] > 1 else torch.zeros_like(top2[:, 0])  # [n]
        extra["second_prob"].copy_(torch.where(bad, nan, second))
        top2_x = torch.topk(x, min(2, x.shape[-1]), dim=-1).values  # [n, 2] the same slots' logits
        none = torch.full_like(top2_x[:, 0], -float("inf"))  # [n] a one-token vocabulary has no second
        second_x = top2_x[:, 1] if top2_x.shape[-1] > 1 else none  # [n]
        gap = torch.where(second_x == -float("inf"), float("inf"), top2_x[:, 0] - second_x)  # [n]
        extra["logit_gap"].copy_(torch.where(bad, nan, gap))
    if not {"entropy", "kl", "kept_lse"} & set(extra):
        return
    lse = torch.logsumexp(x, dim=-1)  # [n]; -inf on an all -inf row
    live = probs > 0  # [n, V]; 0 * -inf terms are 0, not NaN
    if "entropy" in extra:
        logp = x - lse[:, None]  # [n, V]
        plogp = torch.where(live, probs * logp, 0.0).sum(-1)  # [n]
        extra["entropy"].copy_(torch.where(bad, nan, -plogp))
    if "kl" in extra:
        if prev is None:
            raise ValueError("candidate_stats: kl=True needs `prev`, the previous step's kept logits and lse")
        prev_x, prev_lse = prev  # [n, V], [n]
        # KL(p || q) = sum_v p (x - x_q) - (lse - lse_q): the log-probabilities' difference without
        # forming either; a token p keeps and q excluded (x_q = -inf) makes it +inf
        drift = torch.where(live, probs * (x - prev_x), 0.0).sum(-1)  # [n]
        kl = drift - (lse - prev_lse)  # [n]
        extra["kl"].copy_(torch.where(bad, nan, kl.clamp_min(0.0)))
    if "kept_lse" in extra:
        extra["kept_logits"].copy_(x)
        extra["kept_lse"].copy_(lse)


def _reads_in_place(
    flat: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    suppress_ids: tuple[int, ...],
    in_place: bool,
) -> bool:
    """Whether the chunks may read `flat` `[N, V]` itself: greedy, unfiltered float32 logits, read
    as they are without suppressed ids; with them, only logits the caller lends (`in_place`) whose
    suppressed ids can be set to -inf for the call and restored (no grad, writable, rows that do not
    share memory)."""
    if flat.dtype != torch.float32 or temperature > 0 or top_k is not None or top_p is not None:
        return False
    if not suppress_ids:
        return True  # nothing is written: read-only
    if not in_place or flat.requires_grad or (flat.is_inference() and not torch.is_inference_mode_enabled()):
        return False
    rows, vocab = flat.shape
    return flat.stride(-1) == 1 and (rows <= 1 or flat.stride(0) >= vocab)


@contextmanager
def _suppressed_in_place(flat: torch.Tensor, suppress_ids: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """`flat` `[N, V]` with the columns `suppress_ids` at -inf inside the block, restored bit for bit
    on the way out (an exception included)."""
    if not suppress_ids:
        yield flat
        return
    ids = torch.tensor(suppress_ids, device=flat.device)  # [K]
    saved = flat.index_select(-1, ids)  # [N, K] the columns as they were
    flat.index_fill_(-1, ids, -float("inf"))
    try:
        yield flat
    finally:
        flat.index_copy_(-1, ids, saved)


def _candidates_rows(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
    suppress_ids: tuple[int, ...],
    current: torch.Tensor | None,
    extra_out: dict[str, torch.Tensor] | None = None,
    prev: tuple[torch.Tensor, torch.Tensor] | None = None,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Rows in chunks, all through two preallocated float32 buffers of about `_CHUNK_BYTES / 2` each
    (the working copy; the noise, then the softmax), so the memory a call adds is the same every call
    and every process, whatever the allocator does with freed blocks. Greedy, unfiltered float32
    logits skip the working copy (`_reads_in_place`): one buffer, the softmax's.

    `extra_out`: flat `[N]` (and `[N, V]` for `kept_logits`) outputs of the optional statistics,
    filled chunk by chunk; `prev`: flat `([N, V], [N])` kept logits and lse of the previous step;
    `in_place`: the caller lends `logits` (see the module docstring)."""
    check_in_place(in_place)
    lead = logits.shape[:-1]
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # [N, V]
    n = flat.shape[0]
    device = logits.device
    flat_current = None if current is None else current.reshape(-1)  # [N]
    rows = max(1, min(n, _CHUNK_BYTES // (2 * 4 * vocab)))  # two [rows, V] float32 buffers
    reads_in_place = _reads_in_place(flat, temperature, top_k, top_p, suppress_ids, in_place)
    scratch = torch.empty(rows, vocab, dtype=torch.float32, device=device)  # [rows, V] noise, then softmax
    work = (
        None if reads_in_place else torch.empty_like(scratch)
    )  # [rows, V] the working copy, reused by every chunk
    token = torch.empty(n, dtype=torch.long, device=device)  # [N]
    prob = torch.empty(n, dtype=torch.float32, device=device)  # [N]
    current_prob = None if current is None else torch.empty_like(prob)  # [N]
    lent = _suppressed_in_place(flat, suppress_ids) if reads_in_place else nullcontext(flat)
    with lent as source:  # [N, V]
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            m = stop - start
            _candidates_chunk(
                source[start:stop],
                None if work is None else work[:m],
                scratch[:m],
                temperature,
                top_k,
                top_p,
                generator,
                suppress_ids,
                (
                    token[start:stop],
                    prob[start:stop],
                    None if current_prob is None else current_prob[start:stop],
                ),
                None if flat_current is None else flat_current[start:stop],
                None if not extra_out else {key: value[start:stop] for key, value in extra_out.items()},
                None if prev is None else (prev[0][start:stop], prev[1][start:stop]),
            )
    return (
        token.reshape(lead),
        prob.reshape(lead),
        None if current_prob is None else current_prob.reshape(lead),
    )


def candidates_reference(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate token and its probability for every row.

    Args:
        logits: `[..., V]` logits (any float dtype).
        temperature: 0 for greedy (argmax); > 0 scales the logits and samples (Gumbel-max).
        top_k: keep only the k largest logits before the softmax (None: off).
        top_p: nucleus filtering before the softmax (None: off).
        generator: torch.Generator for the sampling noise.
        suppress_ids: token ids never proposed (their logit set to -inf), e.g. the mask token.
        in_place: lend `logits` for the call: greedy float32 logits then need no working copy,
            the suppressed ids being set to -inf in them and restored bit for bit before the call
            returns. Only for logits nothing else reads meanwhile and autograd has not saved (those
            of a forward under `torch.no_grad()`); False (the default) never writes them.

    Returns:
        `(token, prob)`: LongTensor `[...]` and FloatTensor `[...]` (float32), `prob` being the
        probability of `token` under the filtered, temperature-scaled softmax.

    Examples:
        >>> import torch
        >>> tok, p = candidates_reference(torch.tensor([[0.0, 2.0, 1.0]]))
        >>> tok.tolist(), round(p.item(), 4)
        ([1], 0.6652)
    """
    token, prob, _ = _candidates_rows(
        logits, temperature, top_k, top_p, generator, suppress_ids, None, in_place=in_place
    )
    return token, prob


def edit_candidates_reference(
    logits: torch.Tensor,
    current: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`candidates_reference` plus the probability of the token currently at each position.

    One pass gives what both the M2T and the T2T decisions need: the candidate, its probability and
    the probability, under the same distribution, of the token the canvas holds there.

    Args:
        logits: `[..., V]` logits (any float dtype).
        current: LongTensor `[...]`, the token at each position (ids outside `[0, V)` get
            probability 0).
        temperature: as in `candidates_reference`.
        top_k: as in `candidates_reference`.
        top_p: as in `candidates_reference`.
        generator: as in `candidates_reference`.
        suppress_ids: as in `candidates_reference`; a suppressed current token has probability 0.
        in_place: as in `candidates_reference`.

    Returns:
        `(token, prob, current_prob)`: LongTensor `[...]` and two FloatTensors `[...]` (float32).

    Examples:
        >>> import torch
        >>> tok, p, cur = edit_candidates_reference(torch.tensor([[0.0, 2.0, 1.0]]), torch.tensor([2]))
        >>> tok.tolist(), round(p.item(), 4), round(cur.item(), 4)
        ([1], 0.6652, 0.2447)
    """
    token, prob, current_prob = _candidates_rows(
        logits, temperature, top_k, top_p, generator, suppress_ids, current, in_place=in_place
    )
    assert current_prob is not None
    return token, prob, current_prob


def candidate_stats_reference(
    logits: torch.Tensor,
    stats: frozenset[str] | set[str] = frozenset(),
    current: torch.Tensor | None = None,
    prev: tuple[torch.Tensor, torch.Tensor] | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
    *,
    in_place: bool = False,
) -> CandidateStats:
    """The candidates and the statistics named in `stats` (`STAT_NAMES`), in one chunked pass.

    Every statistic is of the distribution the candidate is drawn from: after suppression,
    temperature and top-k / top-p. With `"kl"` the result also keeps this step's logits and lse
    (`kept_logits`, `kept_lse`), which the next call takes as `prev`; without `prev` (a block's first
    step) the KL is `+inf`.

    Args:
        logits: `[..., V]` logits (any float dtype).
        stats: names of `STAT_NAMES` to compute.
        current: LongTensor `[...]`, the token at each position (for `"current_prob"`).
        prev: the previous call's `(kept_logits [..., V], kept_lse [...])`, for `"kl"`.
        temperature: as in `candidates_reference`.
        top_k: as in `candidates_reference`.
        top_p: as in `candidates_reference`.
        generator: as in `candidates_reference`.
        suppress_ids: as in `candidates_reference`.
        in_place: as in `candidates_reference`.

    Returns:
        `CandidateStats`.

    Examples:
        >>> import torch
        >>> out = candidate_stats_reference(torch.tensor([[0.0, 2.0, 1.0]]), {"second_prob", "entropy"})
        >>> out.token.tolist(), round(out.second_prob.item(), 4), round(out.entropy.item(), 4)
        ([1], 0.2447, 0.8324)
    """
    stats = check_stats("candidate_stats", stats, current)
    lead, vocab = logits.shape[:-1], logits.shape[-1]
    n = logits.numel() // vocab if vocab else 0
    device = logits.device
    extra: dict[str, torch.Tensor] = {}
    if "top_prob" in stats:  # with "second_prob" and "logit_gap" (resolve_stats asks for all three)
        extra["top_prob"] = torch.empty(n, dtype=torch.float32, device=device)
        extra["second_prob"] = torch.empty(n, dtype=torch.float32, device=device)
        extra["logit_gap"] = torch.empty(n, dtype=torch.float32, device=device)
    if "entropy" in stats:
        extra["entropy"] = torch.empty(n, dtype=torch.float32, device=device)
    flat_prev = None
    if "kl" in stats:
        extra["kept_logits"] = torch.empty(n, vocab, dtype=torch.float32, device=device)
        extra["kept_lse"] = torch.empty(n, dtype=torch.float32, device=device)
        if prev is not None:
            check_prev("candidate_stats", prev, logits)
            extra["kl"] = torch.empty(n, dtype=torch.float32, device=device)
            flat_prev = (prev[0].reshape(n, vocab), prev[1].reshape(n))
    token, prob, current_prob = _candidates_rows(
        logits,
        temperature,
        top_k,
        top_p,
        generator,
        suppress_ids,
        current.long() if "current_prob" in stats and current is not None else None,
        extra,
        flat_prev,
        in_place=in_place,
    )
    shaped = {
        key: value.reshape(*lead, vocab) if key == "kept_logits" else value.reshape(lead)
        for key, value in extra.items()
    }
    if "kl" in stats and prev is None:
        shaped["kl"] = torch.full(lead, float("inf"), dtype=torch.float32, device=device)
    return CandidateStats(token=token, prob=prob, current_prob=current_prob, **shaped)


def check_in_place(in_place: object) -> None:
    """`in_place` must be a bool (a truthy string or tensor would lend logits by accident)."""
    if not isinstance(in_place, bool):
        raise TypeError(
            f"in_place must be a bool, got {type(in_place).__name__} {in_place!r}; pass True only for "
            "logits the call may write and restore (those of your own no-grad forward), else False"
        )


def check_prev(op: str, prev: tuple[torch.Tensor, torch.Tensor], logits: torch.Tensor) -> None:
    """`prev` must be the `(kept_logits, kept_lse)` of a call on logits of the same shape."""
    if (
        not isinstance(prev, tuple)
        or len(prev) != 2
        or tuple(prev[0].shape) != tuple(logits.shape)
        or tuple(prev[1].shape) != tuple(logits.shape[:-1])
    ):
        got = [tuple(t.shape) for t in prev] if isinstance(prev, tuple) else type(prev).__name__
        raise ValueError(
            f"{op}: `prev` must be the previous step's (kept_logits {tuple(logits.shape)}, kept_lse "
            f"{tuple(logits.shape[:-1])}), got {got}; pass the kept_logits / kept_lse of the last result"
        )
