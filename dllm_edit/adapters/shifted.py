"""Shifted-logits diffusion LMs (Dream style): full attention, the logits at `i` predict token `i + 1`.

Dream was initialised from an autoregressive model and kept its output convention: the logits the
model returns at position `i` are its prediction for the token at `i + 1`. Decoding needs, for every
canvas slot `j`, the prediction *for* `j`, which is the model's output at `j - 1`. The model is
otherwise run like a fully bidirectional dLLM, so this adapter reuses the bidirectional session and
only re-indexes its output.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .base import ModelAdapter, checked_forward
from .bidirectional import _BidirectionalSession


def previous_position_outputs(
    outputs: torch.Tensor, first: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """The shifted read, shared by decoding and training: for each row `r` and each position `j` in
    `positions`, the output at `j - 1`, or at `first[r]` where `j - 1` lies before the row's first
    position (that position reads its own output, as Dream's reference does).

    Args:
        outputs: `[R, L, D]`, one row of logits (or hidden states) per position.
        first: LongTensor `[R]`, each row's first position (indices into `outputs`).
        positions: LongTensor `[S]`, the positions to read predictions for.

    Returns:
        `[R, S, D]`.

    Examples:
        >>> out = torch.arange(4.0).view(1, 4, 1)
        >>> previous_position_outputs(out, torch.tensor([1]), torch.arange(4))[0, :, 0]
        tensor([1., 1., 1., 2.])
    """
    source = torch.maximum(positions[None, :] - 1, first[:, None])  # [R, S] the output read
    index = source[:, :, None].expand(-1, -1, outputs.shape[-1])  # [R, S, D] (a view)
    return outputs.gather(1, index)  # [R, S, D]


class ShiftedLogitsAdapter(ModelAdapter):
    """Adapter for full-attention dLLMs whose logits at position `i` predict token `i + 1` (Dream).

    Every step runs the whole canvas, exactly as `BidirectionalAdapter` does (4-D mask over the
    non-padding slots, absolute position ids, no KV cache, multi-block editing for free), and the
    logits of canvas slot `j` are the model's output at slot `j - 1`.

    The edge: a row's first slot (its own position 0) has no slot before it. There the slot's own
    output is used, as Dream's reference `generate` does (`cat([logits[:, :1], logits[:, :-1]])`).
    Decoding never reads it in practice (position 0 is always prompt unless the prompt is empty),
    and the rule is applied per row, at the row's own first slot, so a left-padded row reads the
    same logits as the row decoded alone (never a padding slot's output).

    Blocks start right after the prompt by default (`block_start="prompt_end"`): Dream's reference
    `diffusion_generate` decodes the completion after the prompt (one block of `max_new_tokens`),
    and its semi-autoregressive variants place blocks from the end of the prompt, as LLaDA-1 does.

    Detected for `model_type` `"dream"` (matched case-insensitively: Dream's checkpoints say
    `"Dream"`).

    Examples:
        >>> import torch
        >>> from dllm_edit.adapters import ShiftedLogitsAdapter
        >>> from dllm_edit.layout import build_canvas
        >>> class PositionModel(torch.nn.Module):  # logits[..., 0] = the position id
        ...     def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        ...         return type("Out", (), {"logits": position_ids[..., None].float()})()
        >>> layout, canvas = build_canvas(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), 4, 4, 9, 0)
        >>> session = ShiftedLogitsAdapter().open(PositionModel(), layout, use_cache=False)
        >>> session.logits(canvas, block=1, window=0)[0, :, 0]  # slots 4..7 read outputs 3..6
        tensor([3., 4., 5., 6.])
        >>> ShiftedLogitsAdapter.supports_cache, ShiftedLogitsAdapter.supports_multi_block_edit
        (False, True)
    """

    name = "shifted"
    shifted_logits = True
    supports_cache = False
    default_use_cache = False
    supports_multi_block_edit = True
    default_block_start = "prompt_end"
    supports_infill = True
    model_types = ("dream",)

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _ShiftedSession:
        return _ShiftedSession(model, layout)


class _ShiftedSession(_BidirectionalSession):
    """The bidirectional session, read one slot to the left."""

    def __init__(self, model: Any, layout: CanvasLayout) -> None:
        super().__init__(model, layout)
        # the parent calls `self.model(**kwargs).logits`: route it through the `.logits` check
        self.model = checked_forward(model)

    def logits(self, canvas: torch.Tensor, block: int, window: int, ahead: int = 0) -> torch.Tensor:
        bl = self.layout.block_length
        full = self.forward_canvas(canvas)  # [R, T - lead, V], slots lead..T
        slots = torch.arange((block - window) * bl, (block + 1 + ahead) * bl, device=canvas.device)  # [S]
        first_slot = self.layout.offsets.to(canvas.device)[self.rows]  # [R] each row's own slot 0
        return previous_position_outputs(full, first_slot - self.lead, slots - self.lead)  # [R, S, V]
