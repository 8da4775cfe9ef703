"""The proposer: logits of a span -> a candidate token and its probability at every position.

It applies, in order, the adjacent-repeat (stutter) penalty, the user's transformers logits
processors, then the candidate kernel (temperature, top-k / top-p, mask-token suppression). The
kernel never keeps a `[B, S, V]` softmax alive.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.kernels import candidates
from dllm_edit.special_tokens import SpecialTokens
from dllm_edit.strategies import AdjacentRepeatPenalty


class Proposer:
    """Build once per `generate` call; call once per step.

    Args:
        config: the decoding configuration.
        special: resolved special token ids.
        logits_processor: transformers `LogitsProcessorList` (or callable), or None.
        generator: torch.Generator for sampling.
    """

    def __init__(
        self,
        config: EditGenerationConfig,
        special: SpecialTokens,
        logits_processor: Any = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.mask = special.mask
        self.temperature = float(config.temperature or 0.0)
        self.top_k = config.top_k
        self.top_p = config.top_p
        self.generator = generator
        self.suppress = (special.mask,) if config.suppress_mask_token else ()
        self.stutter = AdjacentRepeatPenalty(config.repeat_penalty) if config.repeat_penalty > 0 else None
        self.processors = logits_processor

    def __call__(
        self, logits: torch.Tensor, canvas: torch.Tensor, span: slice
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidates for the span.

        Args:
            logits: `[B, S, V]` logits of the span.
            canvas: LongTensor `[B, T]`, the canvas at the top of the step.
            span: the canvas slots of the span.

        Returns:
            `(tokens, probs)`: LongTensor `[B, S]` and FloatTensor `[B, S]`.
        """
        if self.stutter is not None:
            tokens = canvas[:, span]  # [B, S]
            left = (
                canvas[:, span.start - 1] if span.start > 0 else torch.full_like(tokens[:, 0], self.mask)
            )  # [B]
            logits = self.stutter(logits, tokens, left, self.mask)  # [B, S, V]
        if self.processors is not None:
            batch, width, vocab = logits.shape
            ids = canvas[:, : span.stop].repeat_interleave(width, dim=0)  # [B*S, stop]
            logits = self.processors(ids, logits.reshape(batch * width, vocab)).reshape(batch, width, vocab)
        return candidates(
            logits,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            generator=self.generator,
            suppress_ids=self.suppress,
        )  # [B, S], [B, S]
