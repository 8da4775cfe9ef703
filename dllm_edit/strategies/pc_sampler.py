"""PC-Sampler (Huang et al., arXiv 2508.13021): position-aware, frequency-calibrated unmasking.

Each masked slot `i` of the active block is scored by
`score_i = exp(-λ · pos_i) · min(-c_i · log(f(x̂_i) + 1e-9), α)`, where `c_i` is the candidate's
probability, `x̂_i` the candidate, `f` a token-frequency prior (`dllm_edit.strategies.token_prior`)
and `pos_i` the slot's offset from the active block's first slot (the same order as from the
completion's first token, at the reference's float32 resolution). The position weight steers the
decoding order from left to right (λ > 0), the calibration turns down tokens the corpus is full of
(EOS, punctuation). Each step commits the `k` best-scored masked slots with LLaDA-1's fixed quota.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .selection import llada_quota, masked_in_block, top_k_masked
from .token_prior import as_prior

_EPS = 1e-9  # inside the log, as the reference


@dataclass(frozen=True)
class PCSampler(Strategy):
    """PC-Sampler: commit the `k` masked slots of largest position-weighted, calibrated confidence.

    `score_i = exp(-λ · pos_i) · C_i` with `C_i = min(-c_i · log(f(x̂_i) + 1e-9), α)` (no prior:
    `C_i = c_i`, position weighting only), and `k = 1` per step (`steps=None`) or LLaDA-1's quota of
    the block's masks over `steps` forwards. Slots are ranked by `log C_i - λ · pos_i`, the same order
    without the underflow of `exp(-λ · pos)` (float32 reaches 0 past `pos ≈ 414` at λ = 0.25, a
    block longer than 414);
    ties go to the lower slot.

    Matches `NEUIR/PC-Sampler:src/generate.py:generate_with_pc_sampler` (@8b106b0; defaults of its
    `scripts/eval_pc_sampler.sh`: λ = 0.25, α = 10, steps = gen_length = block_length), tokens and
    forwards. `pos` counts from the start of the active block, as there (`ctx.positions` minus the
    block's first slot): counted from the completion's start (the paper's algorithm) the weights
    differ by a common factor, the same order in exact arithmetic, but `λ · pos` then grows with the
    block's offset and float32 loses the order of scores that differ by a relative 1e-6 once the
    block is 64 or more tokens in. The reference's `torch.topk` breaks exact ties in no specified
    order, and its positions past the underflow all score 0.

    Args:
        lambd: λ >= 0, the position decay (0: no position preference).
        alpha: α > 0, the clip of the calibrated confidence.
        prior: token frequencies `[V]` (a tensor or sequence, kept as a tuple of floats), a path to
            a `.pt` / `.npy` / `.json` prior (kept as the path), or None (no calibration). See
            `estimate_token_prior` and `load_token_prior`. Call `check_vocab(V)` before decoding:
            a prior of another size than the model's logits is refused.
        steps: None (one token per step) or the forwards per block the quota spreads the masks over.

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import PCSampler, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.tensor([[True, True, True]]),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[0, 1, 2]]), cand_probs=torch.tensor([[0.9, 0.6, 0.5]]),
        ...     positions=torch.tensor([[0, 1, 2]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]))
        >>> # token 0 is frequent (f = 0.5): -0.9 log 0.5 = 0.62 < -0.6 log 0.01 * exp(-0.25) = 2.15
        >>> PCSampler(prior=[0.5, 0.01, 0.49]).step(ctx).commit.tolist()
        [[False, True, False]]
    """

    lambd: float = 0.25
    alpha: float = 10.0
    prior: str | tuple[float, ...] | None = None
    steps: int | None = None
    _prior: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    unmasks = True
    sweep = ("steps", (32, 16, 8, 4))  # forwards per block; `dllm-edit bench` blocks are 32 long

    def __post_init__(self) -> None:
        lambd = fields.real(
            "PCSampler", "lambd", self.lambd, minimum=0.0, hint="λ, the position decay, e.g. 0.25"
        )
        object.__setattr__(self, "lambd", lambd)
        alpha = fields.real(
            "PCSampler",
            "alpha",
            self.alpha,
            minimum=0.0,
            strict_minimum=True,
            hint="α, the calibration clip, e.g. 10",
        )
        object.__setattr__(self, "alpha", alpha)
        fields.optional_int("PCSampler", "steps", self.steps, 1, "None: one token per step")
        prior = self.prior
        if prior is None:
            return
        tensor = as_prior(prior)  # [V] validated (TypeError / ValueError name `prior`)
        if isinstance(prior, (str, os.PathLike)):
            object.__setattr__(self, "prior", os.fspath(prior))
        elif not (isinstance(prior, tuple) and all(type(v) is float for v in prior)):
            object.__setattr__(self, "prior", tuple(float(v) for v in tensor.tolist()))
        object.__setattr__(self, "_prior", tensor)

    @property
    def prior_size(self) -> int | None:
        """The prior's vocabulary size (None without a prior)."""
        return None if self._prior is None else int(self._prior.numel())

    def requires(self) -> Needs:
        """The prior's vocabulary size: the loop refuses a model whose logits have another size,
        before the first forward (the strategy alone only sees token ids and cannot tell a prior
        that is too large)."""
        return Needs(vocab_size=self.prior_size)

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse a prior whose size is not the model's vocabulary (the size of its logits).

        Raises:
            ValueError: the sizes differ.
        """
        size = self.prior_size
        if size is not None and size != vocab_size:
            raise ValueError(
                f"`prior` of PCSampler has {size} entries but the model's vocabulary has {vocab_size} "
                "(the size of its logits): estimate it with estimate_token_prior(..., vocab_size="
                f"{vocab_size}) from this model's tokenizer."
            )

    @staticmethod
    def _frequencies(prior: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """FloatTensor `[B, S]`: the prior's frequency of each candidate."""
        prior = prior if prior.device == tokens.device else prior.to(tokens.device)  # [V]
        try:
            return prior[tokens]  # [B, S]
        except IndexError:  # raised on the CPU; on an accelerator the loop's check_vocab call guards it
            raise ValueError(
                f"`prior` of PCSampler has {prior.numel()} entries, fewer than the model's vocabulary "
                "(a candidate id is past its end); estimate it with this model's vocabulary size."
            ) from None

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        conf = ctx.cand_probs.to(torch.float32)  # [B, S]
        if self._prior is None:
            calibrated = conf  # [B, S]
        else:
            freq = self._frequencies(self._prior, ctx.cand_tokens)  # [B, S]
            calibrated = (-conf * torch.log(freq + _EPS)).clamp(max=self.alpha)  # [B, S]
        floor = torch.finfo(torch.float32).min
        first = ctx.in_block.long().argmax().view(1)  # [1] the active block's first slot
        pos = ctx.positions - ctx.positions.index_select(-1, first)  # [B, S] from the block's start
        log_score = torch.log(calibrated.clamp_min(0)) - self.lambd * pos.to(torch.float32)  # [B, S]
        log_score = log_score.clamp_min(floor)  # [B, S] a masked slot of score 0 still beats the others
        return StepResult.unmasking(ctx, top_k_masked(log_score, masked, llada_quota(ctx, self.steps)))
