"""Dummy denoisers with known logits, for exact tests of the decoding rules."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class _Out:
    logits: torch.Tensor


def _allowed(attention_mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor:
    if attention_mask is None:
        return torch.ones(batch, length, length, dtype=torch.bool)
    if attention_mask.dim() == 2:  # a masked LM's padding mask [B, K]: every query sees the valid keys
        return attention_mask.bool()[:, None, :].expand(batch, length, length)
    m = attention_mask[:, 0]
    return m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2  # [B, Q, K]


class BagDenoiser(torch.nn.Module):
    """Logits at a position are a fixed random function of the tokens it may attend to.

    `logits[q] = sharpness * (mean_{k visible} E[x_k] @ O + P[pos_q] + T[x_q])`. Being a function
    of the visible tokens only, it respects whatever attention mask it is given (4-D, or a masked
    LM's 2-D padding mask), so block-causal decoding with it is well defined (no KV cache: it
    recomputes everything).

    With `exact=True`, `E` and `O` are multiples of 1/4 in [-2, 2] and the mean is taken after the
    projection, so every sum is exact in float32: the logits of a row do not depend on how many
    padding slots or other rows share the forward (real attention kernels sum in an order that
    depends on the sequence length, which moves logits by ~1e-6).
    """

    def __init__(
        self,
        vocab_size: int = 24,
        dim: int = 16,
        max_positions: int = 512,
        sharpness: float = 3.0,
        seed: int = 0,
        exact: bool = False,
    ):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.E = torch.randn(vocab_size, dim, generator=g)
        self.O = torch.randn(dim, vocab_size, generator=g)
        if exact:
            self.E = (self.E * 4).round().clamp(-8, 8) / 4
            self.O = (self.O * 4).round().clamp(-8, 8) / 4
        self.exact = exact
        self.P = torch.randn(max_positions, vocab_size, generator=g)
        self.T = torch.randn(vocab_size, vocab_size, generator=g)
        # the mask token (last id) is never proposed, so the guard-free reference always terminates
        self.P[:, -1] = -1e3
        self.sharpness = sharpness
        self.vocab_size = vocab_size
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        self.calls += 1
        batch, length = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(length)[None].expand(batch, length)
        allowed = _allowed(attention_mask, batch, length).float()  # [B, Q, K]
        count = allowed.sum(-1, keepdim=True).clamp_min(1)  # [B, Q, 1]
        if self.exact:
            bag = (allowed @ self.E[input_ids]) @ self.O / count  # [B, Q, V], exact sums
        else:
            bag = allowed @ self.E[input_ids] / count @ self.O  # [B, Q, V]
        logits = bag + self.P[position_ids] + self.T[input_ids]  # [B, Q, V]
        return _Out(self.sharpness * logits)


class ScriptedDenoiser(torch.nn.Module):
    """Returns pre-written probabilities for the last `block_length` positions, call by call.

    `script[n]` is a `[block_length, V]` probability table for forward number `n`; the last table
    repeats once the script is exhausted. Use with `use_cache=False`, batch size 1.
    """

    def __init__(self, script: list[torch.Tensor], block_length: int):
        super().__init__()
        self.script = [torch.as_tensor(t, dtype=torch.float32) for t in script]
        self.block_length = block_length
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        table = self.script[min(self.calls, len(self.script) - 1)]  # [bl, V]
        self.calls += 1
        batch, length = input_ids.shape
        logits = torch.zeros(batch, length, table.shape[-1])
        logits[:, -self.block_length :] = torch.log(table.clamp_min(1e-12))
        return _Out(logits)


def one_hot_table(tokens: list[int], probs: list[float], vocab: int) -> torch.Tensor:
    """A `[len(tokens), vocab]` table putting `probs[i]` on `tokens[i]`, the rest spread evenly."""
    table = torch.empty(len(tokens), vocab)
    for i, (t, p) in enumerate(zip(tokens, probs)):
        table[i] = (1 - p) / (vocab - 1)
        table[i, t] = p
    return table
