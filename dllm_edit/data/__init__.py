"""Data the toolkit builds itself (no downloads): verifiable synthetic tasks, the standard library's
Python code, and tokenizers trained in memory."""

from .bpe_tokenizer import build_bpe_tokenizer
from .char_tokenizer import build_char_tokenizer
from .code_corpus import code_examples, parses, stdlib_modules
from .synthetic import FAMILIES, synthetic_examples, synthetic_mixture

__all__ = [
    "FAMILIES",
    "build_bpe_tokenizer",
    "build_char_tokenizer",
    "code_examples",
    "parses",
    "stdlib_modules",
    "synthetic_examples",
    "synthetic_mixture",
]
