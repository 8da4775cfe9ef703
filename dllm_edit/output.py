"""The result of `dllm_edit.generate`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput


@dataclass
class EditGenerationOutput(ModelOutput):
    """Output of :func:`dllm_edit.generate` with `return_dict_in_generate=True`.

    Attributes:
        sequences: LongTensor `[B, W + G]`: the input (left padding kept) followed by `G` generated
            tokens; everything after a row's first EOS is `pad_token_id`.
        tokens_per_forward: FloatTensor `[B]`: completion tokens returned (up to and including the
            first EOS) divided by the row's forwards. Edits are not counted as extra tokens: this is
            the paper's throughput measure (output tokens per model call).
        num_forwards: LongTensor `[B]`: model forwards spent on the row (finished rows stop counting).
        num_edits: LongTensor `[B]`: T2T (and multi-block) rewrites made in the row.
    """

    sequences: torch.Tensor | None = None
    tokens_per_forward: torch.Tensor | None = None
    num_forwards: torch.Tensor | None = None
    num_edits: torch.Tensor | None = None
