"""The result of `dllm_edit.generate`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput

from dllm_edit.special_tokens import completion_lengths


def cut_after_first_eos(
    completion: torch.Tensor, eos: torch.Tensor, pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a completion ends: after its first EOS, inclusive (`special_tokens.completion_lengths`).

    Args:
        completion: LongTensor `[B, G]` of generated tokens.
        eos: LongTensor `[E]` of EOS ids (empty: no cut).
        pad: the id written after the first EOS.

    Returns:
        `(completion, lengths)`: `[B, G]` with every token after the first EOS set to `pad`, and
        LongTensor `[B]` of tokens up to and including the first EOS (`G` for a row without one).

    Examples:
        >>> import torch
        >>> cut_after_first_eos(torch.tensor([[4, 2, 5, 2]]), torch.tensor([2]), pad=0)
        (tensor([[4, 2, 0, 0]]), tensor([2]))
    """
    if completion.shape[1] == 0:  # infilling only (max_new_tokens=0): nothing to cut
        return completion, torch.zeros(completion.shape[0], dtype=torch.long, device=completion.device)
    before, has_eos = completion_lengths(completion, eos)  # [B], [B] tokens before the first EOS
    lengths = before + has_eos.long()  # [B] the EOS itself is kept
    kept = torch.arange(completion.shape[1], device=completion.device) < lengths[:, None]  # [B, G]
    return completion.masked_fill(~kept, pad), lengths


@dataclass(frozen=True)
class StepRecord:
    """One decoding step, recorded when `output_trace=True` (tensors on the CPU).

    Attributes:
        block: global block index.
        span_start: canvas slot of the first span position (the window, then the active block).
        active: BoolTensor `[B]`, rows that ran this step.
        masked: BoolTensor `[B, S]`, masked positions at the top of the step.
        commit: BoolTensor `[B, S]`, positions unmasked (Γ).
        edit: BoolTensor `[B, S]`, positions edited (Δ, including multi-block edits).
        before: LongTensor `[B, S]`, tokens at the top of the step.
        after: LongTensor `[B, S]`, tokens after the update.
        probs: FloatTensor `[B, S]`, candidate probabilities.
        filled: BoolTensor `[B, T]` over the whole canvas, the slots a loop action wrote after the
            rules' update at this step (a finish filling the row's masks, `eos_fill`), inside the
            span or outside it; None when no action wrote a slot.
        filled_tokens: LongTensor `[B, T]`, the canvas after those actions (read where `filled`).
    """

    block: int
    span_start: int
    active: torch.Tensor
    masked: torch.Tensor
    commit: torch.Tensor
    edit: torch.Tensor
    before: torch.Tensor
    after: torch.Tensor
    probs: torch.Tensor
    filled: torch.Tensor | None = None
    filled_tokens: torch.Tensor | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ints, bools and floats in nested lists (`[B][S]`; `[B][T]` for the
        slots loop actions filled, when any)."""
        out: dict[str, Any] = {"block": self.block, "span_start": self.span_start}
        for name in ("active", "masked", "commit", "edit", "before", "after", "probs"):
            out[name] = getattr(self, name).tolist()
        if self.filled is not None and self.filled_tokens is not None:
            out["filled"], out["filled_tokens"] = self.filled.tolist(), self.filled_tokens.tolist()
        return out


@dataclass
class EditGenerationOutput(ModelOutput):
    """Output of `dllm_edit.generate` with `return_dict_in_generate=True`.

    Attributes:
        sequences: LongTensor `[B, W + G]`: the input (left padding kept) followed by `G` generated
            tokens; everything after a row's first EOS is `pad_token_id`.
        tokens_per_forward: FloatTensor `[B]`: the tokens the decoder wrote for the row (the
            completion tokens returned, up to and including the first EOS, plus the prompt's masks it
            filled when infilling) divided by the row's forwards. Edits are not counted as extra
            tokens: this is the paper's throughput measure (output tokens per model call).
        num_forwards: LongTensor `[B]`: model forwards spent on the row (finished rows stop counting).
        num_edits: LongTensor `[B]`: T2T (and multi-block) rewrites made in the row.
        completion_lengths: LongTensor `[B]`: tokens of the row's completion up to and including its
            first EOS (all `G` when it has none): `sequences[i, W : W + completion_lengths[i]]` is
            the completion; everything after it is padding.
        trace: list of `StepRecord`, one per step, when `output_trace=True`.
        completion_start: LongTensor `[B]` with the trace: the canvas slot of each row's first
            completion token (the trace's `span_start` and `filled` are canvas slots; a prompt that
            does not end on a block boundary, or left padding, puts the completion after slot `W`).
    """

    sequences: torch.Tensor | None = None
    tokens_per_forward: torch.Tensor | None = None
    num_forwards: torch.Tensor | None = None
    num_edits: torch.Tensor | None = None
    completion_lengths: torch.Tensor | None = None
    trace: list[StepRecord] | None = None
    completion_start: torch.Tensor | None = None

    def completions(self, prompt_width: int) -> list[list[int]]:
        """Each row's completion ids, up to and including its first EOS (`[B]` lists).

        Args:
            prompt_width: `W`, the width of the (left-padded) `input_ids` passed to `generate`.

        Raises:
            ValueError: when the output has no `sequences` / `completion_lengths`.
        """
        if self.sequences is None or self.completion_lengths is None:
            raise ValueError("This output has no sequences / completion_lengths (decode with generate()).")
        rows = self.sequences[:, prompt_width:].tolist()
        return [row[:n] for row, n in zip(rows, self.completion_lengths.tolist(), strict=True)]

    def trace_to_json(self, path: str | None = None) -> str:
        """The trace as JSON (one object per step, plus per-row totals); written to `path` if given.

        The raw records, every row, canvas slots. For a file to keep, replay or share, with a format
        version, completion positions, token texts and a checking loader, use
        `dllm_edit.replay.trace_document` / `save_trace` (`dllm-edit generate --trace`).

        Raises:
            ValueError: when the output has no trace (decode with `output_trace=True`).
        """
        if self.trace is None:
            raise ValueError("This output has no trace: decode with output_trace=True.")
        forwards = self.num_forwards.tolist() if self.num_forwards is not None else None
        edits = self.num_edits.tolist() if self.num_edits is not None else None
        payload = {"num_forwards": forwards, "num_edits": edits, "steps": [r.to_dict() for r in self.trace]}
        text = json.dumps(payload)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text
