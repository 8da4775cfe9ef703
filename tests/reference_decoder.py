"""A line-by-line port of the reference decoders, used as ground truth in tests.

`reference_generate_21` restates the LLaDA2.1 remote-code `generate()` (SPEC-decoding.md): batch
size 1, no cache, the model re-run on the whole window `x[:, :(k+1)*bl]` at every step under a
block-causal mask. `reference_generate_20` restates the LLaDA2.0 fixed-steps decoder. Both return
the completion cut after the first EOS (inclusive), as the reference does. Greedy only.
"""

from __future__ import annotations

import torch


def block_causal_additive_mask(length: int, block_length: int) -> torch.Tensor:
    blocks = torch.arange(length) // block_length
    allowed = blocks[None, :] <= blocks[:, None]
    return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]  # [1, 1, L, L]


def _greedy(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    p, x0 = probs.max(-1)
    return x0, p


@torch.no_grad()
def reference_generate_21(
    model,
    input_ids,
    *,
    mask_id,
    eos_id,
    gen_length,
    block_length,
    threshold,
    editing_threshold,
    max_post_steps,
    num_to_transfer=1,
    eos_early_stop=False,
    counter=None,
):
    prompt_length = input_ids.shape[1]
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total = num_blocks * block_length
    x = torch.full((1, total), mask_id, dtype=torch.long)
    x[:, :prompt_length] = input_ids
    full_mask = block_causal_additive_mask(total, block_length)
    position_ids = torch.arange(total)[None]
    prefill_blocks = prompt_length // block_length
    for num_block in range(prefill_blocks, num_blocks):
        end = (num_block + 1) * block_length
        cur_x = x[:, :end]
        block_start = num_block * block_length
        post_steps = 0
        while True:
            old_block = cur_x[:, -block_length:].clone()
            active_mask = cur_x[:, -block_length:] == mask_id
            if not torch.any(active_mask):
                post_steps += 1
            if post_steps > max_post_steps:
                break
            prompt_in_block = torch.zeros(block_length, dtype=torch.bool)
            if block_start < prompt_length:
                prompt_in_block[: min(prompt_length - block_start, block_length)] = True
            logits = model(
                input_ids=cur_x,
                attention_mask=full_mask[:, :, :end, :end],
                position_ids=position_ids[:, :end],
            ).logits
            if counter is not None:
                counter.append(num_block)
            x0, x0_p = _greedy(logits[:, -block_length:, :])
            mask_transfer = torch.zeros_like(x0, dtype=torch.bool)
            if active_mask.sum() > 0:
                conf = torch.where(active_mask, x0_p, -torch.inf)
                high = (conf[0] > threshold) & active_mask[0]
                if high.sum().item() >= num_to_transfer:
                    mask_transfer[0] = high
                else:
                    k = min(num_to_transfer, int(active_mask.sum().item()))
                    _, idx = torch.topk(conf[0], k=k)
                    mask_transfer[0, idx] = True
            editable = (~active_mask) & (~prompt_in_block)[None]
            edit_conf = torch.where(editable, x0_p, -torch.inf)
            edit_transfer = torch.zeros_like(x0, dtype=torch.bool)
            if editing_threshold is not None:
                edit_transfer[0] = (edit_conf[0] > editing_threshold) & editable[0] & (x0[0] != old_block[0])
            final = mask_transfer | edit_transfer
            if final.any():
                cur_x[:, -block_length:][final] = x0[final]
            if active_mask.sum() == 0 and not edit_transfer.any():
                break
        if eos_early_stop:
            generated = x[0, prompt_length:end]
            if (generated == mask_id).sum() == 0 and (generated == eos_id).any():
                break
    answer = x[0, prompt_length : prompt_length + gen_length]
    hits = (answer == eos_id).nonzero()
    if len(hits):
        answer = answer[: int(hits[0, 0]) + 1]
    return answer


@torch.no_grad()
def reference_generate_20(
    model,
    input_ids,
    *,
    mask_id,
    eos_id,
    gen_length,
    block_length,
    steps,
    threshold,
    eos_early_stop=False,
):
    prompt_length = input_ids.shape[1]
    num_blocks = (prompt_length + gen_length + block_length - 1) // block_length
    total = num_blocks * block_length
    x = torch.full((1, total), mask_id, dtype=torch.long)
    x[:, :prompt_length] = input_ids
    full_mask = block_causal_additive_mask(total, block_length)
    position_ids = torch.arange(total)[None]
    base, rem = divmod(block_length, steps)
    schedule = [base + (1 if i < rem else 0) for i in range(steps)]
    for num_block in range(prompt_length // block_length, num_blocks):
        end = (num_block + 1) * block_length
        cur_x = x[:, :end]
        for step in range(steps):
            active = cur_x[:, -block_length:] == mask_id
            if active.sum() == 0:
                break
            logits = model(
                input_ids=cur_x,
                attention_mask=full_mask[:, :, :end, :end],
                position_ids=position_ids[:, :end],
            ).logits
            x0, x0_p = _greedy(logits[:, -block_length:, :])
            quota = min(schedule[step], int(active.sum().item()))
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            conf = torch.where(active, x0_p, -torch.inf)
            high = conf[0] > threshold
            if high.sum().item() >= quota:
                transfer[0] = high
            else:
                _, idx = torch.topk(conf[0], quota)
                transfer[0, idx] = True
            cur_x[:, -block_length:][transfer] = x0[transfer]
        if eos_early_stop:
            generated = x[0, prompt_length:end]
            if (generated == mask_id).sum() == 0 and (generated == eos_id).any():
                break
    answer = x[0, prompt_length : prompt_length + gen_length]
    hits = (answer == eos_id).nonzero()
    if len(hits):
        answer = answer[: int(hits[0, 0]) + 1]
    return answer
