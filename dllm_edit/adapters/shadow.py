"""The shadow block: WINO's leave-one-out verification copy of the active block, in the same forward.

The forward runs the canvas (as the bidirectional adapter does: every slot sees every slot of its
row) followed by a *shadow* copy of the active block: `bl` mask tokens carrying the block's
position ids. Attention (figure 2(b) of the WINO paper, `Feng-Hong/WINO-DLLM:LLaDA/decoding.py`):

* no canvas slot sees the shadow block, so the canvas's logits are those of the plain forward;
* shadow slot `j` sees the whole canvas except the block's own slot `j` (leave-one-out), and every
  shadow slot: its distribution is the model's prediction at `j` with the token there hidden.

`ShadowBlockSession.logits` returns the span's logits followed by the shadow block's
(`[R, S + bl, V]`); `split_shadow` turns them into the span's logits and `StepContext.stat("shadow_prob")`
(the shadow's probability of each block slot's current token, read with `edit_candidates` in one
pass, from the raw softmax as the reference). Only adapters registered with `register_shadow_block`
(built in: `"bidirectional"`, without a cache) can run it; `check_shadow_block` refuses the others
before any forward: shifted-logit models (Dream) would need the copy shifted by one slot, cached or
block-causal adapters do not run the whole canvas.

Examples:
    >>> import torch
    >>> from dllm_edit.layout import build_canvas
    >>> layout, canvas = build_canvas(torch.tensor([[5, 6]]), torch.ones(1, 2), 2, 2, 9, 0, "prompt_end")
    >>> allowed, positions = shadow_block_inputs(layout, torch.tensor([0]), lead=0, block=1)
    >>> positions.tolist()  # canvas 0..3, then the shadow copy of block 1 (slots 2, 3)
    [[0, 1, 2, 3, 2, 3]]
    >>> for row in allowed[0].int().tolist():  # queries; the last two are the shadow block
    ...     print(row)
    [1, 1, 1, 1, 0, 0]
    [1, 1, 1, 1, 0, 0]
    [1, 1, 1, 1, 0, 0]
    [1, 1, 1, 1, 0, 0]
    [1, 1, 0, 1, 1, 1]
    [1, 1, 1, 0, 1, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .attention import backend_mask, with_padding_rule
from .base import ModelAdapter, attn_implementation, checked_forward, forward_kwargs, model_dtype
from .bidirectional import BidirectionalAdapter

_SHADOW_ADAPTERS: set[type[ModelAdapter]] = set()


def register_shadow_block(adapter_cls: type[ModelAdapter]) -> type[ModelAdapter]:
    """Declare that an adapter's models can run the shadow-block forward (a full-attention model
    taking a 4-D attention mask and position ids, whose logits at slot `j` predict slot `j`).

    Exact classes: a subclass (e.g. a cached variant) is not covered unless registered itself.
    """
    if not (isinstance(adapter_cls, type) and issubclass(adapter_cls, ModelAdapter)):
        raise TypeError(f"register_shadow_block expects a ModelAdapter subclass, got {adapter_cls!r}.")
    _SHADOW_ADAPTERS.add(adapter_cls)
    return adapter_cls


register_shadow_block(BidirectionalAdapter)


def supports_shadow_block(adapter: ModelAdapter) -> bool:
    """Whether `adapter` can run the shadow block (its class was registered, or it says so with a
    `supports_shadow_block = True` attribute)."""
    return type(adapter) in _SHADOW_ADAPTERS or bool(getattr(adapter, "supports_shadow_block", False))


def check_shadow_block(adapter: ModelAdapter, strategies: Sequence[Any], use_cache: bool) -> bool:
    """Whether the run needs the shadow block; refuses it, before any forward, where it cannot run.

    Raises:
        ValueError: a strategy needs the shadow block and the adapter cannot build it, or a KV
            cache was asked for (the shadow forward runs the whole canvas every step).
    """
    needing = [type(s).__name__ for s in strategies if s.needs.shadow_block]
    if not needing:
        return False
    if not supports_shadow_block(adapter):
        able = sorted(cls.name for cls in _SHADOW_ADAPTERS)
        raise ValueError(
            f"{', '.join(needing)} verifies written tokens with WINO's shadow block (a leave-one-out copy "
            f"of the active block in the same forward), which the {adapter.name!r} adapter cannot build; "
            f"use adapter={able[0]!r} (adapters that can: {able}) or another unmasking rule."
        )
    if use_cache:
        raise ValueError(
            f"{', '.join(needing)} runs the shadow block over the whole canvas at every step, so it takes no "
            "KV cache; set use_cache=False (or None)."
        )
    return True


def shadow_block_inputs(
    layout: CanvasLayout, rows: torch.Tensor, lead: int, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Allowed-matrix and position ids of the forward over canvas slots `lead..T` plus the shadow
    copy of `block`.

    Args:
        layout: the canvas layout.
        rows: LongTensor `[R]`, the rows of the forward.
        lead: first canvas slot of the forward (slots before it are padding in every row).
        block: the active global block.

    Returns:
        `(allowed [R, Q, Q], position_ids [R, Q])` with `Q = T - lead + bl`, the shadow block last.
    """
    bl = layout.block_length
    device = layout.offsets.device
    main = torch.arange(lead, layout.canvas_length, device=device)  # [M]
    copy = torch.arange(block * bl, (block + 1) * bl, device=device)  # [bl]
    slots = torch.cat([main, copy])  # [Q] the canvas slot each query/key stands for
    shadow = torch.cat(
        [torch.zeros_like(main, dtype=torch.bool), torch.ones_like(copy, dtype=torch.bool)]
    )  # [Q]
    visible = ~shadow[None, :] | shadow[:, None]  # [Q, K] canvas keys for all; shadow keys for shadow queries
    own_slot = shadow[:, None] & ~shadow[None, :] & (slots[:, None] == slots[None, :])  # [Q, K]
    visible = visible & ~own_slot  # [Q, K] leave-one-out
    valid = layout.key_valid[rows][:, slots]  # [R, Q] a shadow slot is padding where its block slot is
    self_key = torch.eye(slots.numel(), dtype=torch.bool, device=device)  # [Q, K]
    allowed = with_padding_rule(visible, valid, valid, self_key)  # [R, Q, K]
    return allowed, layout.position_ids[rows][:, slots]  # [R, Q, K], [R, Q]


class ShadowBlockSession:
    """A full-canvas session whose forwards also run the shadow block of the active block.

    `logits(canvas, block, window)` returns `[R, (window + 1) * bl + bl, V]`: the span (window blocks,
    then the active block) followed by the shadow block. Slots before `lead` (padding in every row)
    are left out of the forward, as in the bidirectional adapter.
    """

    def __init__(self, model: Any, layout: CanvasLayout, mask_token_id: int) -> None:
        self.model = checked_forward(model)
        self.layout = layout
        self.mask = int(mask_token_id)
        accepted = forward_kwargs(model)
        self.pass_use_cache = "use_cache" in accepted or "kwargs" in accepted
        self.attn = attn_implementation(model)
        self.dtype = model_dtype(model)
        self.rows = torch.arange(layout.offsets.shape[0], device=layout.offsets.device)  # [R]
        self.lead = layout.lead(torch.arange(layout.offsets.shape[0], device=layout.offsets.device))
        self._inputs: tuple[int, torch.Tensor, torch.Tensor] | None = None  # (block, mask, positions)

    def select_rows(self, rows: torch.Tensor) -> None:
        if rows.numel() != self.rows.numel():
            self.lead = self.layout.lead(rows)  # once per block, not per step
        self.rows = rows
        self._inputs = None

    def invalidate_from(self, block: int) -> None:
        return None

    def _mask_and_positions(self, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._inputs is None or self._inputs[0] != block:  # the same for every step of a block
            allowed, positions = shadow_block_inputs(self.layout, self.rows, self.lead, block)
            self._inputs = (block, backend_mask(allowed, self.attn, self.dtype), positions)
        return self._inputs[1], self._inputs[2]

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        bl = self.layout.block_length
        rows, lead = self.rows, self.lead  # [R]
        mask, positions = self._mask_and_positions(block)  # [R, 1, Q, Q], [R, Q]
        shadow_ids = torch.full(
            (rows.numel(), bl), self.mask, dtype=canvas.dtype, device=canvas.device
        )  # [R, bl]
        kwargs: dict[str, Any] = {
            "input_ids": torch.cat([canvas[rows, lead:], shadow_ids], dim=1),  # [R, Q]
            "attention_mask": mask,
            "position_ids": positions,
        }
        if self.pass_use_cache:
            kwargs["use_cache"] = False
        logits = self.model(**kwargs).logits  # [R, Q, V]
        start = (block - window) * bl - lead
        span = logits[:, start : start + (window + 1) * bl]  # [R, S, V]
        return torch.cat([span, logits[:, -bl:]], dim=1)  # [R, S + bl, V]


def open_shadow_session(
    adapter: ModelAdapter, model: Any, layout: CanvasLayout, use_cache: bool, mask_token_id: int
) -> ShadowBlockSession:
    """The session of a run whose strategies need the shadow block (checked as `check_shadow_block`).

    Raises:
        ValueError: the model's forward takes no `position_ids` (the shadow copy needs the block's).
    """
    if not supports_shadow_block(adapter) or use_cache:
        raise ValueError(
            f"The shadow block needs an adapter registered with register_shadow_block and no KV cache, got "
            f"{adapter.name!r} with use_cache={use_cache}; see check_shadow_block."
        )
    accepted = forward_kwargs(model)
    if "position_ids" not in accepted and "kwargs" not in accepted:
        raise ValueError(
            f"{type(model).__name__}.forward takes no `position_ids`, which the shadow block needs (its copy "
            "of the active block carries the block's positions); use another unmasking rule than WINO."
        )
    return ShadowBlockSession(model, layout, mask_token_id)


def split_shadow(
    logits: torch.Tensor, canvas: torch.Tensor, rows: torch.Tensor, block: int, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A shadow session's logits -> the span's logits and `StepContext.stat("shadow_prob")`.

    Args:
        logits: `[R, S + bl, V]` from `ShadowBlockSession.logits`.
        canvas: LongTensor `[B, T]`, the canvas at the top of the step.
        rows: LongTensor `[R]`, the rows of the forward.
        block: the active global block.
        window: window blocks in the span.

    Returns:
        `(span_logits [R, S, V], shadow_probs [B, S])`: the shadow's probability of each active-block
        slot's token (0 on the window and on rows outside the forward, which no strategy reads).
    """
    from dllm_edit.kernels import edit_candidates

    bl = logits.shape[1] // (window + 2)
    span = logits[:, : (window + 1) * bl]  # [R, S, V]
    tokens = canvas[rows, block * bl : (block + 1) * bl]  # [R, bl]
    _, _, probs = edit_candidates(logits[:, -bl:], tokens)  # [R, bl] raw softmax, one pass
    full = torch.zeros(canvas.shape[0], (window + 1) * bl, dtype=probs.dtype, device=probs.device)  # [B, S]
    full[rows, window * bl :] = probs
    return span, full
