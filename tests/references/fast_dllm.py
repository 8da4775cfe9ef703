"""Fast-dLLM's `generate` (no cache) with the threshold and factor rules.

Ported from `NVlabs/Fast-dLLM:llada/generate.py` @f6b35ec (`generate`, `get_transfer_index`,
`get_transfer_index_dynamic`); `factor_rule="dllm"` is the factor mode of
`ZHZisZZ/dllm:dllm/pipelines/fastdllm/llada/sampler.py` @ca17675 (`_get_transfer_index`), whose
loop is the same. Greedy (temperature 0) only. `generate` returns the canvas and the forward count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import full_attention_logits


def transfer_threshold(logits, mask_index, x, threshold):
    """NVlabs `get_transfer_index(..., threshold=τ)`: top-1 always, the others iff conf >= τ."""
    x0 = logits.argmax(-1)
    p = F.softmax(logits.to(torch.float64), dim=-1)
    x0_p = p.gather(-1, x0[..., None])[..., 0]
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, -torch.inf)
    transfer = torch.zeros_like(mask_index)
    for j in range(confidence.shape[0]):
        k = int(mask_index[j].sum())
        _, select = torch.topk(confidence[j], k=k)
        transfer[j, select] = True
        for rank in range(1, k):  # the top-1 stays; later ranks leave when below τ
            if confidence[j, select[rank]] < threshold:
                transfer[j, select[rank]] = False
    return x0, transfer


def transfer_factor_nvlabs(logits, mask_index, x, factor):
    """NVlabs `get_transfer_index_dynamic`: break at the first rank n with conf < 1 - f/(n+1),
    then `top_i += 1` when the break index is 0 or the last one (the off-by-one at the last rank)."""
    x0 = logits.argmax(-1)
    p = F.softmax(logits.to(torch.float64), dim=-1)
    x0_p = p.gather(-1, x0[..., None])[..., 0]
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, -torch.inf)
    transfer = torch.zeros_like(mask_index)
    for j in range(confidence.shape[0]):
        m = int(mask_index[j].sum())
        thresholds = [1 - factor / (n + 1) for n in range(1, m + 1)]
        thresholds[0] = -1
        ordered = torch.sort(confidence[j][mask_index[j]], descending=True).values
        for top_i in range(m):
            if ordered[top_i] < thresholds[top_i]:
                break
        if top_i == 0 or top_i == m - 1:
            top_i += 1
        _, select = torch.topk(confidence[j], k=top_i)
        transfer[j, select] = True
    return x0, transfer


def transfer_factor_dllm(logits, mask_index, x, factor):
    """ZHZisZZ/dllm `_get_transfer_index` factor mode: k = #ranks with conf >= 1 - f/(r+1) (rank 1 forced)."""
    x0 = logits.argmax(-1)
    conf = F.softmax(logits.to(torch.float32), dim=-1).gather(-1, x0[..., None])[..., 0]
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, conf, torch.finfo(conf.dtype).min)
    values, idx = torch.sort(confidence, dim=1, descending=True)
    ranks = torch.arange(1, values.shape[1] + 1, dtype=values.dtype)
    thr = 1.0 - torch.tensor(float(factor), dtype=values.dtype) / (ranks + 1.0)
    thr[0] = -1.0
    k = torch.minimum((values >= thr).sum(1), mask_index.sum(1))
    chosen = torch.arange(values.shape[1])[None] < k[:, None]
    transfer = torch.zeros_like(mask_index).scatter(1, idx, chosen) & mask_index
    return x0, transfer


@torch.no_grad()
def generate(
    model, prompt, *, mask_id, gen_length, block_length, threshold=None, factor=None, factor_rule="nvlabs"
):
    """Fast-dLLM's block loop: each block runs until it holds no mask, one forward per step."""
    batch, prompt_length = prompt.shape
    x = torch.full((batch, prompt_length + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = prompt
    assert gen_length % block_length == 0 and (threshold is None) != (factor is None)
    nfe = 0
    for num_block in range(gen_length // block_length):
        start = prompt_length + num_block * block_length
        end = start + block_length
        while True:
            nfe += 1
            mask_index = x == mask_id
            logits = full_attention_logits(model, x)
            mask_index[:, end:] = False
            if factor is None:
                x0, transfer = transfer_threshold(logits, mask_index, x, threshold)
            elif factor_rule == "nvlabs":
                x0, transfer = transfer_factor_nvlabs(logits, mask_index, x, factor)
            else:
                x0, transfer = transfer_factor_dllm(logits, mask_index, x, factor)
            x[transfer] = x0[transfer]
            if (x[:, start:end] == mask_id).sum() == 0:
                break
    return x, nfe
