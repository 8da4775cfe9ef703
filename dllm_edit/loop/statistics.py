"""The candidate statistics the active rules declared (`Needs.stats`, computed by the `Proposer`
in the forward step), handed to the rules as one `StepContext`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dllm_edit.strategies import StepContext

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.forward import Proposal
    from dllm_edit.loop.run import DecodeLoop
    from dllm_edit.loop.top_of_step import StepTop


def step_context(run: DecodeLoop, blk: BlockState, top: StepTop, proposal: Proposal) -> StepContext:
    """The rules' view of this step: the span, its masks, the candidates and every declared statistic."""
    cand = proposal.cand
    stats = cand.statistics()  # every statistic the run declared
    if proposal.shadow_probs is not None:
        stats["shadow_prob"] = proposal.shadow_probs
    masked: torch.Tensor = top.masked  # [B, S]
    return StepContext(
        tokens=top.tokens,
        masked=masked,
        editable=blk.generated & ~masked,
        in_block=blk.in_block,
        cand_tokens=cand.token,
        cand_probs=cand.prob,
        step=blk.steps,
        block_index=blk.block_index,
        active=blk.active,
        block_masked=blk.block_masked,
        mask_token_id=run.special.mask,
        positions=blk.positions,
        generator=run.generator,
        stats=stats,
        canvas=proposal.view,
    )
