"""The result of `dllm_edit.generate`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput


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


@dataclass
class EditGenerationOutput(ModelOutput):
    """Output of `dllm_edit.generate` with `return_dict_in_generate=True`.

    Attributes:
        sequences: LongTensor `[B, W + G]`: the input (left padding kept) followed by `G` generated
            tokens; everything after a row's first EOS is `pad_token_id`.
        tokens_per_forward: FloatTensor `[B]`: completion tokens returned (up to and including the
            first EOS) divided by the row's forwards. Edits are not counted as extra tokens: this is
            the paper's throughput measure (output tokens per model call).
        num_forwards: LongTensor `[B]`: model forwards spent on the row (finished rows stop counting).
        num_edits: LongTensor `[B]`: T2T (and multi-block) rewrites made in the row.
        trace: list of `StepRecord`, one per step, when `output_trace=True`.
    """

    sequences: torch.Tensor | None = None
    tokens_per_forward: torch.Tensor | None = None
    num_forwards: torch.Tensor | None = None
    num_edits: torch.Tensor | None = None
    trace: list[StepRecord] | None = None
