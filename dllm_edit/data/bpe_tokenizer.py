"""A byte-level BPE tokenizer trained in memory (no download), for small models on code and text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .char_tokenizer import SPECIAL_TOKENS


def build_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2) -> Any:
    """Train a byte-level BPE `PreTrainedTokenizerFast` on `texts`.

    Special tokens come first (ids 0-3: pad, eos, mask, unk), as in `build_char_tokenizer`. Byte-level
    BPE never needs the unknown token: every string encodes. Digits and brackets are never merged.
    Training is deterministic for the same texts in the same order. Padding is on the left.

    Args:
        texts: the training corpus.
        vocab_size: vocabulary size, special tokens and the 256 byte tokens included.
        min_frequency: merges seen fewer times are not learned.

    Raises:
        ValueError: `vocab_size` too small to hold the special and byte tokens.

    Examples:
        >>> tok = build_bpe_tokenizer(["def f(x):\\n    return x\\n"] * 20, vocab_size=300)
        >>> text = "def f(x):\\n    return x\\n"
        >>> tok.decode(tok(text)["input_ids"]) == text, tok.mask_token_id
        (True, 2)
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [SPECIAL_TOKENS[k] for k in ("pad_token", "eos_token", "mask_token", "unk_token")]
    if vocab_size < 256 + len(specials):
        raise ValueError(
            f"`vocab_size` must be at least {256 + len(specials)} (bytes + specials), got {vocab_size}."
        )
    core = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    # Digits and brackets stay single tokens: arithmetic, sorting and bracket matching are then done
    # symbol by symbol, as the synthetic tasks need; everything else merges as usual.
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Split(Regex(r"[()\[\]{}]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, padding_side="left", **SPECIAL_TOKENS)
