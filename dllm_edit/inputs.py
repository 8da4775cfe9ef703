"""Checks of user input, run before any forward."""

from __future__ import annotations

from typing import Any

import torch


def check_input_ids(input_ids: Any, attention_mask: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate `input_ids` / `attention_mask` and return them as tensors (mask defaulting to ones).

    Every row must hold at least one prompt token: a diffusion decoder conditions the whole canvas on
    the prompt, and an empty one (no columns, or a row whose mask is all 0) has no defined first
    block. Prompt with the tokenizer's BOS token (or any start token) for unconditional generation.

    Raises:
        TypeError: not tensors, or `input_ids` not an integer tensor.
        ValueError: wrong rank, no prompt token in some row, shape mismatch, a mask that is not 0/1
            left padding.

    Examples:
        >>> import torch
        >>> ids, mask = check_input_ids(torch.tensor([[0, 5], [4, 5]]), torch.tensor([[0, 1], [1, 1]]))
        >>> mask.tolist()
        [[0, 1], [1, 1]]
        >>> check_input_ids(torch.tensor([[0, 5]]), torch.tensor([[0, 0]]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `attention_mask` rows [0] are all 0: those rows hold no prompt token. ...
    """
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(
            "`input_ids` must be a torch.LongTensor of shape [batch, prompt_len], "
            f"got {type(input_ids).__name__}. "
            "Use tokenizer(..., return_tensors='pt').input_ids."
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool or input_ids.is_complex():
        raise TypeError(f"`input_ids` must be an integer tensor, got dtype {input_ids.dtype}.")
    if input_ids.ndim != 2:
        raise ValueError(
            f"`input_ids` must be 2-D [batch, prompt_len], got shape {tuple(input_ids.shape)}. "
            "For a single prompt use input_ids[None] / unsqueeze(0)."
        )
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError(
            f"`input_ids` has shape {tuple(input_ids.shape)}: it needs at least one row and one prompt "
            "token per row (an empty prompt has no defined first block). Give a prompt, e.g. the "
            "tokenizer's BOS token for unconditional generation."
        )
    input_ids = input_ids.long()
    if attention_mask is None:
        return input_ids, torch.ones_like(input_ids)
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"`attention_mask` must be a torch.Tensor or None, got {type(attention_mask).__name__}."
        )
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"`attention_mask` shape {tuple(attention_mask.shape)} must equal `input_ids` shape "
            f"{tuple(input_ids.shape)}."
        )
    mask = attention_mask.to(device=input_ids.device)
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("`attention_mask` must contain only 0 (padding) and 1 (tokens).")
    mask = mask.long()
    # left padding: once a row has a 1, it has only 1s after it
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ValueError(
            "`attention_mask` must describe left padding (0s then 1s in every row); right padding is not "
            "supported. Set tokenizer.padding_side = 'left'."
        )
    empty = (mask[:, -1] == 0).nonzero().flatten()  # [E] rows whose left-padded mask is all 0
    if empty.numel():
        raise ValueError(
            f"`attention_mask` rows {empty.tolist()} are all 0: those rows hold no prompt token. Drop them, "
            "or give each row at least one token (e.g. the tokenizer's BOS token for unconditional "
            "generation)."
        )
    return input_ids, mask


def check_streamer(streamer: Any, batch: int) -> None:
    if streamer is None:
        return
    if not callable(getattr(streamer, "put", None)) or not callable(getattr(streamer, "end", None)):
        raise TypeError("`streamer` must have put() and end() methods (a transformers BaseStreamer).")
    if batch != 1:
        raise ValueError(
            f"`streamer` supports batch size 1 (as transformers' TextStreamer), got a batch of {batch}. "
            "Pass one prompt at a time, or omit the streamer."
        )


def check_infill(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask_id: int,
    max_new_tokens: int,
    adapter: Any,
    use_cache: bool = False,
) -> bool:
    """Check a run whose prompts may hold the mask token (infilling); True when some prompt does.

    Masks in a prompt are decoded like the completion (docs/how-to/infilling.md), on adapters whose
    attention lets a mask see the text after it (`ModelAdapter.supports_infill`).

    Raises:
        ValueError: `max_new_tokens=0` with no mask in any prompt (nothing to decode), or masks in a
            prompt on an adapter that refuses them (the message says why).

    Examples:
        >>> import torch
        >>> from dllm_edit.adapters import BidirectionalAdapter
        >>> check_infill(torch.tensor([[5, 9, 7]]), torch.ones(1, 3), 9, 0, BidirectionalAdapter())
        True
        >>> check_infill(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), 9, 0, BidirectionalAdapter())
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `max_new_tokens`=0 decodes nothing: no prompt holds the mask token (id 9). ...
    """
    holds = bool(((input_ids == mask_id) & attention_mask.bool()).any())  # one read, before any forward
    if not holds:
        if max_new_tokens == 0:
            raise ValueError(
                f"`max_new_tokens`=0 decodes nothing: no prompt holds the mask token (id {mask_id}). Put "
                "masks where text should be filled in (e.g. the CLI template '<mask:8>'), or set "
                "max_new_tokens >= 1."
            )
        return False
    cache_refusal = getattr(adapter, "infill_cache_refusal", "") if use_cache else ""
    if not getattr(adapter, "supports_infill", False) or cache_refusal:
        why = (
            cache_refusal
            or getattr(adapter, "infill_refusal", "")
            or (
                "it does not declare that its attention lets a mask see the text after it "
                "(ModelAdapter.supports_infill)."
            )
        )
        fix = (
            ""
            if cache_refusal
            else (
                " Use a model with full attention (adapter='bidirectional', 'shifted' or 'masked_lm'), or "
                "give the text before the gap as the prompt and decode the gap as the completion "
                "(max_new_tokens)."
            )
        )
        raise ValueError(
            f"The prompt holds the mask token (id {mask_id}): infilling, which the "
            f"{getattr(adapter, 'name', type(adapter).__name__)!r} adapter refuses: {why}{fix}"
        )
    return True
