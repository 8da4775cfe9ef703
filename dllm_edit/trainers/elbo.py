"""The ELBO of a completion under a diffusion LM, as EBPO estimates it (LLaDA2.1 equation 5).

For timesteps `t_1..t_N` and weights `w_n`, the completion `y` (clean copy `y_0`) is masked at rate
`t_n` into `y_{t_n}`, and the model scores the masked tokens given `z_n = y_{t_n} ⊕ y_0` under the
block-causal mask (`DiffusionForward`, one forward per timestep for all blocks):

    ELBO(y | x) ≈ Σ_n w_n Σ_{i masked in y_{t_n}} log p_θ(y_i | z_n, x)

`elbo_token_logps` returns the per-token summands (`[B, T]`, zero where a token is never masked), so
the ratio of equation 5 can be taken per sequence, per block or per token.

**Noise is a function of a per-sample seed**, not of the batch: timesteps and masks come from a
counter-based hash of `(seed, timestep index, position)`. θ and θ_old therefore see exactly the same
`z_n` for a sample wherever it lands after shuffling or splitting into gradient-accumulation
micro-batches.

Timesteps are stratified: `t_n = t_min + (n + u_n) (t_max - t_min) / N`, `u_n ~ U[0, 1)`. Weights:
`"inverse_t"` gives `w_n = 1 / (N t_n)`, the masked-diffusion ELBO weight averaged over the N draws
(the 1/t weighting is what makes `E_t[(1/t) Σ_masked log p]` a bound on `log p(y)`); `"uniform"`
gives `w_n = 1 / N` (lower variance, no longer a bound).
"""

from __future__ import annotations

import torch

from .diffusion_forward import DiffusionForward
from .hidden_states import token_logprob

ELBO_WEIGHTINGS = ("inverse_t", "uniform")
_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32) on int64 tensors holding values in [0, 2^32)."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32  # the product wraps in int64; its low 32 bits are exact
    return x ^ (x >> 16)


def counter_uniform(seeds: torch.Tensor, stream: int, length: int) -> torch.Tensor:
    """Uniform numbers in [0, 1) that depend only on `(seed, stream, position)`.

    Args:
        seeds: LongTensor `[B]`, one seed per sample.
        stream: an integer naming the use (e.g. the timestep index).
        length: positions per sample.

    Returns:
        FloatTensor `[B, length]` (float64 precision rounded to float32), on the device of `seeds`.

    Examples:
        >>> import torch
        >>> a = counter_uniform(torch.tensor([7, 8]), stream=0, length=3)
        >>> torch.equal(a[1], counter_uniform(torch.tensor([8]), stream=0, length=3)[0])
        True
    """
    positions = torch.arange(length, device=seeds.device, dtype=torch.long)  # [L]
    key = _mix32(
        _mix32(seeds.long() & _MASK32) ^ _mix32(torch.tensor(stream, device=seeds.device) + 0x9E37)
    )  # [B]
    bits = _mix32(key[:, None] ^ _mix32(positions + 0x632B)[None, :])  # [B, L]
    return (bits.double() / 2.0**32).float()


def elbo_timesteps(seeds: torch.Tensor, num_timesteps: int, t_min: float, t_max: float) -> torch.Tensor:
    """Stratified timesteps per sample: FloatTensor `[B, N]` with `t_n` in stratum n of [t_min, t_max]."""
    u = counter_uniform(seeds, stream=1_000_003, length=num_timesteps)  # [B, N]
    strata = torch.arange(num_timesteps, device=seeds.device, dtype=torch.float32)  # [N]
    return t_min + (strata[None] + u) * (t_max - t_min) / num_timesteps  # [B, N]


def elbo_weights(t: torch.Tensor, weighting: str) -> torch.Tensor:
    """`w_n` `[B, N]` for timesteps `t` `[B, N]` (see the module docstring)."""
    if weighting not in ELBO_WEIGHTINGS:
        raise ValueError(f"`elbo_weighting` must be one of {list(ELBO_WEIGHTINGS)}, got {weighting!r}.")
    n = t.shape[1]
    if weighting == "inverse_t":
        return 1.0 / (n * t.clamp_min(1e-3))
    return torch.full_like(t, 1.0 / n)


def elbo_masks(seeds: torch.Tensor, t: torch.Tensor, supervised: torch.Tensor) -> torch.Tensor:
    """Which supervised tokens are masked at each timestep: BoolTensor `[N, B, T]`."""
    length = supervised.shape[1]
    draws = torch.stack([counter_uniform(seeds, n, length) for n in range(t.shape[1])])  # [N, B, T]
    return supervised[None].bool() & (draws < t.T[:, :, None])  # [N, B, T]


def elbo_token_logps(
    forward: DiffusionForward,
    clean: torch.Tensor,
    valid: torch.Tensor,
    supervised: torch.Tensor,
    seeds: torch.Tensor,
    *,
    mask_token_id: int,
    num_timesteps: int,
    t_min: float,
    t_max: float,
    weighting: str = "inverse_t",
) -> torch.Tensor:
    """Per-token ELBO summands `Σ_n w_n 1[i masked at t_n] log p(y_i | z_n)`.

    Args:
        forward: the model's training forward (`DiffusionForward`), or any callable
            `(noisy, clean, valid) -> [B, T, V]` logits.
        clean: LongTensor `[B, T]`, prompt ⊕ completion, right-padded to whole blocks.
        valid: BoolTensor `[B, T]`, non-padding positions.
        supervised: BoolTensor `[B, T]`, the completion tokens whose likelihood is estimated.
        seeds: LongTensor `[B]`, per-sample noise seeds (θ and θ_old must get the same).
        mask_token_id: the mask token.
        num_timesteps: N, forwards per sample.
        t_min: lowest timestep.
        t_max: highest timestep.
        weighting: `"inverse_t"` or `"uniform"`.

    Returns:
        FloatTensor `[B, T]` (differentiable through the model); its row sums estimate the ELBO.
    """
    t = elbo_timesteps(seeds, num_timesteps, t_min, t_max)  # [B, N]
    weights = elbo_weights(t, weighting).to(clean.device)  # [B, N]
    masks = elbo_masks(seeds, t, supervised).to(clean.device)  # [N, B, T]
    return weighted_masked_logps(forward, clean, valid, masks, weights, mask_token_id=mask_token_id)


def count_masks(
    seeds: torch.Tensor, num_samples: int, supervised: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stratified mask *counts*: the lower-variance ELBO estimator used to score fixed continuations.

    For a continuation of `L` tokens, sample `n` masks exactly `l_n` of them, with `l_n` uniform on
    `1..L` and stratified (`l_n = floor((n + u_n) L / N) + 1`), the positions chosen uniformly; its
    weight is `L / (N l_n)`. Then `Σ_n w_n Σ_{i masked} log p(y_i | ·)` estimates
    `E_l[(L / l) Σ_{i masked} log p]`, the masked-diffusion bound on `log p(y | x)` of LLaDA's
    conditional likelihood (their evaluation estimator). Like the timestep form, every draw is a
    function of `(seed, sample index, position)`.

    Args:
        seeds: LongTensor `[B]`, per-sample noise seeds.
        num_samples: N, masks (forwards) per sample.
        supervised: BoolTensor `[B, T]`, the tokens whose likelihood is estimated.

    Returns:
        `(masks, weights)`: BoolTensor `[N, B, T]` and FloatTensor `[B, N]` (0 for rows with no
        supervised token).

    Examples:
        >>> import torch
        >>> supervised = torch.tensor([[False, True, True, True]])
        >>> masks, weights = count_masks(torch.tensor([3]), 3, supervised)
        >>> masks.sum(-1).flatten().tolist(), [round(w, 3) for w in weights[0].tolist()]
        ([1, 2, 3], [1.0, 0.5, 0.333])
    """
    supervised = supervised.bool()
    length = supervised.shape[1]
    counts_available = supervised.sum(-1)  # [B]
    u = counter_uniform(seeds, stream=2_000_003, length=num_samples)  # [B, N]
    strata = torch.arange(num_samples, device=seeds.device, dtype=torch.float32)  # [N]
    frac = (strata[None] + u) / num_samples  # [B, N] in [0, 1)
    total = counts_available[:, None].to(torch.float32)  # [B, 1]
    counts = torch.minimum((frac * total).floor() + 1, total)  # [B, N] in 1..L (0 when L = 0)
    weights = torch.where(total > 0, total / (counts.clamp_min(1) * num_samples), 0.0)  # [B, N]
    masks = []
    for n in range(num_samples):
        draws = counter_uniform(seeds, n, length).masked_fill(~supervised, 2.0)  # [B, T]
        rank = draws.argsort(-1).argsort(-1)  # [B, T] rank of each position's draw
        masks.append(rank < counts[:, n, None])  # [B, T]
    return torch.stack(masks), weights  # [N, B, T], [B, N]


def weighted_masked_logps(
    forward: DiffusionForward,
    clean: torch.Tensor,
    valid: torch.Tensor,
    masks: torch.Tensor,
    weights: torch.Tensor,
    *,
    mask_token_id: int,
) -> torch.Tensor:
    """`Σ_n w_n 1[i masked in draw n] log p(y_i | z_n)` per token: one forward per draw.

    Args:
        forward: the model's training forward (`DiffusionForward`, whose `scores` is read), or any
            callable `(noisy, clean, valid) -> [B, T, V]` logits.
        clean: LongTensor `[B, T]`, prompt ⊕ completion, right-padded to whole blocks.
        valid: BoolTensor `[B, T]`, non-padding positions.
        masks: BoolTensor `[N, B, T]`, the positions masked in each draw.
        weights: FloatTensor `[B, N]`, the weight of each draw.
        mask_token_id: the mask token.

    Returns:
        FloatTensor `[B, T]` (differentiable through the model).
    """
    masks = masks.to(clean.device)
    weights = weights.to(clean.device)
    total = torch.zeros(clean.shape, dtype=torch.float32, device=clean.device)  # [B, T]
    for n in range(masks.shape[0]):
        if not masks[n].any():
            continue
        noisy = clean.masked_fill(masks[n], mask_token_id)  # [B, T]
        score = getattr(forward, "scores", forward)  # a plain callable gives logits
        scores = score(noisy, clean, valid)  # [B, T, V] logits, or HiddenStates
        logp = token_logprob(scores, clean, masks[n])  # [M]
        step = torch.zeros_like(total).masked_scatter(masks[n], logp)  # [B, T]
        total = total + weights[:, n, None] * step
    return total
