"""KLASS's LLaDA decoder (`stable_confident_decode` with `alg="klass"`), as the authors' code runs it.

Ported from `shkim0116/KLASS:src/model/llada_klass.py` @ad87ecb. Batch size 1, greedy, no step
saving. The canvas is the prompt followed by `gen_length` masks, blocks start at the prompt's end;
`steps` is the total over all blocks. Every forward is a full-attention forward over the canvas.

What the authors' code does and this port keeps:

* the previous distribution `p_prev` starts as zeros (KL ~ 27.6 - H at the first forward) and,
  with the KL history, is carried across blocks (`carry_across_blocks=True`); with
  `carry_across_blocks=False` both restart at every block (what dllm_edit's loop can see);
* ready = (step >= h - 1) & all(history < κ) & (conf > τ) & masked-in-block, conf = max prob
  (float64 softmax), KL = sum p (log(p + 1e-12) - log(q + 1e-12));
* `unmask_strategy`: "all", "max_conf" (argmax), "min_kl" (argmin of this step's KL);
* no ready slot: top-k by confidence with LLaDA-1's quota of `steps // num_blocks`;
* a block ends after `steps // num_blocks` forwards, or earlier once it holds no mask.

Returns `(x, used_steps)`: the canvas `[1, P + G]` and the number of forwards; `counts` (a dict),
when given, receives `ready_steps`, the steps whose ready set was not empty.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import full_attention_logits


def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    out = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        out[i, : remainder[i]] += 1
    return out


@torch.no_grad()
def stable_confident_decode(
    model,
    prompt,
    *,
    mask_id,
    gen_length,
    steps,
    block_length,
    conf_threshold=0.6,
    kl_threshold=0.015,
    kl_history_length=2,
    unmask_strategy="all",
    carry_across_blocks=True,
    counts=None,
):
    assert prompt.shape[0] == 1
    p_len = prompt.shape[1]
    x = torch.full((1, p_len + gen_length), mask_id, dtype=torch.long)
    x[:, :p_len] = prompt
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps_per_block = steps // num_blocks
    used_steps = 0
    vocab = None
    kl_history = p_prev = None
    for num_block in range(num_blocks):
        start = p_len + num_block * block_length
        end = p_len + (num_block + 1) * block_length
        quota = get_num_transfer_tokens(x[:, start:end] == mask_id, steps_per_block)
        if not carry_across_blocks:
            kl_history = p_prev = None
        for step in range(steps_per_block):
            mask_index = x == mask_id
            block = torch.zeros_like(mask_index)
            block[:, start:end] = True
            mask_index = mask_index & block
            if not mask_index[:, start:end].any():
                break
            logits = full_attention_logits(model, x)
            vocab = logits.shape[-1]
            if p_prev is None:
                kl_history = torch.zeros((1, x.shape[1], kl_history_length), dtype=torch.float64)
                p_prev = torch.zeros((1, x.shape[1], vocab), dtype=torch.float64)
            p_curr = F.softmax(logits.to(torch.float64), dim=-1)
            x0 = torch.argmax(p_curr, dim=-1)
            conf = torch.gather(p_curr, -1, x0[..., None])[..., 0]
            eps = 1e-12
            kl = (p_curr * (torch.log(p_curr + eps) - torch.log(p_prev + eps))).sum(-1)
            kl_history = torch.roll(kl_history, shifts=-1, dims=-1)
            kl_history[..., -1] = kl
            p_prev = p_curr.clone()
            if step >= kl_history_length - 1:
                stable = torch.all(kl_history < kl_threshold, dim=-1)
            else:
                stable = torch.zeros_like(conf, dtype=torch.bool)
            ready = stable & (conf > conf_threshold) & mask_index
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            ready_idx = torch.where(ready[0])[0]
            if len(ready_idx) > 0:
                if counts is not None:  # test instrumentation: steps that used the KL rule
                    counts["ready_steps"] = counts.get("ready_steps", 0) + 1
                chosen = ready_idx
                if len(ready_idx) > 1 and unmask_strategy == "max_conf":
                    i = torch.argmax(conf[0, ready_idx])
                    chosen = ready_idx[i : i + 1]
                elif len(ready_idx) > 1 and unmask_strategy == "min_kl":
                    i = torch.argmin(kl[0, ready_idx])
                    chosen = ready_idx[i : i + 1]
                transfer[0, chosen] = True
            else:
                confidence = torch.where(mask_index, conf, torch.tensor(-float("inf"), dtype=conf.dtype))
                _, chosen = torch.topk(confidence[0], k=int(quota[0, step]))
                transfer[0, chosen] = True
            x[transfer] = x0[transfer]
            used_steps += 1
    return x, used_steps
