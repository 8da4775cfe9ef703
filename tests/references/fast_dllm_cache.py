"""A port of Fast-dLLM's cached LLaDA decoders, used as ground truth for the approximate caches.

Restates NVlabs/Fast-dLLM `llada/generate.py` @24cc59e (`generate_with_prefix_cache`,
`generate_with_dual_cache`, `get_transfer_index`, `get_num_transfer_tokens`) for a transformers
decoder run with full (bidirectional) attention. Batch size 1, greedy (temperature 0),
`remasking="low_confidence"`; the canvas is the prompt followed by `gen_length` masks, blocks start
at the prompt's end, and `gen_length % block_length == 0`.

Fast-dLLM's LLaDA model keeps its keys/values as a list of per-layer `(k, v)` tuples and takes a
`replace_position` argument (a model-side patch): with it, the block's fresh keys/values are written
over the cached ones in place at those positions and the attention reads the whole cache; without
it, they are appended to the cached prefix. `TupleCache` plays that part for a transformers model
(which writes keys already rotated at their positions, where LLaDA rotates the whole cache at every
step: the same keys). As in the reference, the loop over a block's cached steps tests for masks
after its forward, so a block filled by its first (full) forward still costs one cached forward that
changes nothing (and, in the quota mode with one step per block, reads a quota that does not exist:
an IndexError, as in the reference). Each function returns `(x, nfe)`: the whole canvas
`[1, P + G]` and the number of forwards.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


def num_transfer_tokens(block_mask: torch.Tensor, steps: int) -> torch.Tensor:
    """`get_num_transfer_tokens`: each row's masked count spread over `steps`, the remainder first.

    `block_mask` is a BoolTensor `[1, bl]`; returns a LongTensor `[1, steps]`.
    """
    masked = int(block_mask.sum())
    base, remainder = divmod(masked, steps)
    return torch.tensor([[base + (1 if i < remainder else 0) for i in range(steps)]])


def transfer_index(
    logits: torch.Tensor,
    x: torch.Tensor,
    mask_index: torch.Tensor,
    quota: int | None,
    threshold: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`get_transfer_index` (greedy, low confidence), for one row.

    The candidate is the argmax; its confidence the float64 softmax probability, -inf off the
    masks. The `quota` most confident masks are chosen; with a `threshold` the quota is every mask,
    and all but the most confident one are dropped when their confidence is `< threshold`.
    Returns `(x0, transfer)`, the candidates (the old token off the masks) and the chosen positions.
    """
    x0 = logits.argmax(-1)  # [1, L]
    probs = torch.softmax(logits.to(torch.float64), dim=-1)  # [1, L, V]
    p = probs.gather(-1, x0[..., None])[..., 0]  # [1, L]
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, p, torch.full_like(p, -float("inf")))  # [1, L]
    k = int(mask_index.sum()) if threshold is not None else int(quota)  # type: ignore[arg-type]
    transfer = torch.zeros_like(mask_index)
    _, chosen = torch.topk(confidence[0], k=k)
    transfer[0, chosen] = True
    if threshold is not None:
        for rank in range(1, k):
            if confidence[0, chosen[rank]] < threshold:
                transfer[0, chosen[rank]] = False
    return x0, transfer


class TupleCache(DynamicCache):
    """Per-layer `(k, v)` as Fast-dLLM's LLaDA keeps them, behind transformers' `Cache.update`.

    Empty: the forward's keys/values are stored (the `present` of a full forward). `replace_position`
    None: the forward's keys/values are appended to the stored ones for the attention, and not kept
    (Fast-dLLM's prefix-cache loop drops each step's `past_key_values`). `replace_position` set (a
    BoolTensor `[1, L]`): they overwrite the stored ones at its True positions, in place, and the
    attention reads all of them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.past: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.replace_position: torch.Tensor | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx == len(self.past):
            self.past.append((key_states, value_states))
            return key_states, value_states
        past_key, past_value = self.past[layer_idx]
        if self.replace_position is None:
            return torch.cat([past_key, key_states], dim=-2), torch.cat([past_value, value_states], dim=-2)
        index = self.replace_position.nonzero(as_tuple=True)[1]
        past_key[:, :, index] = key_states
        past_value[:, :, index] = value_states
        return past_key, past_value

    def get_seq_length(self, layer_idx=0, *args, **kwargs) -> int:
        return self.past[0][0].shape[-2] if self.past else 0

    def keep_prefix(self, length: int) -> None:
        self.past = [(k[:, :, :length], v[:, :, :length]) for k, v in self.past]


def _call(model, x: torch.Tensor, start: int, keys: int, cache: TupleCache) -> torch.Tensor:
    """Logits of the canvas slice `x` (slots from `start`) under full attention over `keys` keys."""
    queries = x.shape[1]
    if getattr(model.config, "_attn_implementation", "eager") == "eager":
        mask = torch.zeros(1, 1, queries, keys, dtype=model.dtype, device=x.device)  # additive: attend to all
    else:
        mask = torch.ones(1, 1, queries, keys, dtype=torch.bool, device=x.device)
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    positions = torch.arange(start, start + queries, device=x.device)[None]  # [1, Q]
    return model(
        input_ids=x, attention_mask=mask, position_ids=positions, use_cache=True, **{name: cache}
    ).logits


def _decode(model, prompt, *, mask_id, gen_length, block_length, steps, threshold, dual):
    prompt_length = prompt.shape[1]
    x = torch.full((1, prompt_length + gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :prompt_length] = prompt
    length = x.shape[1]
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    steps_per_block = (steps // num_blocks) if steps is not None else block_length
    nfe = 0
    for num_block in range(num_blocks):
        start = prompt_length + num_block * block_length
        end = start + block_length
        quota = num_transfer_tokens(x[:, start:end] == mask_id, steps_per_block)  # [1, steps]
        cache = TupleCache()
        logits = _call(model, x, 0, length, cache)  # full forward: every key/value cached
        mask_index = x == mask_id
        mask_index[:, end:] = False
        x0, transfer = transfer_index(logits, x, mask_index, None if threshold else quota[0, 0], threshold)
        x[transfer] = x0[transfer]
        nfe += 1
        if dual:
            cache.replace_position = torch.zeros_like(x, dtype=torch.bool)
            cache.replace_position[:, start:end] = True
            stop = end  # each step feeds the block only
        else:
            cache.keep_prefix(start)
            stop = length  # each step feeds the block and everything after it
        i = 1
        while True:  # the reference checks after the forward: a block filled at once costs one more
            nfe += 1
            mask_index = x[:, start:stop] == mask_id
            mask_index[:, block_length:] = False
            logits = _call(model, x[:, start:stop], start, length, cache)
            step_quota = None if threshold else quota[0, i]
            x0, transfer = transfer_index(logits, x[:, start:stop], mask_index, step_quota, threshold)
            x[:, start:stop][transfer] = x0[transfer]
            if not (x[:, start:end] == mask_id).any():
                break
            i += 1
    return x, nfe


@torch.no_grad()
def fast_dllm_dual_cache(model, prompt, *, mask_id, gen_length, block_length, steps=None, threshold=None):
    """`generate_with_dual_cache`: `steps` (all blocks) with the quota rule, or `threshold`."""
    return _decode(
        model,
        prompt,
        mask_id=mask_id,
        gen_length=gen_length,
        block_length=block_length,
        steps=steps,
        threshold=threshold,
        dual=True,
    )


@torch.no_grad()
def fast_dllm_prefix_cache(model, prompt, *, mask_id, gen_length, block_length, steps=None, threshold=None):
    """`generate_with_prefix_cache`: `steps` (all blocks) with the quota rule, or `threshold`."""
    return _decode(
        model,
        prompt,
        mask_id=mask_id,
        gen_length=gen_length,
        block_length=block_length,
        steps=steps,
        threshold=threshold,
        dual=False,
    )
