"""Stutter guard for aggressive drafting: an adjacent-repeat penalty on the logits.

At low unmask thresholds (S mode) neighbouring positions are filled in the same step without
seeing each other, which produces the "n-gram repetition" artifact the LLaDA2.1 paper reports.
This penalty lowers, at position `i`, the logit of the token currently written at `i - 1` by
`penalty_lambda` (the `penalty_lambda` of SGLang's JointThreshold decoder; its docs suggest about 3).
Positions whose left neighbour is still masked are not penalised. Off by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AdjacentRepeatPenalty:
    """Subtract `penalty_lambda` from the logit of the left neighbour's token.

    Args:
        penalty_lambda: the amount subtracted (>= 0; 0 disables).

    Examples:
        >>> import torch
        >>> pen = AdjacentRepeatPenalty(3.0)
        >>> logits = torch.zeros(1, 2, 4)
        >>> out = pen(logits, tokens=torch.tensor([[2, 9]]), left=torch.tensor([1]), mask_token_id=9)
        >>> out[0, :, 1].tolist(), out[0, :, 2].tolist()
        ([-3.0, 0.0], [0.0, -3.0])
    """

    penalty_lambda: float = 3.0

    def __post_init__(self) -> None:
        if not isinstance(self.penalty_lambda, (int, float)) or self.penalty_lambda < 0:
            raise ValueError(f"`repeat_penalty` must be a float >= 0, got {self.penalty_lambda!r}.")

    def __call__(
        self, logits: torch.Tensor, tokens: torch.Tensor, left: torch.Tensor, mask_token_id: int
    ) -> torch.Tensor:
        """Return penalised logits (a new tensor).

        Args:
            logits: `[B, S, V]` logits of the span.
            tokens: LongTensor `[B, S]`, the span's current tokens.
            left: LongTensor `[B]`, the token just before the span.
            mask_token_id: the mask token id (masked neighbours are not penalised).
        """
        prev = torch.cat([left[:, None], tokens[:, :-1]], dim=1)  # [B, S]
        valid = prev != mask_token_id  # [B, S]
        vocab = logits.shape[-1]
        prev_clamped = prev.clamp(0, vocab - 1)  # [B, S]
        delta = torch.zeros_like(logits)  # [B, S, V]
        delta.scatter_(
            -1, prev_clamped[..., None], (valid * float(self.penalty_lambda)).to(logits.dtype)[..., None]
        )
        return logits - delta
