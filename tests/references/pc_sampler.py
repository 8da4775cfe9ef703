"""PC-Sampler's LLaDA decoder (`generate_with_pc_sampler`), as the authors' code runs it.

Ported from `NEUIR/PC-Sampler:src/generate.py` @8b106b0 (`generate_with_pc_sampler`,
`pc_sampler_function`, `get_num_transfer_tokens`). Batch size 1, greedy, no classifier-free
guidance. `baseline` is the token-frequency vector the reference loads into `BASE_LINE`
(`load_baseline`: counts / N, unseen tokens 1 / N). Positions in the weight `exp(-λ j)` count from
the block's start; the confidence is the float32 softmax probability of the argmax; each block runs
exactly `steps // num_blocks` forwards (LLaDA-1's quota, `torch.topk` over the block).

Returns `(x, forwards)`: the canvas `[1, P + G]` and the number of forwards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import full_attention_logits
from .klass import get_num_transfer_tokens


def pc_sampler_function(probabilities, token_ids, lambda_val, alpha, bg_freq_tensor):
    f_bg = bg_freq_tensor[token_ids]
    scores = -probabilities * torch.log(f_bg + 1e-9)
    scores = torch.clamp(scores, max=alpha)
    positions = torch.arange(probabilities.shape[1], dtype=torch.float32)
    return torch.exp(-lambda_val * positions) * scores


@torch.no_grad()
def generate_with_pc_sampler(
    model, prompt, *, mask_id, steps, gen_length, block_length, lambd, alpha, baseline
):
    assert prompt.shape[0] == 1
    p_len = prompt.shape[1]
    x = torch.full((1, p_len + gen_length), mask_id, dtype=torch.long)
    x[:, :p_len] = prompt
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    forwards = 0
    for num_block in range(num_blocks):
        start = p_len + num_block * block_length
        end = p_len + (num_block + 1) * block_length
        quota = get_num_transfer_tokens(x[:, start:end] == mask_id, steps)
        for i in range(steps):
            mask_index = x == mask_id
            logits = full_attention_logits(model, x)
            forwards += 1
            x0 = torch.argmax(logits, dim=-1)
            p = F.softmax(logits, dim=-1)
            x0_p = torch.gather(p, -1, x0[..., None])[..., 0]
            x0_p[:, end:] = -float("inf")
            x0 = torch.where(mask_index, x0, x)
            score = pc_sampler_function(x0_p[:, start:end], x0[:, start:end], lambd, alpha, baseline)
            confidence = torch.where(mask_index[:, start:end], score, torch.tensor(-float("inf")))
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            _, chosen = torch.topk(confidence[0], k=int(quota[0, i]))
            transfer[0, chosen + start] = True
            x[transfer] = x0[transfer]
    return x, forwards
