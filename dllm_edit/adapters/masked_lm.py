"""Masked language models (BERT, RoBERTa, ModernBERT, ... `*ForMaskedLM`) as diffusion LMs.

A masked LM predicts the token under every `[MASK]` from the whole sequence: that is a one-block
diffusion denoiser. dllm_edit decodes it like any full-attention dLLM, over blocks of the canvas,
with the masked LM's own 2-D padding mask instead of a 4-D one.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from dllm_edit.layout import CanvasLayout

from .base import ModelAdapter, forward_kwargs, output_logits
from .bidirectional import _BidirectionalSession


def embedding_position_offset(model: Any) -> int:
    """First position id of RoBERTa-style embeddings (`padding_idx + 1`), else 0.

    RoBERTa, XLM-RoBERTa, CamemBERT and relatives number positions from `padding_idx + 1` (they
    derive position ids from the input ids with `create_position_ids_from_input_ids`); BERT,
    DistilBERT, ELECTRA and ModernBERT count from 0.
    """
    base = getattr(model, "base_model", model)
    embeddings = getattr(base, "embeddings", None)
    # RoBERTa-style position tables reserve the padding row (their nn.Embedding has a padding_idx);
    # BERT-style ones do not. This reads the same in transformers 4.x and 5.x.
    table = getattr(embeddings, "position_embeddings", None)
    padding_idx = getattr(table, "padding_idx", None)
    return padding_idx + 1 if isinstance(padding_idx, int) else 0


class MaskedLMAdapter(ModelAdapter):
    """Adapter for masked LMs (`BertForMaskedLM`, `RobertaForMaskedLM`, `ModernBertForMaskedLM`, ...).

    Every step runs the whole canvas with full attention and reads the logits where they stand (no
    shift): the model receives `input_ids`, the 2-D padding mask `attention_mask = key_valid` (0/1,
    LongTensor `[R, T]`) and, when its forward has a `position_ids` argument, the canvas position
    ids (counted from each row's first prompt token, plus `padding_idx + 1` for RoBERTa-style
    embeddings), so a left-padded row sees exactly what it sees alone. No KV cache (every position
    sees later blocks); multi-block editing works as with the bidirectional adapter.

    Any `block_length` works. A masked LM was trained to fill masks anywhere, so a single block is
    the natural setting (mask-predict decodes the whole target at once): blocks start right after
    the prompt by default (`block_start="prompt_end"`), so `block_length >= max_new_tokens` makes
    the whole completion one block. Smaller blocks decode left to right. With
    `block_start="absolute"` blocks are aligned to position 0 instead (the first one holds the
    prompt's tail).

    Detected for `model_type` `"bert"`, `"roberta"`, `"xlm-roberta"`, `"modernbert"`,
    `"distilbert"`, `"electra"`, and for any model whose class name ends in `ForMaskedLM`.

    Examples:
        >>> import torch
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> import dllm_edit
        >>> from dllm_edit.adapters import MaskedLMAdapter, resolve_adapter
        >>> model = BertForMaskedLM(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
        ...     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)).eval()
        >>> isinstance(resolve_adapter(model, None), MaskedLMAdapter)
        True
        >>> cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=6, block_length=16,
        ...     mask_token_id=31, eos_token_id=3)
        >>> out = dllm_edit.generate(model, torch.tensor([[2, 5, 6]]), generation_config=cfg)
        >>> out.sequences.shape
        torch.Size([1, 9])
    """

    name = "masked_lm"
    supports_cache = False
    default_use_cache = False
    supports_multi_block_edit = True
    model_types = ("bert", "roberta", "xlm-roberta", "modernbert", "distilbert", "electra")
    default_block_start = "prompt_end"
    supports_infill = True

    def position_offset(self, model: Any) -> int:
        return embedding_position_offset(model)

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> _MaskedLMSession:
        return _MaskedLMSession(model, layout, self.position_offset(model))


class _MaskedLMSession(_BidirectionalSession):
    """The bidirectional session (rows, no cache) with a masked LM's forward arguments."""

    def __init__(self, model: Any, layout: CanvasLayout, position_offset: int) -> None:
        super().__init__(model, layout)
        # only an explicit `position_ids` argument: a masked LM's **kwargs go to its attention layers
        self.pass_positions = "position_ids" in forward_kwargs(model)
        self.padding_mask = layout.key_valid.long()  # [B, T] 1 = the row's canvas, 0 = padding
        self.positions = layout.position_ids + position_offset  # [B, T]
        if not self.pass_positions and bool((layout.offsets > layout.offsets.min()).any()):
            warnings.warn(
                f"{type(model).__name__}.forward takes no `position_ids`, so left-padded rows are read "
                "at shifted positions and may decode differently from the same prompt alone. Batch "
                "prompts of one length (with block_start='absolute': lengths in the same block), or "
                "decode them one at a time.",
                stacklevel=2,
            )

    def forward_canvas(self, canvas: torch.Tensor) -> torch.Tensor:
        rows, lead = self.rows, self.lead  # [R]
        kwargs: dict[str, Any] = {
            "input_ids": canvas[rows, lead:],  # [R, T - lead]
            "attention_mask": self.padding_mask[rows, lead:],  # [R, T - lead]
        }
        if self.pass_positions:
            kwargs["position_ids"] = self.positions[rows, lead:]  # [R, T - lead]
        return output_logits(self.model, self.model(**kwargs))  # [R, T - lead, V]
