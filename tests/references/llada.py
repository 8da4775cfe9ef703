"""LLaDA-1's `generate` with `remasking="random"`.

Ported from `ML-GSAI/LLaDA:generate.py` @b7e6c35 (`generate`, `get_num_transfer_tokens`), greedy
tokens, no CFG, unpadded equal-length prompts. Departure: the random confidences come from
`generator`, one uniform per slot of the current block (`torch.rand((B, block_length))`), where the
reference draws `torch.rand((B, L))` over the whole canvas from the global RNG; `dllm_edit` draws
the same way, so the two can be compared draw for draw. The `low_confidence` rule is ported in
`tests/reference_decoder.py` (`reference_generate_llada1`).
"""

from __future__ import annotations

import torch

from .common import full_attention_logits


def num_transfer_tokens(block_mask_index, steps):
    mask_num = block_mask_index.sum(dim=1, keepdim=True)
    out = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + mask_num // steps
    for i in range(mask_num.size(0)):
        out[i, : int(mask_num[i] % steps)] += 1
    return out


@torch.no_grad()
def generate_random(model, prompt, *, mask_id, steps, gen_length, block_length, generator=None):
    """`steps` counts all blocks, as in LLaDA. Returns the canvas and the forward count."""
    batch, prompt_length = prompt.shape
    x = torch.full((batch, prompt_length + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = prompt
    num_blocks = gen_length // block_length
    assert gen_length % block_length == 0 and steps % num_blocks == 0
    steps_per_block = steps // num_blocks
    nfe = 0
    for num_block in range(num_blocks):
        start = prompt_length + num_block * block_length
        end = start + block_length
        quota = num_transfer_tokens(x[:, start:end] == mask_id, steps_per_block)
        for i in range(steps_per_block):
            mask_index = x == mask_id
            logits = full_attention_logits(model, x)
            nfe += 1
            x0 = logits.argmax(-1)
            x0_p = torch.full(x.shape, -torch.inf)
            x0_p[:, start:end] = torch.rand((batch, block_length), generator=generator)
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            transfer = torch.zeros_like(mask_index)
            for j in range(batch):
                _, select = torch.topk(confidence[j], k=int(quota[j, i]))
                transfer[j, select] = True
            x[transfer] = x0[transfer]
    return x, nfe
