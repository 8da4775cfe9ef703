"""Dream's `diffusion_generate` sampling loop (`DreamGenerationMixin._sample`).

Ported from `Dream-org/Dream-v0-*-7B:generation_utils.py` as copied in
`ZHZisZZ/dllm:dllm/pipelines/dream/models/generation_utils.py` @ca17675: one block over the whole
completion, `steps` forwards, logits shifted right by one (`cat([l[:, :1], l[:, :-1]])`), greedy
tokens. Departure: the random draws (`origin`'s `torch.rand`, `alg_temp`'s `torch.multinomial`)
come from `generator` and cover the completion slots (one uniform per slot; the multinomial over
the completion's confidences), where the reference draws from the global RNG over the masked slots
(`origin`) or the whole canvas (`alg_temp`); `dllm_edit` draws the same way, so the two can be
compared draw for draw.

Sampling (`temperature > 0`, with `top_p` / `top_k`) follows Dream's `sample_tokens`: logits divided
by the temperature, then `top_p_logits`, then `top_k_logits` (ported below; `filter_order=
"top_k_first"` swaps the two, the candidate kernel's order). Departure: the token is drawn as the
candidate kernel draws it (Gumbel-max with one uniform per completion slot and vocabulary entry from
`generator`), where Dream calls `Categorical(probs).sample()` on the global RNG: the same
distribution, drawn the same way as dllm_edit's so the two can be compared draw for draw.
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


def top_p_logits(logits, top_p=None):
    sorted_logits, sorted_indices = torch.sort(logits, descending=True)
    cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    sorted_indices_to_remove = cumulative_probs > top_p
    # Shift the indices to the right to keep the first token above the threshold
    sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
    sorted_indices_to_remove[..., 0] = 0
    mask = torch.zeros_like(logits, dtype=torch.bool, device=logits.device)
    mask = mask.scatter_(-1, sorted_indices, sorted_indices_to_remove)
    logits = logits.masked_fill(mask, torch.finfo(logits.dtype).min)
    return logits


def top_k_logits(logits, top_k=None):
    top_k = min(top_k, logits.size(-1))  # Safety check
    # Remove all tokens with a probability less than the last token of the top-k
    indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
    logits = logits.masked_fill(indices_to_remove, torch.finfo(logits.dtype).min)
    return logits


def sampled_logits(logits, temperature, top_p, top_k, gen_length, generator, filter_order="top_p_first"):
    """Dream's `sample_tokens` up to the draw, over the completion slots (`logits` `[B, L, V]`, shifted):
    the filtered logits `[B, L, V]` and the sampled tokens `[B, L]` (prompt slots: the argmax)."""
    logits = logits / temperature
    filters = [
        lambda x: top_p_logits(x, top_p) if top_p is not None and top_p < 1 else x,
        lambda x: top_k_logits(x, top_k) if top_k is not None else x,
    ]
    if filter_order != "top_p_first":
        filters.reverse()
    for f in filters:
        logits = f(logits)
    batch, length, vocab = logits.shape
    u = torch.rand((batch, gen_length, vocab), generator=generator)
    gumbel = -torch.log((-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20))
    x0 = logits.argmax(-1)
    x0[:, length - gen_length :] = (logits[:, length - gen_length :] + gumbel).argmax(-1)
    return logits, x0


@torch.no_grad()
def generate(
    model,
    prompt,
    *,
    mask_id,
    gen_length,
    steps,
    alg="entropy",
    alg_temp=None,
    eps=1e-3,
    generator=None,
    temperature=0.0,
    top_p=None,
    top_k=None,
    filter_order="top_p_first",
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
        if temperature > 0:  # sample_tokens: the confidence of the filtered distribution, a drawn token
            logits, drawn = sampled_logits(
                logits, temperature, top_p, top_k, gen_length, generator, filter_order
            )
            probs = torch.softmax(logits, dim=-1)
            if alg == "topk_margin":
                top2 = torch.sort(probs, dim=-1, descending=True).values
                conf_all = top2[..., 0] - top2[..., 1]
            elif alg == "entropy":
                conf_all = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
            else:
                conf_all = probs.gather(-1, drawn[..., None])[..., 0]
            confidence, x0 = conf_all[mask_index], drawn[mask_index]
        if alg == "origin":
            p_transfer = 1 - s / t if i < steps - 1 else 1
            u = torch.rand((batch, gen_length), generator=generator)
            transfer = torch.zeros_like(mask_index)
            transfer[:, prompt_length:] = u < p_transfer
            transfer &= mask_index
            _, x0 = dream_confidence(logits, "maskgit_plus")
            x[transfer] = x0[transfer]
            continue
        if temperature == 0:
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
