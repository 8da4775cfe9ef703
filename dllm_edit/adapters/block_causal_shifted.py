"""Block-causal diffusion LMs with shifted logits (Fast-dLLM v2 style autoregressive conversions).

An autoregressive checkpoint turned into a block-diffusion model can keep its next-token head: the
model attends block-causally (each position sees its own block and every earlier block, as
`BlockCausalAdapter`), and its output at slot `i` is its prediction for slot `i + 1`. Decoding
needs, for every slot `j` of the active block, the prediction *for* `j`:

- inside the block, the output at `j - 1` of the same forward;
- at the block's first slot, the output at the previous block's last slot. That output only sees
  finished blocks, so it is computed once, by the forward that first runs the finished block
  (the first step of the next block, which also writes the finished block into the KV cache), and
  kept for the later steps of the block, which run the active block alone.

Under the block-causal mask the previous block's last output does not depend on the active block,
so keeping it is as exact as the KV cache itself: cached and uncached decoding give the same tokens.
The training form that matches this read is `diffusion_attention="block_diffusion_shifted"`
(`dllm_edit.trainers.diffusion_forward`), where the first slot of a noisy block reads the clean
copy's output at the previous block's last slot.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .block_causal import BlockCausalAdapter, _BlockCausalSession, compiled_forward
from .shifted import previous_position_outputs


class BlockCausalShiftedAdapter(BlockCausalAdapter):
    """Adapter for block-causal dLLMs whose logits at slot `i` predict slot `i + 1`.

    Runs the model exactly as `BlockCausalAdapter` does (absolute blocks, 4-D block-causal mask,
    exact KV cache of finished blocks, optional `torch.compile`) and reads the logits one slot to the
    left: slot `j` of the active block gets the output at `j - 1`; the block's first slot gets the
    previous block's last output, kept from the forward that ran that block (see the module
    docstring). A row's first slot (an empty prompt) reads its own output, as `ShiftedLogitsAdapter`
    does.

    Multi-block editing reads the review copy (the window's blocks re-run seeing the active block)
    the same way: the review copy starts one slot before the window, so the window's first slot
    reads that slot's output under the review's view. Like the block-causal adapter's review copy,
    that view is not one the training forms train.

    Not detected for any `model_type`: checkpoints trained with
    `diffusion_attention="block_diffusion_shifted"` declare it in `config.dllm_edit_adapter`, and other
    models select it with `adapter="block_causal_shifted"`.

    Examples:
        >>> import torch
        >>> from dllm_edit.adapters import BlockCausalShiftedAdapter
        >>> from dllm_edit.layout import build_canvas
        >>> class PositionModel(torch.nn.Module):  # logits[..., 0] = the position id
        ...     def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        ...         return type("Out", (), {"logits": position_ids[..., None].float()})()
        >>> layout, canvas = build_canvas(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), 4, 4, 9, 0)
        >>> session = BlockCausalShiftedAdapter().open(PositionModel(), layout, use_cache=False)
        >>> session.logits(canvas, block=1, window=0)[0, :, 0]  # slots 4..7 read outputs 3..6
        tensor([3., 4., 5., 6.])
        >>> BlockCausalShiftedAdapter.supports_cache, BlockCausalShiftedAdapter.supports_multi_block_edit
        (True, True)
    """

    name = "block_causal_shifted"
    shifted_logits = True
    model_types = ()

    def open(
        self, model: Any, layout: CanvasLayout, use_cache: bool, compile: bool = False
    ) -> _BlockCausalShiftedSession:
        call = compiled_forward(model) if compile else model
        return _BlockCausalShiftedSession(model, layout, use_cache, call)


class _BlockCausalShiftedSession(_BlockCausalSession):
    """The block-causal session, read one slot to the left, keeping the previous block's last output."""

    def __init__(self, model: Any, layout: CanvasLayout, use_cache: bool, call: Any) -> None:
        super().__init__(model, layout, use_cache, call)
        self._boundary_block = -1  # the block whose first slot `_boundary` predicts
        self._boundary: torch.Tensor | None = None  # [R, V] output at that block's previous slot

    def select_rows(self, rows: torch.Tensor) -> None:
        if self._boundary is not None and rows.numel() != self.rows.numel():
            self._boundary = self._boundary[torch.searchsorted(self.rows, rows)]  # [R', V]
        super().select_rows(rows)

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        bl = self.layout.block_length
        block_start, block_end = block * bl, (block + 1) * bl
        lead = 1 if window and block_start - window * bl > 0 else 0  # the slot before the window
        # outputs at slots `first .. block_end - 1` (the active block and, when this forward runs it,
        # the slot before it), then the review copy's
        first = max(block_start - 1, self._cached())
        reviewed = window * bl + lead  # review rows, slots `block_start - reviewed .. block_start - 1`
        main = block_end - first
        outputs = self.run_forward(canvas, block, window, keep=main + reviewed, review_lead=lead)
        outputs, review = outputs[:, :main], outputs[:, main:]  # [R, main, V], [R, reviewed, V]
        if block_start > 0 and first == block_start - 1:
            self._boundary, self._boundary_block = outputs[:, 0], block  # [R, V]
        elif block_start > 0:  # the previous block is cached: its last output was kept
            if self._boundary_block != block or self._boundary is None:
                raise RuntimeError(
                    f"block_causal_shifted: no output of slot {block_start - 1} was kept for block {block} "
                    "(the decoding loop skipped the block's first step)."
                )
            outputs = torch.cat([self._boundary[:, None], outputs], dim=1)  # [R, bl + 1, V]
            first = block_start - 1
        row_first = self.layout.offsets.to(canvas.device)[self.rows]  # [R] each row's own slot 0
        slots = torch.arange(block_start, block_end, device=canvas.device)  # [bl]
        active = previous_position_outputs(outputs, row_first - first, slots - first)  # [R, bl, V]
        if window == 0:
            return active
        review_start = block_start - reviewed
        window_slots = torch.arange(block_start - window * bl, block_start, device=canvas.device)  # [W*bl]
        # a row starting after the window (left padding) has no slot there: clamp its first slot in range
        review_first = (row_first - review_start).clamp(max=reviewed - 1)  # [R]
        earlier = previous_position_outputs(review, review_first, window_slots - review_start)  # [R, W*bl, V]
        return torch.cat([earlier, active], dim=1)  # [R, W*bl + bl, V]
