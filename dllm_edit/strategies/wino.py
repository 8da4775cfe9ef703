"""WINO (Hong et al., ICLR 2026, arXiv 2507.18578): wide-in, narrow-out revocable decoding.

One forward both drafts and verifies. **Wide in**: every masked slot of the active block whose
candidate probability is above a low threshold τ_in is committed, at most
`clamp(floor(0.7 · #masked), 5, 20)` of them (the most confident), and at least the most confident
one. **Narrow out**: a token written earlier in the block is checked against the *shadow block*, a
masked copy of the block appended to the forward with the block's position ids, whose slot `j`
sees the whole canvas except the block's own slot `j` (leave-one-out) and which no real slot sees:
the shadow's probability of the token at `j` is the model's belief in it without it. Tokens below
τ_out go back to the mask, only at steps that committed more than one token, and fewer than the
previous step committed. The shadow probabilities reach the step as `StepContext.shadow_probs`; the
adapter builds the shadow forward (`dllm_edit.adapters.shadow`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .schedules import Schedule
from .selection import at_step, masked_in_block, masked_ranks


def wide_in(conf: torch.Tensor, masked: torch.Tensor, tau: torch.Tensor, cap: torch.Tensor) -> torch.Tensor:
    """WINO's draft: masked slots with `conf > tau`, the `cap` most confident if more pass, the top
    one if none does.

    Args:
        conf: FloatTensor `[B, S]`, candidate probabilities.
        masked: BoolTensor `[B, S]`, the active block's masks.
        tau: FloatTensor `[B]`, τ_in.
        cap: LongTensor `[B]`, the most slots a step commits.

    Returns:
        BoolTensor `[B, S]`.

    Examples:
        >>> import torch
        >>> conf, masked = torch.tensor([[0.9, 0.8, 0.7, 0.1]]), torch.ones(1, 4, dtype=torch.bool)
        >>> wide_in(conf, masked, torch.tensor([0.6]), torch.tensor([2])).tolist()
        [[True, True, False, False]]
        >>> wide_in(conf, masked, torch.tensor([0.95]), torch.tensor([2])).tolist()
        [[True, False, False, False]]
    """
    rank = masked_ranks(conf, masked)  # [B, S] ties: the lower slot first
    passing = masked & (conf > tau[:, None])  # [B, S]
    count = passing.sum(-1, keepdim=True)  # [B, 1]
    top = masked & (rank < cap[:, None])  # [B, S]
    first = masked & (rank == 0)  # [B, S]
    return torch.where(count > cap[:, None], top, torch.where(count == 0, first, passing))  # [B, S]


def narrow_out(
    shadow: torch.Tensor, written: torch.Tensor, tau: torch.Tensor, limit: torch.Tensor
) -> torch.Tensor:
    """WINO's verification: written slots whose shadow probability is `< tau`, at most `limit` of
    them (the least believed; ties: the lower slot).

    Args:
        shadow: FloatTensor `[B, S]`, the shadow block's probability of each slot's token.
        written: BoolTensor `[B, S]`, the slots that may be re-masked.
        tau: FloatTensor `[B]`, τ_out.
        limit: LongTensor `[B]`, the most re-masks.

    Returns:
        BoolTensor `[B, S]`.

    Examples:
        >>> import torch
        >>> shadow, written = torch.tensor([[0.5, 0.95, 0.2, 0.3]]), torch.ones(1, 4, dtype=torch.bool)
        >>> narrow_out(shadow, written, torch.tensor([0.9]), torch.tensor([2])).tolist()
        [[False, False, True, True]]
    """
    doubtful = written & (shadow < tau[:, None])  # [B, S]
    return doubtful & (masked_ranks(-shadow, doubtful) < limit[:, None])  # [B, S]


@dataclass(frozen=True)
class WINO(Strategy):
    """WINO: wide-in commits at τ_in, narrow-out re-masks written tokens the shadow block doubts.

    At each step, with `m` the active block's masks and `a_{t-1}` the slots committed at the
    previous step of the block (none before the first):

    * commit `W = {i masked : c_i > τ_in}` if `1 <= |W| <= cap`, the `cap` most confident masked
      slots if `|W| > cap`, the most confident one if `W` is empty, with
      `cap = clamp(floor(accept_ratio · m), min_accept, max_accept)`;
    * if `|W| > 1`, re-mask the slots written before this step whose shadow probability is
      `< τ_out`, keeping the `a_{t-1} - 1` least believed when there are more.

    The re-masks of a step are fewer than the previous step's commits, so after `T` forwards at
    least `T` masks are gone: a block of `m` masks takes at most `m` forwards (no extra forwards
    beyond the block length). Ties go to the lower slot.

    Matches `Feng-Hong/WINO-DLLM:LLaDA/decoding.py:decoding_wino` (@9549a1d; τ_in = 0.6 and
    τ_out = 0.9 of its `configs/*.yaml`; the caps 0.7 / 5 / 20 are constants there), tokens and
    forwards: the reference starts a block with `last_accept = 30`, which never matters there (a
    block starts with no written token); here the first step of a block re-masks nothing. The
    d2Cache port (`src/generation/wino.py`) caps the re-masks by this step's commits instead; the
    authors' rule is the one followed. The shadow block needs an adapter that can build it
    (`dllm_edit.adapters.shadow.supports_shadow_block`): others are refused before any forward.

    Args:
        wide_in_threshold: τ_in in [0, 1] (float or Schedule), commit where `c > τ_in`.
        narrow_out_threshold: τ_out in [0, 1] (float or Schedule), re-mask where the shadow
            probability is `< τ_out`.
        accept_ratio: share of the block's masks one step may commit, in (0, 1].
        min_accept: the cap's lower bound (>= 1).
        max_accept: the cap's upper bound (>= min_accept).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import WINO, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[4, 5, 9, 9, 9]]),
        ...     masked=torch.tensor([[False, False, True, True, True]]),
        ...     editable=torch.tensor([[True, True, False, False, False]]),
        ...     in_block=torch.ones(5, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[4, 5, 1, 2, 3]]),
        ...     cand_probs=torch.tensor([[0.9, 0.9, 0.8, 0.7, 0.2]]),
        ...     shadow_probs=torch.tensor([[0.3, 0.95, 0.0, 0.0, 0.0]]), mask_token_id=9,
        ...     step=torch.tensor([2]), block_index=0, active=torch.tensor([True]),
        ...     state={"last_accept": torch.tensor([3])})
        >>> out = WINO().step(ctx)  # slots 2, 3 pass 0.6; slot 0's token is doubted (0.3 < 0.9)
        >>> out.commit.tolist(), out.edit.tolist(), out.tokens.tolist()
        ([[False, False, True, True, False]], [[True, False, False, False, False]], [[9, 5, 1, 2, 3]])
    """

    wide_in_threshold: float | Schedule = 0.6
    narrow_out_threshold: float | Schedule = 0.9
    accept_ratio: float = 0.7
    min_accept: int = 5
    max_accept: int = 20

    unmasks = True
    sweep = ("wide_in_threshold", (0.9, 0.8, 0.7, 0.6, 0.5))

    def __post_init__(self) -> None:
        for name in ("wide_in_threshold", "narrow_out_threshold"):
            object.__setattr__(self, name, fields.threshold_field(name, getattr(self, name)))
        ratio = fields.real(
            "WINO",
            "accept_ratio",
            self.accept_ratio,
            minimum=0.0,
            maximum=1.0,
            strict_minimum=True,
            hint="the share of the block's masks a step may commit, 0.7 in the paper",
        )
        object.__setattr__(self, "accept_ratio", ratio)
        fields.positive_int(
            "WINO", "min_accept", self.min_accept, "the per-step cap's lower bound, 5 in the paper"
        )
        fields.positive_int(
            "WINO", "max_accept", self.max_accept, "the per-step cap's upper bound, 20 in the paper"
        )
        if self.max_accept < self.min_accept:
            raise ValueError(
                f"`max_accept` of WINO ({self.max_accept}) must be >= `min_accept` ({self.min_accept}): "
                "the cap is clamp(floor(accept_ratio * masks), min_accept, max_accept)."
            )

    def requires(self) -> Needs:
        """The shadow block, and re-masking (puts masks back on written tokens: the property suite
        then skips "no mask written"); no extra forwards (see above)."""
        return Needs(shadow_block=True, remasks=True)

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        count = masked.sum(-1)  # [B]
        # float32 like the reference's `int(tensor * 0.7)`, so floor(0.7 m) rounds the same
        cap = (count * self.accept_ratio).long().clamp(self.min_accept, self.max_accept)  # [B]
        commit = wide_in(ctx.cand_probs, masked, at_step(self.wide_in_threshold, ctx), cap)  # [B, S]
        accepted = commit.sum(-1)  # [B]
        last = ctx.state.get("last_accept")  # [B] commits of the previous step of the block
        limit = torch.zeros_like(accepted) if last is None else (last - 1).clamp_min(0)  # [B]
        limit = torch.where(accepted > 1, limit, torch.zeros_like(limit))  # [B]
        written = ctx.editable & ctx.in_block  # [B, S] written before this step, in the block
        remask = narrow_out(
            ctx.stat("shadow_prob"), written, at_step(self.narrow_out_threshold, ctx), limit
        )  # [B, S]
        mask = torch.full_like(ctx.tokens, ctx.mask_id)  # [B, S]
        tokens = torch.where(remask, mask, ctx.cand_tokens)  # [B, S]
        return StepResult(commit=commit, edit=remask, tokens=tokens, state={"last_accept": accepted})
