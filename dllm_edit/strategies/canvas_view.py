"""`CanvasView`: the current forward over the whole completion, for rules that read past the span.

A strategy whose `Needs` has `whole_canvas=True` gets, in `StepContext.canvas`, the tokens, masks
and candidates of every slot from the first generated block to the canvas's end (the span
included), all from the step's one forward. Prophet's authors' regime reads its answer region
there, and a row it ends (`StepResult.finish`) is filled from these candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CanvasView:
    """Read-only view of the step's forward over the whole completion, batched over rows.

    Attributes:
        start: the canvas slot of the view's first slot (the first generated block's start).
        block_length: the block length (the view is a whole number of blocks).
        tokens: LongTensor `[B, C]`, the tokens at the top of the step.
        masked: BoolTensor `[B, C]`, slots holding the mask token.
        generated: BoolTensor `[B, C]`, completion slots (not prompt, not padding).
        positions: LongTensor `[B, C]`, each slot's offset from the row's first completion slot.
        cand_tokens: LongTensor `[B, C]`, the proposed token at every slot.
        cand_probs: FloatTensor `[B, C]`, its probability.
        stats: the declared candidate statistics (`Needs.stats`), FloatTensors `[B, C]` by name.

    Examples:
        >>> import torch
        >>> view = CanvasView(start=4, block_length=2, tokens=torch.tensor([[9, 9, 3, 9]]),
        ...     masked=torch.tensor([[True, True, False, True]]),
        ...     generated=torch.ones(1, 4, dtype=torch.bool),
        ...     positions=torch.arange(4)[None], cand_tokens=torch.tensor([[1, 2, 3, 4]]),
        ...     cand_probs=torch.full((1, 4), 0.5), stats={"logit_gap": torch.ones(1, 4)})
        >>> view.row_blocks().tolist()  # generated blocks of each row
        [2]
        >>> view.stat("logit_gap").shape
        torch.Size([1, 4])
    """

    start: int
    block_length: int
    tokens: torch.Tensor
    masked: torch.Tensor
    generated: torch.Tensor
    positions: torch.Tensor
    cand_tokens: torch.Tensor
    cand_probs: torch.Tensor
    stats: Mapping[str, torch.Tensor]

    def stat(self, name: str) -> torch.Tensor:
        """FloatTensor `[B, C]`: the declared statistic `name` over the view.

        Raises:
            LookupError: `name` was not declared in the strategy's `Needs.stats`.
        """
        try:
            return self.stats[name]
        except KeyError:
            raise LookupError(
                f"CanvasView holds no {name!r}: declare it in the strategy's Needs (stats={{{name!r}}})."
            ) from None

    def row_blocks(self) -> torch.Tensor:
        """LongTensor `[B]`: the blocks of the view that hold part of each row's completion."""
        batch, width = self.generated.shape
        blocks = self.generated.view(batch, width // self.block_length, self.block_length)  # [B, n, bl]
        return blocks.any(-1).sum(-1)  # [B]


__all__ = ["CanvasView"]
