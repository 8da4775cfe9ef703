"""Prophet's early-exit LLaDA decoder.

Ported from `pixeli99/Prophet:generate_earlyexit.py` @460afe4 (`generate`, `should_early_exit`):
LLaDA-1's low-confidence quota loop; before each step's transfer, the mean top-1 - top-2 logit gap
over `answer_length` (5) positions from `answer_start_pos` is compared with the phase threshold
(`progress = global_step / steps`: < 0.33 early, < 0.67 mid, else late; `>=`); on a hit every mask
of the canvas takes its argmax and decoding stops. Batch 1, greedy, no constraints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import full_attention_logits


def should_early_exit(current_step, max_steps, answer_gap, thresholds):
    progress = current_step / max_steps
    if progress < 0.33:
        return answer_gap >= thresholds["early"]
    if progress < 0.67:
        return answer_gap >= thresholds["mid"]
    return answer_gap >= thresholds["late"]


@torch.no_grad()
def generate(
    model,
    prompt,
    *,
    mask_id,
    steps,
    gen_length,
    block_length,
    answer_start_pos,
    thresholds=None,
    answer_length=5,
):
    """Returns the canvas and the forward count. `answer_start_pos` is a canvas position."""
    thresholds = thresholds or {"early": 7.5, "mid": 5.0, "late": 2.5}
    prompt_length = prompt.shape[1]
    x = torch.full((1, prompt_length + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = prompt
    num_blocks = gen_length // block_length
    steps_per_block = steps // num_blocks
    global_step, nfe, exited = 0, 0, False
    for num_block in range(num_blocks):
        block_end = prompt_length + (num_block + 1) * block_length
        block_mask = x[:, block_end - block_length : block_end] == mask_id
        mask_num = int(block_mask.sum())
        quota = [
            mask_num // steps_per_block + (1 if i < mask_num % steps_per_block else 0)
            for i in range(steps_per_block)
        ]
        for i in range(steps_per_block):
            global_step += 1
            mask_index = x == mask_id
            logits = full_attention_logits(model, x)
            nfe += 1
            x0 = logits.argmax(-1)
            p = F.softmax(logits, dim=-1)
            x0_p = p.gather(-1, x0[..., None])[..., 0]
            gaps = []
            for pos in range(
                answer_start_pos, min(prompt_length + gen_length, answer_start_pos + answer_length)
            ):
                if pos >= prompt_length:
                    top2 = torch.topk(logits[:, pos, :], k=2, dim=-1).values
                    gaps.append((top2[0, 0] - top2[0, 1]).item())
            if gaps and should_early_exit(global_step, steps, sum(gaps) / len(gaps), thresholds):
                remaining = x == mask_id
                x[remaining] = x0[remaining]
                exited = True
                break
            x0_p[:, block_end:] = -torch.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            transfer = torch.zeros_like(mask_index)
            if quota[i] > 0:
                _, select = torch.topk(confidence[0], k=quota[i])
                transfer[0, select] = True
            x[transfer] = x0[transfer]
        if exited:
            break
    return x, nfe
