"""Log-likelihoods for lm-eval from a diffusion LM: the Monte-Carlo ELBO, and the greedy check.

A diffusion LM has no left-to-right factorisation, so `log p(continuation | context)` is estimated
by the masked-diffusion ELBO, with the trainers' own code (`dllm_edit.trainers.elbo`): stratified
mask counts (`count_masks`, `mc_num` draws, one forward each for the whole batch) scored by
`weighted_masked_logps` through the model's training forward (`DiffusionForward`: the
block-diffusion form for block-causal models, full attention for bidirectional ones). The noise of a
request is a function of a seed hashed from its tokens, so a request gets the same estimate in any
batch, order or process.

`is_greedy` asks the decoder itself: does greedy editable decoding of the context (the evaluation's
settings at temperature 0, `max_new_tokens` = the continuation's length) write exactly the
continuation?
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.generation import generate
from dllm_edit.output import EditGenerationOutput
from dllm_edit.trainers.diffusion_forward import DiffusionForward
from dllm_edit.trainers.elbo import count_masks, weighted_masked_logps


def request_seed(seed: int, context: Sequence[int], continuation: Sequence[int]) -> int:
    """A 32-bit noise seed of one request: a function of `seed` and the request's tokens only.

    Examples:
        >>> request_seed(0, [5, 6], [7]) == request_seed(0, [5, 6], [7]) != request_seed(1, [5, 6], [7])
        True
    """
    payload = ",".join(map(str, context)) + "|" + ",".join(map(str, continuation))
    return zlib.crc32(payload.encode(), seed & 0xFFFFFFFF)


def pack_pairs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], block_length: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Context ⊕ continuation rows, right-padded to whole blocks.

    Returns:
        `clean` LongTensor `[B, T]`, `valid` BoolTensor `[B, T]` (non-padding), `supervised`
        BoolTensor `[B, T]` (the continuation tokens).
    """
    longest = max(len(c) + len(x) for c, x in pairs)
    width = -(-longest // block_length) * block_length
    clean = torch.full((len(pairs), width), pad_id, dtype=torch.long)  # [B, T]
    valid = torch.zeros((len(pairs), width), dtype=torch.bool)  # [B, T]
    supervised = torch.zeros_like(valid)  # [B, T]
    for row, (context, continuation) in enumerate(pairs):
        end = len(context) + len(continuation)
        clean[row, :end] = torch.tensor([*context, *continuation])
        valid[row, :end] = True
        supervised[row, len(context) : end] = True
    return clean, valid, supervised


@torch.no_grad()
def elbo_loglikelihoods(
    forward: DiffusionForward,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    seeds: Sequence[int],
    *,
    mask_token_id: int,
    pad_id: int,
    mc_num: int,
    device: torch.device,
) -> tuple[list[float], int]:
    """The ELBO estimate of `log p(continuation | context)` for each pair, and the forwards it took.

    Args:
        forward: the model's training forward.
        pairs: `(context_ids, continuation_ids)` per request.
        seeds: a noise seed per request (`request_seed`).
        mask_token_id: the mask token.
        pad_id: the padding token (never attended to).
        mc_num: mask draws (forwards) per request.
        device: where the model runs.
    """
    clean, valid, supervised = pack_pairs(pairs, forward.block_length, pad_id)
    masks, weights = count_masks(torch.tensor(list(seeds), dtype=torch.long), mc_num, supervised)
    per_token = weighted_masked_logps(
        forward,
        clean.to(device),
        valid.to(device),
        masks.to(device),
        weights.to(device),
        mask_token_id=mask_token_id,
    )  # [B, T]
    forwards = int(masks.flatten(1).any(-1).sum())
    return per_token.sum(-1).tolist(), forwards


@torch.no_grad()
def greedy_matches(
    model: Any,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    config: EditGenerationConfig,
    *,
    pad_id: int,
    device: torch.device,
    tokenizer: Any = None,
) -> tuple[list[bool], int]:
    """Whether greedy decoding of each context writes exactly its continuation, and the forwards.

    Rows are left-padded into one batch; all continuations must have the same length.
    """
    length = len(pairs[0][1])
    if any(len(x) != length for _, x in pairs):
        raise ValueError("greedy_matches needs continuations of one length per batch.")
    width = max(len(c) for c, _ in pairs)
    input_ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)  # [B, W]
    attention_mask = torch.zeros((len(pairs), width), dtype=torch.long)  # [B, W]
    for row, (context, _) in enumerate(pairs):
        input_ids[row, width - len(context) :] = torch.tensor(list(context))
        attention_mask[row, width - len(context) :] = 1
    greedy = config.replace(max_new_tokens=length, temperature=0.0)
    out = generate(
        model,
        input_ids.to(device),
        attention_mask=attention_mask.to(device),
        generation_config=greedy,
        tokenizer=tokenizer,
        return_dict_in_generate=True,
    )
    if not isinstance(out, EditGenerationOutput) or out.sequences is None or out.num_forwards is None:
        raise TypeError("generate did not return an EditGenerationOutput")
    written = out.sequences[:, width:].cpu()  # [B, length]
    target = torch.tensor([list(x) for _, x in pairs], dtype=torch.long)  # [B, length]
    return (written == target).all(-1).tolist(), int(out.num_forwards.sum())
