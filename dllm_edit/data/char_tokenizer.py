"""A character-level tokenizer built in memory (no download), for small models on synthetic tasks."""

from __future__ import annotations

import string
from typing import Any

DEFAULT_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n"
SPECIAL_TOKENS = {
    "pad_token": "<|pad|>",
    "eos_token": "<|eos|>",
    "mask_token": "<|mask|>",
    "unk_token": "<|unk|>",
}


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> Any:
    """A `PreTrainedTokenizerFast` with one token per character of `alphabet` plus pad/eos/mask/unk.

    Special tokens come first (ids 0-3: pad, eos, mask, unk); decoding joins characters without
    separators; padding is on the left (what batched generation wants).

    Raises:
        ValueError: an empty alphabet or one with repeated characters.

    Examples:
        >>> tok = build_char_tokenizer("0123456789+=")
        >>> ids = tok("12+3=")["input_ids"]
        >>> len(ids), tok.decode(ids)
        (5, '12+3=')
        >>> tok.mask_token_id, tok.eos_token_id
        (2, 1)
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not alphabet or len(set(alphabet)) != len(alphabet):
        raise ValueError("`alphabet` must be a non-empty string of distinct characters.")
    specials = [SPECIAL_TOKENS[k] for k in ("pad_token", "eos_token", "mask_token", "unk_token")]
    vocab = {token: i for i, token in enumerate(specials + list(alphabet))}
    core = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, padding_side="left", **SPECIAL_TOKENS)
