"""Dream's `diffusion_generate` sampling loop (`DreamGenerationMixin._sample`).

Ported from `Dream-org/Dream-v0-*-7B:generation_utils.py` as copied in
`ZHZisZZ/dllm:dllm/pipelines/dream/models/generation_utils.py` @ca17675: one block over the whole
completion, `steps` forwards, logits shifted right by one (`cat([l[:, :1], l[:, :-1]])`), greedy
tokens. Departure: the random draws (`origin`'s `torch.rand`, `alg_temp`'s `torch.multinomial`)
come from `generator` and cover the completion slots (one uniform per slot; the multinomial over
the completion's confidences), where the reference draws from the global RNG over the masked slots
(`origin`) or the whole canvas (`alg_temp`); `dllm_edit` draws the same way, so the two can be
compared draw for draw.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import full_attention_logits


def dream_confidence(logits, alg):
    probs = torch.softmax(logits, dim=-1)
    confidence, x0 = probs.max(dim=-1)
    if alg == "topk_margin":
        top2 = torch.sort(probs, dim=-1, descending=True).values
        confidence = top2[..., 0] - top2[..., 1]
    elif alg == "entropy":
        confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return confidence, x0


@torch.no_grad()
def generate(
    model, prompt, *, mask_id, gen_length, steps, alg="entropy", alg_temp=None, eps=1e-3, generator=None
):
    """Returns the canvas `[B, P + G]` and the forward count (always `steps`)."""
    batch, prompt_length = prompt.shape
    x = F.pad(prompt, (0, gen_length), value=mask_id)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = x == mask_id
        logits = full_attention_logits(model, x)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        t, s = timesteps[i], timesteps[i + 1]
        if alg == "origin":
            p_transfer = 1 - s / t if i < steps - 1 else 1
            u = torch.rand((batch, gen_length), generator=generator)
            transfer = torch.zeros_like(mask_index)
            transfer[:, prompt_length:] = u < p_transfer
            transfer &= mask_index
            _, x0 = dream_confidence(logits, "maskgit_plus")
            x[transfer] = x0[transfer]
            continue
        confidence, x0 = dream_confidence(logits[mask_index], alg)
        num_mask_token = mask_index.sum() / mask_index.shape[0]
        k = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
        full_confidence = torch.full(x.shape, -torch.inf, dtype=logits.dtype)
        full_confidence[mask_index] = confidence
        if k > 0:
            if alg_temp is None or alg_temp == 0:
                _, transfer_index = torch.topk(full_confidence, k)
            else:
                weights = F.softmax(full_confidence[:, prompt_length:] / alg_temp, dim=-1)
                transfer_index = (
                    torch.multinomial(weights, num_samples=k, generator=generator) + prompt_length
                )
            x_ = torch.full_like(x, mask_id)
            x_[mask_index] = x0
            rows = torch.arange(batch)[:, None].expand_as(transfer_index)
            x[rows, transfer_index] = x_[rows, transfer_index]
    return x, steps
