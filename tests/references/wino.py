"""WINO's LLaDA decoder (`decoding_wino`), as the authors' code runs it.

Ported from `Feng-Hong/WINO-DLLM:LLaDA/decoding.py` @9549a1d. Batch size 1, greedy. The input is
`[prompt | gen_length masks | a shadow block of block_length masks]`; the shadow block carries the
position ids of the current block, sees everything but the current block's own slot (leave-one-out,
`~eye`) and itself, and nothing sees it. Per step: cap = min(max(int(0.7 · #masked), 5), 20)
(float32 product, truncated); wide-in commits `conf > threshold` (the `cap` largest by `topk` if
more, the `argmax` if none); if more than one was committed, the decoded slots whose shadow
probability of their token is `< threshold_back` are re-masked, the `last_accept - 1` smallest by
`topk` when at least `last_accept` qualify (`last_accept` = the previous step's commits, 30 at a
block's start). The loop runs while the block holds a mask.

The reference passes a boolean 4-D mask to LLaDA's own modeling code; the tiny transformers models
of the tests take it as an additive mask (0 / dtype-min), the same attention.

Returns `(x, steps)`: the canvas `[1, P + G]` and the number of forwards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.where(mask, torch.zeros((), dtype=dtype), torch.tensor(torch.finfo(dtype).min, dtype=dtype))


@torch.no_grad()
def decoding_wino(
    model, prompt, *, mask_id, gen_length, block_length, threshold=0.6, threshold_back=0.9, caps=(0.7, 5, 20)
):
    assert prompt.shape[0] == 1
    p_len = prompt.shape[1]
    params = list(model.parameters())
    dtype = params[0].dtype if params else torch.float32
    x_block = torch.full((1, p_len + gen_length + block_length), mask_id, dtype=torch.long)
    x_block[:, :p_len] = prompt
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    step = 0
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    for num_block in range(num_blocks):
        start = p_len + num_block * block_length
        end = p_len + (num_block + 1) * block_length
        block_step = 0
        mask_index_block = x_block == mask_id
        mask_index_block[:, end:] = False
        unmask_index_block = torch.full_like(mask_index_block, False)
        unmask_index_block[:, -block_length:] = ~mask_index_block[:, start:end]
        position_ids = torch.cat([torch.arange(p_len + gen_length), torch.arange(start, end)])[None]
        attention_mask = torch.ones(1, 1, x_block.shape[1], x_block.shape[1], dtype=torch.bool)
        attention_mask[:, :, :, -block_length:] = False
        attention_mask[:, :, -block_length:, -block_length:] = True
        attention_mask[:, :, -block_length:, start:end] = ~torch.eye(block_length, dtype=torch.bool)
        last_accept = 30
        while mask_index_block.any():
            ratio, low, high = caps  # constants in the reference (0.7, 5, 20)
            max_accept = min(max(int(mask_index_block.sum() * ratio), low), high)
            logits = model(
                input_ids=x_block, attention_mask=_additive(attention_mask, dtype), position_ids=position_ids
            ).logits
            x0 = torch.argmax(logits, dim=-1)
            shift_left = torch.zeros_like(unmask_index_block)
            shift_left[:, start:end] = unmask_index_block[:, -block_length:]
            x0[unmask_index_block] = x_block[shift_left]
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.gather(p, -1, x0[..., None])[..., 0]
            x0 = torch.where(mask_index_block, x0, x_block)
            confidence = torch.where(mask_index_block, x0_p, -inf)
            confidence_back = torch.where(unmask_index_block, x0_p, inf)
            transfer_index = confidence > threshold
            if transfer_index.sum() > max_accept:
                _, indices = torch.topk(confidence, k=max_accept, largest=True)
                transfer_index = torch.zeros_like(confidence, dtype=torch.bool)
                transfer_index.view(-1)[indices] = True
            elif not transfer_index.any():
                transfer_index.view(-1)[torch.argmax(confidence)] = True
            x_block[transfer_index] = x0[transfer_index]
            num_accept = int(transfer_index.sum())
            if num_accept > 1:
                remask_index = confidence_back < threshold_back
                if remask_index.sum() >= last_accept:
                    flat = confidence_back.view(-1)
                    temp = torch.zeros_like(flat, dtype=torch.bool)
                    _, indices = torch.topk(flat, k=last_accept - 1, largest=False)
                    temp[indices] = True
                    remask_index = temp.view(confidence_back.shape)
            else:
                remask_index = torch.zeros_like(transfer_index)
            remask_shift = torch.zeros_like(remask_index)
            remask_shift[:, start:end] = remask_index[:, -block_length:]
            x_block[remask_shift] = mask_id
            mask_index_block[transfer_index] = False
            mask_index_block[remask_shift] = True
            block_step += 1
            transfer_shift = torch.zeros_like(transfer_index)
            transfer_shift[:, -block_length:] = transfer_index[:, start:end]
            unmask_index_block[transfer_shift] = True
            unmask_index_block[remask_index] = False
            last_accept = num_accept
        step += block_step
    return x_block[:, : p_len + gen_length], step
