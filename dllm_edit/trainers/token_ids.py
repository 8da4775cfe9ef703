"""The token ids the trainers read from a model, its tokenizer and the config (the mask id, the EOS
responses end with, the vocabulary size), and the EOS extension of a tokenized response.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.special_tokens import find_token_id

from .diffusion_forward import unwrap
from .eos_extension import extend_to_block_end


def resolve_mask_token_id(args: Any, tokenizer: Any, model: Any) -> int:
    """The mask token id, looked up as decoding looks it up (`dllm_edit.special_tokens.token_id_sources`):
    `args.mask_token_id`, the model's generation config, the tokenizer, the model config; else ValueError."""
    found = find_token_id("mask_token_id", unwrap(model), args, tokenizer)
    if found is not None:
        return int(found)
    raise ValueError(
        "The trainer needs a mask token, and none was found: the config's mask_token_id is unset, and so are "
        "the model's generation_config.mask_token_id, the tokenizer's mask_token and the model config's "
        "mask_token_id. Add one, e.g. `tokenizer.add_special_tokens({'mask_token': '<|mask|>'})` then "
        "`model.resize_token_embeddings(len(tokenizer))`, or pass `mask_token_id=...` in the config."
    )


def training_eos_id(args: Any, tokenizer: Any) -> int | None:
    """The EOS id responses end with: `args.eos_token` (TRL's field) if set, else the tokenizer's."""
    if getattr(args, "eos_token", None) is not None:
        return int(tokenizer.convert_tokens_to_ids(args.eos_token))
    eos = getattr(tokenizer, "eos_token_id", None)
    return None if eos is None else int(eos)


def _vocab_size(model: Any) -> int:
    head = unwrap(model).get_output_embeddings()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    return int(unwrap(model).config.get_text_config().vocab_size)


def extend_response_with_eos(example: dict[str, Any], eos_token_id: int, block_length: int) -> dict[str, Any]:
    """Append supervised EOS tokens up to the end of the block holding the last response token
    (`dllm_edit.trainers.eos_extension.extend_to_block_end`, the rule EBPO's rollouts use too).

    Examples:
        >>> extend_response_with_eos({"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, 1, 4)
        {'input_ids': [5, 6, 7, 1], 'labels': [-100, 6, 7, 1]}
    """
    ids, labels = list(example["input_ids"]), list(example["labels"])
    finished = bool(labels) and labels[-1] != -100  # a response ends the example
    extended, tail, end = extend_to_block_end(
        torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([finished]), eos_token_id, block_length
    )  # [1, W], [1, W], [1]
    width = int(end[0])
    labels += [eos_token_id] * int(tail[0, :width].sum())
    return {"input_ids": extended[0, :width].tolist(), "labels": labels}
