"""Low-confidence remasking (ReMDM / Token-to-Mask style): put the mask back on unsure written tokens.

T2T editing (`TokenEdit`) rewrites a written token only when the model proposes *another* token with
enough confidence. A model that is merely unsure of a token — its best candidate there has a low
probability — never edits it. Remasking turns such a position back into a mask, so the M2T strategy
redrafts it later, when more of the block is written. It needs no training (ReMDM, Wang et al. 2025)
and composes with M2T and T2T: it is one more `Strategy` in the list.

**Rule.** At a step of the active block, a written position (editable: generated, not masked at the
top of the step; never the prompt, never the multi-block-edit window) is re-masked when the candidate
probability there is `p < threshold` (strict). At temperature 0 the candidate is the argmax, so the
probability of the token already written is at most `p`: the rule only remasks tokens the model gives
less than `threshold`. At most `max_per_step` positions per row per step are remasked (the least
confident; ties to the lower position).

**Which probability.** `score="candidate"` (default) reads the candidate's probability `p` — how sure
the model is of *anything* at the position. `score="current"` reads the probability the model gives
the token *already written* there, `q <= p` at temperature 0 (ReMDM's rule, remasking by the written
token's own confidence): it also remasks a token the model now disfavours while preferring another
one too weakly for T2T to rewrite it (`q` low, `p` high). The loop computes `q` in the same pass over
the logits as the candidates (`dllm_edit.kernels.edit_candidates`), and only when a strategy asks
for it (`Strategy.needs_current_probs`); the default costs nothing extra.

**Guard against loops.** A remasked position that is redrafted with the same low confidence would be
remasked again forever. Remasking therefore happens only during the first `max_steps` forwards of a
block (the loop's per-row step counter `StepContext.step`), so a block holds at most
`max_steps * max_per_step` remasks per row; afterwards the block finishes under the ordinary rules
(each step fills at least one mask, then at most `max_post_steps` verification forwards). A block
costs at most `max_steps + block_length + max_post_steps` forwards, within the default hard cap
`max_steps_per_block="auto"` (`2 * block_length + max_post_steps`) whenever `max_steps <= block_length`
— `EditGenerationConfig` checks this — so no block ends with a mask left.

The block-end rule sees a remask as an edit (it rewrites a written token, with the mask): a block that
was mask-free and remasks continues, and its masks are filled before it can end. Remasks count in
`num_edits` and are streamed and traced as edits. The active block is never in the KV cache, so
remasking works with every adapter and the cache.

When two strategies write the same position, the later one in the list wins: put this one after
`TokenEdit` to redraft (rather than rewrite) positions both select.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dllm_edit.kernels import StatName

from . import fields
from .base import StepContext, StepResult, Strategy
from .needs import Needs
from .schedules import Schedule
from .selection import at_step, masked_ranks

REMASK_SCORES = ("candidate", "current")


@dataclass(frozen=True)
class LowConfidenceRemask(Strategy):
    """Re-mask written tokens of the active block whose candidate probability is below `threshold`.

    Args:
        threshold: τ_remask, a float in [0, 1] or a `Schedule`: remask where `p < threshold`.
        max_steps: remask only during the first `max_steps` forwards of each block (>= 1): the guard
            against remask/redraft loops (see the module docstring).
        max_per_step: at most this many remasks per row and step, the least confident first (>= 1).
        score: `"candidate"` (default: the candidate's probability) or `"current"` (the probability
            of the token written at the position; see the module docstring).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import LowConfidenceRemask, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[5, 6, 7]]), masked=torch.tensor([[False, False, False]]),
        ...     editable=torch.tensor([[False, True, True]]), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[5, 6, 8]]), cand_probs=torch.tensor([[0.1, 0.2, 0.9]]),
        ...     step=torch.tensor([1]), block_index=0, active=torch.tensor([True]), mask_token_id=0)
        >>> result = LowConfidenceRemask(threshold=0.3).step(ctx)  # position 0 is the prompt
        >>> result.edit.tolist(), result.tokens.tolist()
        ([[False, True, False]], [[5, 0, 7]])
    """

    threshold: float | Schedule = 0.3
    max_steps: int = 8
    max_per_step: int = 1
    score: str = "candidate"

    def __post_init__(self) -> None:
        fields.choice(
            "LowConfidenceRemask",
            "score",
            self.score,
            REMASK_SCORES,
            "'candidate' ranks by the candidate's probability, 'current' by the written token's",
        )
        object.__setattr__(self, "threshold", fields.threshold_field("remask_threshold", self.threshold))
        for name in ("max_steps", "max_per_step"):
            fields.positive_int(
                "LowConfidenceRemask",
                name,
                getattr(self, name),
                "it bounds the remasks per block, e.g. max_steps=8",
            )

    def requires(self) -> Needs:
        """Re-masking, the current token's probability with `score="current"`, and `max_steps`
        forwards a block may spend beyond `block_length + max_post_steps` (the guard's bound)."""
        stats: tuple[StatName, ...] = ("current_prob",) if self.score == "current" else ()
        return Needs(stats=stats, remasks=True, extra_forwards=self.max_steps)

    def step(self, ctx: StepContext) -> StepResult:
        probs = ctx.stat("current_prob") if self.score == "current" else ctx.cand_probs  # [B, S]
        unsure = ctx.editable & ctx.in_block & (probs < at_step(self.threshold, ctx)[:, None])  # [B, S]
        unsure = unsure & (ctx.step < self.max_steps)[:, None]  # [B, S] the loop guard
        remask = unsure & (masked_ranks(-probs, unsure) < self.max_per_step)  # [B, S] least confident first
        tokens = ctx.tokens.masked_fill(remask, ctx.mask_id)  # [B, S]
        return StepResult(commit=torch.zeros_like(remask), edit=remask, tokens=tokens)
