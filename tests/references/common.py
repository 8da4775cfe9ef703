"""What the ports share: a full-attention forward on a tiny causal-LM architecture."""

from __future__ import annotations

import torch


def full_attention_logits(model, x: torch.Tensor) -> torch.Tensor:
    """`model(x).logits` with every position seeing every position (a bidirectional model's forward).

    The tiny test models are transformers causal LMs: a 4-D all-zero additive mask and position ids
    `0..L-1` make their forward the one a bidirectional model (LLaDA, Dream) runs on an unpadded
    canvas, as `reference_decoder.reference_generate_llada1` does.
    """
    batch, length = x.shape
    return model(
        input_ids=x,
        attention_mask=torch.zeros(1, 1, length, length),
        position_ids=torch.arange(length)[None].expand(batch, length),
    ).logits
