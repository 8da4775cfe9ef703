"""Infilling: fill masks placed anywhere in a prompt (templates, fill-in-the-middle).

A prompt may hold the model's mask token anywhere; `dllm_edit.generate` decodes those masks as it
decodes the completion (docs/how-to/infilling.md says in which blocks), on adapters whose attention
lets a mask see the text after it. This module adds the typing side: a template syntax,
`<mask:N>` for `N` masks (`parse_template`), and `infill`, which takes a template, a list of them or
ids holding mask ids, and decodes with `max_new_tokens=0` unless told otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.generation import generate, resolve_config
from dllm_edit.output import EditGenerationOutput
from dllm_edit.special_tokens import resolve_special_tokens

#: `<mask:N>`: `N` mask tokens.
MASK_TAG = re.compile(r"<mask:(\d+)>")
_ANY_TAG = re.compile(r"<mask\b[^>]*>")
_MAX_MASKS = 4096


def parse_template(template: str, tokenizer: Any, mask_token_id: int) -> list[int]:
    """The ids of a template whose `<mask:N>` tags stand for `N` mask tokens each.

    The text between tags is encoded with `tokenizer` without special tokens, piece by piece (a
    tag's masks never merge with the text beside it).

    Args:
        template: text with at least one `<mask:N>` tag, `1 <= N <= 4096`.
        tokenizer: a transformers tokenizer (anything callable as `tokenizer(text,
            add_special_tokens=False)` returning `input_ids`).
        mask_token_id: the model's mask token.

    Returns:
        The ids, a list of ints.

    Raises:
        TypeError: `template` is not a str.
        ValueError: no `<mask:N>` tag, a malformed tag (`<mask>`, `<mask:x>`), or `N` out of range.

    Examples:
        >>> class Chars:  # a tokenizer of one id per character
        ...     def __call__(self, text, add_special_tokens=False):
        ...         return {"input_ids": [ord(c) for c in text]}
        >>> parse_template("a<mask:2>b", Chars(), mask_token_id=0)
        [97, 0, 0, 98]
        >>> parse_template("no gap", Chars(), 0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `template` holds no <mask:N> tag, so there is nothing to fill in: ...
    """
    if not isinstance(template, str):
        raise TypeError(f"`template` must be a str, got {type(template).__name__}.")
    tags = list(MASK_TAG.finditer(template))
    bad = [m.group(0) for m in _ANY_TAG.finditer(template) if not MASK_TAG.fullmatch(m.group(0))]
    if bad:
        raise ValueError(
            f"`template` holds the malformed mask tag {bad[0]!r}: a gap is written <mask:N>, N the "
            "number of tokens to fill (e.g. <mask:8>)."
        )
    if not tags:
        raise ValueError(
            f"`template` holds no <mask:N> tag, so there is nothing to fill in: {template[:60]!r}. Mark "
            "each gap with <mask:N>, N the number of tokens to fill (e.g. 'def add(a, b):\\n    "
            "<mask:8>\\n'), or continue the text with `generate` instead."
        )
    ids: list[int] = []
    last = 0
    for tag in tags:
        count = int(tag.group(1))
        if not 1 <= count <= _MAX_MASKS:
            raise ValueError(
                f"`template` tag {tag.group(0)!r}: N must be in [1, {_MAX_MASKS}], got {count}. Write "
                "<mask:N> with N the number of tokens to fill."
            )
        ids += _encode(tokenizer, template[last : tag.start()]) + [mask_token_id] * count
        last = tag.end()
    return ids + _encode(tokenizer, template[last:])


def _encode(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def infill(
    model: Any,
    inputs: str | list[str] | torch.Tensor,
    tokenizer: Any = None,
    *,
    attention_mask: torch.Tensor | None = None,
    max_new_tokens: int = 0,
    generation_config: EditGenerationConfig | None = None,
    **kwargs: Any,
) -> EditGenerationOutput:
    """Fill the masks of templates (or of ids holding mask ids), optionally continuing after them.

    Every mask is decoded by the configured algorithm, with editing of the tokens the decoder wrote
    (never of the template's own tokens), in the blocks that hold them (docs/how-to/infilling.md).

    Args:
        model: a diffusion LM whose adapter attends to the whole canvas (`"bidirectional"`,
            `"shifted"`, `"masked_lm"`); block-causal models are refused, with the reason.
        inputs: a template (`"def add(a, b):\\n    <mask:8>\\n"`), a list of templates (left-padded
            into one batch), or a LongTensor `[B, W]` of ids holding the mask id.
        tokenizer: encodes templates (needed for str inputs) and is a source of the mask / EOS / pad ids.
        attention_mask: `[B, W]` for tensor inputs (None: no padding).
        max_new_tokens: tokens to generate after the template (0: fill its masks only).
        generation_config: the decoding config (None: the model's, as `generate`).
        **kwargs: passed to `dllm_edit.generate` (`adapter=`, `generator=`, config fields).

    Returns:
        `EditGenerationOutput`: `sequences` `[B, W + max_new_tokens]` holds the templates with
        their masks filled.

    Raises:
        ValueError / TypeError: no mask in some input, a bad template, str inputs without a tokenizer,
            or what `generate` refuses; all before any forward.

    Examples:
        >>> import torch, dllm_edit
        >>> from dllm_edit.adapters.shifted import ShiftedLogitsAdapter
        >>> class Echo(torch.nn.Module):  # predicts token id (position + 1) everywhere
        ...     def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        ...         return type("O", (), {"logits": torch.nn.functional.one_hot(
        ...             (position_ids + 1) % 9, 10).float() * 9})()
        >>> cfg = dllm_edit.EditGenerationConfig(block_length=4, mask_token_id=9, eos_token_id=0)
        >>> out = infill(Echo(), torch.tensor([[5, 9, 9, 7]]), generation_config=cfg, adapter="bidirectional")
        >>> out.sequences.tolist()
        [[5, 2, 3, 7]]
    """
    config = resolve_config(model, generation_config, {"max_new_tokens": max_new_tokens, **_fields(kwargs)})
    if isinstance(inputs, (str, list)):
        if tokenizer is None:
            raise TypeError(
                "`tokenizer` is needed to encode templates (str inputs); pass the model's tokenizer, or "
                "pass ids holding the mask id as a LongTensor."
            )
        mask_id = resolve_special_tokens(model, config, tokenizer).mask
        templates = [inputs] if isinstance(inputs, str) else inputs
        if not templates or not all(isinstance(t, str) for t in templates):
            raise TypeError("`inputs` must be a template str, a non-empty list of them, or a LongTensor.")
        rows = [parse_template(t, tokenizer, mask_id) for t in templates]
        width = max(len(r) for r in rows)
        pad = resolve_special_tokens(model, config, tokenizer).pad
        inputs = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)  # [B, W]
        attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])  # [B, W]
        device = getattr(model, "device", None)
        if isinstance(device, torch.device):
            inputs, attention_mask = inputs.to(device), attention_mask.to(device)
    elif isinstance(inputs, torch.Tensor):
        mask_id = resolve_special_tokens(model, config, tokenizer).mask
        valid = torch.ones_like(inputs, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        held = ((inputs == mask_id) & valid).any(-1) if inputs.ndim == 2 else None  # [B]
        if held is not None and not bool(held.all()):
            rows_without = (~held).nonzero().flatten().tolist()
            raise ValueError(
                f"`inputs` rows {rows_without} hold no mask token (id {mask_id}): infill fills masks. Put "
                "the mask id where text should be filled in, or use dllm_edit.generate to continue text."
            )
    else:
        raise TypeError(
            f"`inputs` must be a template str, a list of them, or a LongTensor, got {type(inputs).__name__}."
        )
    out = generate(
        model,
        inputs,
        attention_mask=attention_mask,
        generation_config=config,
        tokenizer=tokenizer,
        return_dict_in_generate=True,
        **{k: v for k, v in kwargs.items() if k in _GENERATE_ARGS},
    )
    assert isinstance(out, EditGenerationOutput)  # return_dict_in_generate=True
    return out


_GENERATE_ARGS = ("adapter", "streamer", "logits_processor", "generator")


def _fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The config fields among `infill`'s keyword arguments (the rest go to `generate`)."""
    return {k: v for k, v in kwargs.items() if k not in _GENERATE_ARGS}
