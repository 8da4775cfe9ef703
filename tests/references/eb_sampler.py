"""d2Cache's vanilla decoder with the EB-Sampler (`gamma`) selection.

Ported from `Kamichanw/d2Cache:src/generation/vanilla.py` @72feb60 (`vanilla_generate`,
`generate_step`, `confidence_unmasking` with `gamma`) and `src/generation/utils.py`
(`sample_tokens`). Greedy only, unpadded equal-length prompts. `cummax_dim=0` is the reference's
running max (over the batch dimension); `cummax_dim=1` the paper's (over the sorted slots).
Rows take part in a step only while their block holds a mask (`check_can_generate`), so each row
has its own forward count.
"""

from __future__ import annotations

import torch
import torch.distributions as dists

from .common import full_attention_logits


def sample_confidence(logits, alg):
    """`sample_tokens` at temperature 0: `(confidence, x0, probs)` for `alg`."""
    probs = torch.softmax(logits, dim=-1)
    confidence, x0 = probs.max(dim=-1)
    if alg == "topk_margin":
        top2 = torch.sort(probs, dim=-1, descending=True).values
        confidence = top2[..., 0] - top2[..., 1]
    elif alg == "entropy":
        confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return confidence, x0, probs


def eb_select(scores, transfer_mask, probs, gamma, cummax_dim, min_transfer=1):
    """`confidence_unmasking(gamma=...)`: one index tensor per row."""
    confidence = torch.where(transfer_mask, scores, -torch.inf)
    _, ids = torch.sort(confidence, dim=-1, descending=True)
    entropy = torch.gather(dists.Categorical(probs=probs.float()).entropy(), dim=-1, index=ids)
    acc = torch.cumsum(entropy, dim=1)
    running_max = torch.cummax(entropy, dim=cummax_dim).values
    n = (acc - running_max <= gamma).sum(dim=1)
    most = transfer_mask.sum(-1)
    n = torch.clamp(n, min=torch.full_like(n, min_transfer), max=most)
    return [torch.topk(confidence[i], int(torch.minimum(most[i], n[i]))).indices for i in range(len(n))]


@torch.no_grad()
def generate(model, prompt, *, mask_id, gen_length, block_length, gamma, alg="maskgit_plus", cummax_dim=0):
    """Returns the canvas `[B, P + G]` and each row's forward count `[B]`."""
    batch, prompt_length = prompt.shape
    x = torch.full((batch, prompt_length + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt_length] = prompt
    nfe = torch.zeros(batch, dtype=torch.long)
    for block in range(gen_length // block_length):
        block_mask = torch.zeros(batch, gen_length, dtype=torch.bool)
        block_mask[:, block * block_length : (block + 1) * block_length] = True
        while True:
            generated = x[:, prompt_length:]
            can_generate = (block_mask & (generated == mask_id)).any(-1)
            if not can_generate.any():
                break
            rows = can_generate.nonzero().flatten()
            logits = full_attention_logits(model, x[rows])[:, prompt_length:]
            confidence, x0, probs = sample_confidence(logits, alg)
            transfer_mask = (generated[rows] == mask_id) & block_mask[rows]
            scores = torch.where(transfer_mask, confidence, -torch.inf)
            chosen = eb_select(scores, transfer_mask, probs, gamma, cummax_dim)
            for local, (r, index) in enumerate(zip(rows.tolist(), chosen)):
                x[r, prompt_length + index] = x0[local, index]
            nfe[rows] += 1
    return x, nfe
