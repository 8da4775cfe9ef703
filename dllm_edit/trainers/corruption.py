"""Corruption of training examples for the mixed Mask-to-Token + Token-to-Token objective.

LLaDA2.1 (section 3.1) trains two streams at once: a *drafting* stream that predicts masked
tokens (M2T) and an *editing* stream that recovers original tokens from random-noise perturbations
(T2T). Here each response position of an example ends up in one of three states:

- **masked** with probability `t` (the example's, or the block's, mask rate, `t ~ U[t_min, t_max]`);
- **replaced** by a random vocabulary token with probability `e` among the positions not masked
  (`e ~ U[e_min, e_max]`, drawn like `t`); with `in_context_rate > 0`, that fraction of the
  replacements copies the token of another response position of the same example instead — a
  *plausible* error (a digit for a digit, a bracket for a bracket, an identifier of the same
  function), the kind parallel drafting makes. Uniform vocabulary noise is easy to spot by its type
  alone, so a model trained only on it learns to keep any plausible token, and never edits its own
  drafts (measured on an earlier shipped model: docs/research-log.md, "Why the recipe changed");
- **clean** otherwise (left as it is).

With `shift_rate > 0`, that fraction of the examples also gets one *shifted span* (edit-based
corruption, as Seed Diffusion's insertions and deletions): the tokens of a span of `SHIFT_SPAN`
response positions move one position right (an inserted token: the span starts with a copy of the
token before it, and its last token drops out) or left (a deleted token: the token after the span is
pulled in and so appears twice). These are the duplicated and dropped tokens of parallel drafting
(`sort:689=` drafted as `688`), errors that the rest of the block gives away, unlike a uniform
random token. Shifted positions that are not masked and differ from `x_0` count as replaced.

With `editing_stream_rate > 0`, that fraction of the examples (or blocks) is an *editing-stream*
example: nothing is masked, only random replacements (rate `e`) — a fully written block with some
wrong tokens, the state every post step of T2T decoding judges. Without such examples a model never
sees a block with no mask during training, and at the post step it may "correct" right tokens
(measured on an earlier shipped model: docs/research-log.md). Mask rates are not lowered towards 0 for
this: near-zero `t` makes the `1/t`-weighted drafting term high-variance (the LLaDA2.0 report's
"mask ratio bandwidth").

With `semi_ar_rate > 0`, that fraction of the examples is laid out the way *semi-autoregressive
decoding of a full-attention model* sees it: a block `k` of the response (blocks of
`semi_ar_block_length` from the response's first token, as decoding places them after the prompt)
is drawn uniformly; the blocks before it are unmasked (finished drafts: their replacement noise
stays), block `k` is corrupted as drawn above, and every block after it is fully masked (`t = 1`).
Full-attention models (the bidirectional and shifted forms) read those masked future blocks at every
step of block-wise decoding; with the per-example mask rate alone they almost never train on a
finished past next to an all-mask future (the block-diffusion form needs none of this: it never
sees the future).

Prompt positions (and padding) are never touched. All randomness comes from the `generator` passed
in, so a batch is corrupted identically whenever the same generator state is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

SHIFT_SPAN = (2, 8)
"""Lengths (min, max, inclusive) of a shifted span of the edit-based corruption (`shift_rate`)."""
SHIFT_MEANING = "the fraction of examples given one shifted span, an inserted or deleted token (e.g. 0.25)"
SEMI_AR_MEANING = (
    "the fraction of examples laid out as block-wise decoding sees them: finished blocks, one noisy "
    "block, masked blocks after it (e.g. 0.5)"
)


@dataclass(frozen=True)
class Corruption:
    """A corrupted batch.

    Attributes:
        noisy: LongTensor `[B, T]`, the model input `x_t`.
        masked: BoolTensor `[B, T]`, positions replaced by the mask token.
        replaced: BoolTensor `[B, T]`, positions replaced by a different random token.
        mask_rate: FloatTensor `[B, T]`, the mask rate `t` drawn for each position's example (or block).
    """

    noisy: torch.Tensor
    masked: torch.Tensor
    replaced: torch.Tensor
    mask_rate: torch.Tensor


def mix_seed(*parts: int) -> int:
    """One 63-bit seed from integer parts (base seed, step, micro-batch, rank, ...), order-sensitive.

    Examples:
        >>> mix_seed(0, 1) != mix_seed(1, 0)
        True
    """
    seed = 0
    for part in parts:
        seed = (seed * 1_000_003 + int(part)) % (2**63 - 1)
    return seed


def check_rate_range(name: str, low: float, high: float) -> None:
    """Raise a ValueError unless `0 <= low <= high <= 1` (rates of `name`)."""
    if not (0.0 <= low <= 1.0 and 0.0 <= high <= 1.0):
        raise ValueError(
            f"`{name}` rates must lie in [0, 1], got min={low!r}, max={high!r}. They are fractions of the "
            "response tokens; pass values such as min=0.1, max=1.0."
        )
    if low > high:
        raise ValueError(f"`{name}` min must not exceed max, got min={low!r} > max={high!r}. Swap them.")


def check_fraction(name: str, value: float, meaning: str) -> None:
    """Raise a ValueError unless `0 <= value <= 1`, naming the field, the value and what it means.

    Examples:
        >>> check_fraction("shift_rate", 1.5, "the share of examples shifted")
        Traceback (most recent call last):
        ...
        ValueError: `shift_rate` must lie in [0, 1], got 1.5: it is the share of examples shifted.
    """
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1], got {value!r}: it is {meaning}.")


def sample_rates(
    shape: tuple[int, int],
    low: float,
    high: float,
    block_length: int | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Draw a rate `U[low, high]` per row (`block_length=None`) or per block of each row.

    Returns:
        FloatTensor `[B, T]` on the generator's device (CPU without a generator), constant over each
        row or block.
    """
    batch, length = shape
    device = generator.device if generator is not None else torch.device("cpu")
    groups = 1 if block_length is None else -(-length // block_length)
    u = torch.rand((batch, groups), generator=generator, device=device)  # [B, G]
    rates = low + (high - low) * u  # [B, G]
    if block_length is None:
        return rates.expand(batch, length)  # [B, T]
    return rates.repeat_interleave(block_length, dim=1)[:, :length]  # [B, T]


def corrupt_response(
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    mask_rate: tuple[float, float] = (0.1, 1.0),
    edit_rate: tuple[float, float] = (0.0, 0.2),
    block_length: int | None = None,
    never_sample: Sequence[int] = (),
    editing_stream_rate: float = 0.0,
    in_context_rate: float = 0.0,
    shift_rate: float = 0.0,
    semi_ar_rate: float = 0.0,
    semi_ar_block_length: int | None = None,
    generator: torch.Generator | None = None,
) -> Corruption:
    """Mask and randomly replace response tokens (see the module docstring).

    Args:
        input_ids: LongTensor `[B, T]`, the clean sequences `x_0`.
        response_mask: BoolTensor `[B, T]`, the positions that may be corrupted (the response; never
            the prompt or padding).
        mask_token_id: id written at masked positions.
        vocab_size: random replacements are drawn from `[0, vocab_size)`.
        mask_rate: `(t_min, t_max)`; `t ~ U[t_min, t_max]` per example (or per block).
        edit_rate: `(e_min, e_max)`; fraction of the not-masked response positions replaced.
        block_length: draw the rates per block of this many positions instead of per example.
        never_sample: token ids random replacements never use (the mask token is always excluded;
            pass the tokenizer's special ids so noise looks like ordinary text).
        editing_stream_rate: probability that an example (or a block, with `block_length`) is
            corrupted by random replacements only, with nothing masked.
        in_context_rate: fraction of the replacements that copy another response position's token
            of the same example instead of a random vocabulary token (0 = uniform noise only). The
            `never_sample` ids (e.g. the EOS padding of a response) are never copied.
        shift_rate: probability that an example gets one shifted span (an insertion or a deletion,
            see the module docstring); 0 = none.
        semi_ar_rate: probability that an example is laid out as semi-autoregressive decoding sees
            it (finished blocks, one corrupted block, fully masked blocks after it; see the module
            docstring); 0 = none.
        semi_ar_block_length: the decoding block length those blocks have (needed when
            `semi_ar_rate > 0`), counted from the first response position.
        generator: source of all randomness (its device is where the noise is drawn).

    Returns:
        A `Corruption`. A replacement that happens to draw the original token is not counted as
        replaced (it is clean).

    Raises:
        ValueError: rates outside [0, 1] or min > max, shapes that differ, or a vocabulary with no
            token left to sample.

    Examples:
        >>> import torch
        >>> ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
        >>> response = torch.tensor([[False, False, True, True, True, True]])
        >>> c = corrupt_response(ids, response, mask_token_id=0, vocab_size=16, mask_rate=(1.0, 1.0),
        ...                      generator=torch.Generator().manual_seed(0))
        >>> c.noisy.tolist()  # the prompt is kept, every response token masked
        [[5, 6, 0, 0, 0, 0]]
    """
    _check_arguments(
        input_ids,
        response_mask,
        mask_rate,
        edit_rate,
        editing_stream_rate,
        in_context_rate,
        shift_rate,
        semi_ar_rate,
        semi_ar_block_length,
    )
    excluded, allowed = _allowed_tokens(mask_token_id, vocab_size, never_sample)
    device = input_ids.device
    shape = (input_ids.shape[0], input_ids.shape[1])
    response = response_mask.to(device=device, dtype=torch.bool)  # [B, T]
    noise_device = generator.device if generator is not None else torch.device("cpu")

    t = sample_rates(shape, *mask_rate, block_length, generator)  # [B, T]
    masked = response & (torch.rand(shape, generator=generator, device=noise_device) < t).to(device)
    e = sample_rates(shape, *edit_rate, block_length, generator)  # [B, T]
    draw_edit = torch.rand(shape, generator=generator, device=noise_device) < e  # [B, T]
    pick = torch.randint(0, allowed.numel(), shape, generator=generator, device=noise_device)  # [B, T]
    random_tokens = allowed.to(noise_device)[pick].to(device)  # [B, T]
    if editing_stream_rate > 0:  # drawn last, so the other draws do not depend on it
        u = sample_rates(shape, 0.0, 1.0, block_length, generator)  # [B, T], constant per row / block
        masked = masked & ~(u < editing_stream_rate).to(device)
    if in_context_rate > 0:  # drawn after everything else, so rate 0 reproduces the draws above exactly
        random_tokens = _in_context(input_ids, response, excluded, random_tokens, in_context_rate, generator)
    written = input_ids  # [B, T] the tokens before random replacements
    if shift_rate > 0:  # drawn last of all, so rate 0 reproduces the draws above exactly
        written = _shifted(input_ids, response, shift_rate, generator)
    if semi_ar_rate > 0:  # drawn after the shift, so rate 0 reproduces the draws above exactly
        masked, t = _semi_ar_layout(response, masked, t, semi_ar_rate, semi_ar_block_length or 1, generator)
    random_sites = response & ~masked & draw_edit.to(device) & (random_tokens != input_ids)  # [B, T]
    noisy = torch.where(random_sites, random_tokens, written)  # [B, T]
    replaced = response & ~masked & (noisy != input_ids)  # [B, T] random replacements and shifted tokens
    noisy = noisy.masked_fill(masked, mask_token_id)  # [B, T]
    return Corruption(noisy=noisy, masked=masked, replaced=replaced, mask_rate=t.to(device))


def _check_arguments(
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    mask_rate: tuple[float, float],
    edit_rate: tuple[float, float],
    editing_stream_rate: float,
    in_context_rate: float,
    shift_rate: float,
    semi_ar_rate: float,
    semi_ar_block_length: int | None,
) -> None:
    """The rates and shapes `corrupt_response` is given, checked (a ValueError naming the field)."""
    check_rate_range("mask_rate", *mask_rate)
    check_rate_range("edit_rate", *edit_rate)
    check_fraction(
        "in_context_rate",
        in_context_rate,
        "the fraction of random replacements drawn from the example's own response tokens (e.g. 0.5)",
    )
    check_fraction("shift_rate", shift_rate, SHIFT_MEANING)
    check_fraction("semi_ar_rate", semi_ar_rate, SEMI_AR_MEANING)
    if semi_ar_rate > 0 and (type(semi_ar_block_length) is not int or semi_ar_block_length < 1):
        raise ValueError(
            f"`semi_ar_block_length` must be a positive int when semi_ar_rate > 0 (the decoding block "
            f"length), got {semi_ar_block_length!r}."
        )
    check_fraction(
        "editing_stream_rate",
        editing_stream_rate,
        "the fraction of examples corrupted by random replacements only (e.g. 0.25)",
    )
    if input_ids.shape != response_mask.shape:
        raise ValueError(
            f"`response_mask` must have the shape of `input_ids` {tuple(input_ids.shape)}, got "
            f"{tuple(response_mask.shape)}."
        )


def _allowed_tokens(
    mask_token_id: int, vocab_size: int, never_sample: Sequence[int]
) -> tuple[set[int], torch.Tensor]:
    """`(excluded ids, allowed ids [A])`: the ids random replacements never use (the mask token and
    `never_sample`) and the vocabulary ids left to draw them from (a ValueError when none is left)."""
    excluded = {int(mask_token_id), *(int(i) for i in never_sample)}
    keep = torch.ones(vocab_size, dtype=torch.bool)  # [V]
    keep[[i for i in excluded if 0 <= i < vocab_size]] = False
    allowed = keep.nonzero().flatten()  # [A]
    if allowed.numel() == 0:
        raise ValueError(
            f"No token is left to draw random replacements from: vocab_size={vocab_size} and "
            f"{len(excluded)} excluded ids. Pass a smaller `never_sample`."
        )
    return excluded, allowed


def _in_context(
    input_ids: torch.Tensor,
    response: torch.Tensor,
    excluded: set[int],
    random_tokens: torch.Tensor,
    in_context_rate: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """`random_tokens` `[B, T]` with a fraction `in_context_rate` of them replaced by the token of a
    random ordinary (not `excluded`) response position of the same example."""
    device = input_ids.device
    shape = (input_ids.shape[0], input_ids.shape[1])
    noise_device = generator.device if generator is not None else torch.device("cpu")
    from_context = torch.rand(shape, generator=generator, device=noise_device) < in_context_rate  # [B, T]
    which = torch.rand(shape, generator=generator, device=noise_device).to(device)  # [B, T]
    ordinary = response & ~torch.isin(input_ids, torch.tensor(sorted(excluded), device=device))  # [B, T]
    context_tokens = _tokens_of_random_response_positions(input_ids, ordinary, which)  # [B, T]
    from_context = from_context.to(device) & ordinary.any(dim=1, keepdim=True)  # [B, T]
    random_tokens = torch.where(from_context, context_tokens, random_tokens)  # [B, T]
    return random_tokens


def _shifted(
    input_ids: torch.Tensor, response: torch.Tensor, shift_rate: float, generator: torch.Generator | None
) -> torch.Tensor:
    """`input_ids` `[B, T]` with one shifted response span (an insertion or a deletion) in a fraction
    `shift_rate` of the rows (`_shift_one_span`)."""
    device = input_ids.device
    shape = (input_ids.shape[0], input_ids.shape[1])
    noise_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand((shape[0], 4), generator=generator, device=noise_device).to(device)  # [B, 4]
    return _shift_one_span(input_ids, response, u[:, 0] < shift_rate, u[:, 1], u[:, 2], u[:, 3] < 0.5)


def _semi_ar_layout(
    response: torch.Tensor,
    masked: torch.Tensor,
    t: torch.Tensor,
    semi_ar_rate: float,
    semi_ar_block_length: int,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(masked, t)` `[B, T]` with a fraction `semi_ar_rate` of the rows laid out as semi-autoregressive
    decoding sees them: finished blocks before a drawn current block, fully masked blocks after it."""
    device = response.device
    shape = (response.shape[0], response.shape[1])
    noise_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand((shape[0], 2), generator=generator, device=noise_device).to(device)  # [B, 2]
    past, future = _semi_ar_blocks(response, u[:, 0] < semi_ar_rate, u[:, 1], semi_ar_block_length)
    masked = (masked & ~past) | future  # [B, T]
    t = t.masked_fill(future.to(t.device), 1.0)  # [B, T]
    return masked, t


def _semi_ar_blocks(
    response: torch.Tensor, rows: torch.Tensor, block_u: torch.Tensor, block_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(past, future)` response positions of the chosen rows around a uniformly drawn current block.

    Args:
        response: BoolTensor `[B, T]`, a contiguous run of positions per row (the completion).
        rows: BoolTensor `[B]`, the rows laid out semi-autoregressively.
        block_u: FloatTensor `[B]` in [0, 1): picks the current block among the response's blocks.
        block_length: positions per block, counted from each row's first response position.

    Returns:
        Two BoolTensors `[B, T]`: the response positions in blocks before the current one, and after it.

    Examples:
        >>> resp = torch.tensor([[False, True, True, True, True, True]])
        >>> past, future = _semi_ar_blocks(resp, torch.tensor([True]), torch.tensor([0.5]), 2)
        >>> past.int().tolist(), future.int().tolist()  # blocks {1,2} {3,4} {5}: the middle one drawn
        ([[0, 1, 1, 0, 0, 0]], [[0, 0, 0, 0, 0, 1]])
    """
    count = response.sum(dim=1)  # [B]
    first = response.to(torch.int8).argmax(dim=1)  # [B] first response position
    blocks = ((count + block_length - 1) // block_length).clamp_min(1)  # [B]
    current = (block_u * blocks).long().clamp_max(blocks - 1)  # [B]
    pos = torch.arange(response.shape[1], device=response.device)[None]  # [1, T]
    block = (pos - first[:, None]).div(block_length, rounding_mode="floor")  # [B, T]
    chosen = response & rows[:, None]  # [B, T]
    return chosen & (block < current[:, None]), chosen & (block > current[:, None])


def _tokens_of_random_response_positions(
    input_ids: torch.Tensor, response: torch.Tensor, uniform: torch.Tensor
) -> torch.Tensor:
    """For every position, the token at a response position of its row chosen by `uniform`.

    Args:
        input_ids: LongTensor `[B, T]`.
        response: BoolTensor `[B, T]`.
        uniform: FloatTensor `[B, T]` in [0, 1): picks the `floor(u * n_b)`-th response position of row b.

    Returns:
        LongTensor `[B, T]`; meaningless in a row with no `response` position (the caller keeps
        uniform noise there).
    """
    count = response.sum(dim=1, keepdim=True).clamp_min(1)  # [B, 1]
    rank = (uniform * count).long().clamp_max(count - 1)  # [B, T] which response position, in order
    # response positions first (in order), then the others: a stable sort on "is not response"
    order = torch.sort((~response).to(torch.int8), dim=1, stable=True).indices  # [B, T]
    source = order.gather(1, rank)  # [B, T] position of the chosen response token
    return input_ids.gather(1, source)  # [B, T]


def _shift_one_span(
    input_ids: torch.Tensor,
    response: torch.Tensor,
    rows: torch.Tensor,
    start_u: torch.Tensor,
    length_u: torch.Tensor,
    insert: torch.Tensor,
) -> torch.Tensor:
    """`input_ids` with one span of each chosen row's response shifted by one position.

    Args:
        input_ids: LongTensor `[B, T]`, `x_0`.
        response: BoolTensor `[B, T]`, a contiguous run of positions per row (the completion).
        rows: BoolTensor `[B]`, the rows to shift.
        start_u, length_u: FloatTensor `[B]` in [0, 1): where the span starts in the response and
            its length in `SHIFT_SPAN` (cut to the response's length).
        insert: BoolTensor `[B]`: shift right (a token inserted) where True, left (one deleted) where False.

    Returns:
        LongTensor `[B, T]`.

    Examples:
        >>> ids = torch.tensor([[7, 1, 2, 3, 4, 5]])
        >>> resp = torch.tensor([[False, True, True, True, True, True]])
        >>> one, zero = torch.tensor([True]), torch.tensor([0.0])
        >>> _shift_one_span(ids, resp, one, zero, torch.tensor([0.99]), torch.tensor([True])).tolist()
        [[7, 1, 1, 2, 3, 4]]
        >>> _shift_one_span(ids, resp, one, zero, zero, torch.tensor([False])).tolist()  # span of 2
        [[7, 2, 3, 3, 4, 5]]
    """
    low, high = SHIFT_SPAN
    count = response.sum(dim=1)  # [B]
    first = response.to(torch.int8).argmax(dim=1)  # [B] first response position
    last = first + (count - 1).clamp_min(0)  # [B]
    length = torch.minimum(low + (length_u * (high - low + 1)).long(), count)  # [B]
    start = first + (start_u * (count - length + 1).float()).long()  # [B] the span fits the response
    pos = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # [1, T]
    in_span = (pos >= start[:, None]) & (pos < (start + length)[:, None]) & rows[:, None] & response  # [B, T]
    source = pos - torch.where(insert, 1, -1)[:, None]  # [B, T] insert reads i - 1, delete i + 1
    source = torch.minimum(torch.maximum(source, first[:, None]), last[:, None])  # [B, T] inside the response
    return torch.where(in_span, input_ids.gather(1, source), input_ids)  # [B, T]
