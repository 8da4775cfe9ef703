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


def get_num_transfer_tokens(block_mask_index, steps):
    """LLaDA-1's quota: each row's masked count spread over `steps`, the remainder to the first steps."""
    mask_num = block_mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num_transfer_tokens = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, : remainder[i]] += 1
    return num_transfer_tokens


@torch.no_grad()
def reference_generate_llada1(
    model,
    prompt,
    *,
    mask_id,
    steps,
    gen_length,
    block_length,
    temperature=0.0,
    full_attention_mask=True,
):
    """LLaDA-1's `generate` (SPEC-decoding.md, "LLaDA (v1, 8B) behaviour"), low-confidence remasking.

    The canvas is the prompt followed by exactly `gen_length` masks; block `k` is
    `[P + k*bl, P + (k+1)*bl)`; `steps` is the total over all blocks. Every step runs the model on
    the whole canvas with full attention (a 4-D all-visible mask and position ids `0..`, as a
    bidirectional model sees it without padding). Temperature 0 only (the Gumbel draw of the
    reference uses the global RNG, which dllm_edit never does). Returns the whole canvas `[B, P + G]`.
    """
    assert temperature == 0.0
    batch, prompt_length = prompt.shape
    x = torch.full((batch, prompt_length + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    length = x.shape[1]
    kwargs = {}
    if full_attention_mask:
        kwargs["attention_mask"] = torch.zeros(1, 1, length, length)
        kwargs["position_ids"] = torch.arange(length)[None].expand(batch, length)
    for num_block in range(num_blocks):
        start = prompt_length + num_block * block_length
        end = prompt_length + (num_block + 1) * block_length
        block_mask_index = x[:, start:end] == mask_id
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = x == mask_id
            logits = model(input_ids=x, **kwargs).logits
            x0 = torch.argmax(logits, dim=-1)  # temperature 0: no Gumbel noise
            p = torch.softmax(logits, dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, end:] = -float("inf")
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-float("inf")))
            transfer_index = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(confidence.shape[0]):
                _, select_index = torch.topk(confidence[j], k=int(num_transfer_tokens[j, i]))
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
    return x
