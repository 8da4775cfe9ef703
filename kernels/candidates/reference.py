"""Pure-torch candidate selection: the ground truth and the CPU path.

For every row of logits, return the candidate token and its probability under the (optionally
temperature-scaled, top-k / top-p filtered) softmax. Rows are processed in chunks so that no
float32 copy of the whole `[N, V]` logits (let alone a kept softmax) is materialised at once.
"""

from __future__ import annotations

import torch

# Rows per chunk are chosen so a chunk's float32 working copy stays near this many bytes.
_CHUNK_BYTES = 64 * 2**20


def filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the `top_k` largest logits of each row, set the rest to -inf. `logits`: `[N, V]`."""
    k = min(top_k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # [N, 1]
    return logits.masked_fill(logits < kth, -float("inf"))  # [N, V]


def filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest prefix of sorted tokens whose mass reaches `top_p`.

    The most likely token is always kept. `logits`: `[N, V]`.
    """
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)  # [N, V]
    cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)  # [N, V]
    remove_sorted = cum > top_p  # [N, V]
    remove_sorted[:, 1:] = remove_sorted[:, :-1].clone()
    remove_sorted[:, 0] = False
    remove = torch.zeros_like(remove_sorted).scatter_(-1, sorted_idx, remove_sorted)  # [N, V]
    return logits.masked_fill(remove, -float("inf"))


def _candidates_chunk(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
    suppress_ids: tuple[int, ...],
) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.float()  # [n, V]
    if suppress_ids:
        x[:, list(suppress_ids)] = -float("inf")
    if temperature > 0:
        x = x / temperature
    if top_k is not None:
        x = filter_top_k(x, top_k)
    if top_p is not None:
        x = filter_top_p(x, top_p)
    lse = torch.logsumexp(x, dim=-1)  # [n]
    if temperature > 0:
        # Gumbel-max: argmax(x + G) is a sample of softmax(x).
        u = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)  # [n, V]
        gumbel = -torch.log(-torch.log(u.clamp_min(1e-20)).clamp_min(1e-20))  # [n, V]
        token = torch.argmax(x + gumbel, dim=-1)  # [n]
        chosen = x.gather(-1, token[:, None]).squeeze(-1)  # [n]
    else:
        chosen, token = x.max(dim=-1)  # [n], [n]
    prob = torch.exp(chosen - lse)  # [n]
    return token, prob


def candidates_reference(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate token and its probability for every row.

    Args:
        logits: `[..., V]` logits (any float dtype).
        temperature: 0 for greedy (argmax); > 0 scales the logits and samples (Gumbel-max).
        top_k: keep only the k largest logits before the softmax (None: off).
        top_p: nucleus filtering before the softmax (None: off).
        generator: torch.Generator for the sampling noise.
        suppress_ids: token ids never proposed (their logit set to -inf), e.g. the mask token.

    Returns:
        `(token, prob)`: LongTensor `[...]` and FloatTensor `[...]` (float32), `prob` being the
        probability of `token` under the filtered, temperature-scaled softmax.

    Examples:
        >>> import torch
        >>> tok, p = candidates_reference(torch.tensor([[0.0, 2.0, 1.0]]))
        >>> tok.tolist(), round(p.item(), 4)
        ([1], 0.6652)
    """
    lead = logits.shape[:-1]
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # [N, V]
    rows = max(1, _CHUNK_BYTES // (4 * vocab * (2 if temperature > 0 else 1)))
    tokens, probs = [], []
    for start in range(0, flat.shape[0], rows):
        t, p = _candidates_chunk(
            flat[start : start + rows], temperature, top_k, top_p, generator, suppress_ids
        )
        tokens.append(t)
        probs.append(p)
    token = torch.cat(tokens).reshape(lead)
    prob = torch.cat(probs).reshape(lead)
    return token, prob
