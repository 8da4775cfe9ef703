"""Data the toolkit builds itself (no downloads): verifiable synthetic tasks and a character tokenizer."""

from .char_tokenizer import build_char_tokenizer
from .synthetic import FAMILIES, synthetic_examples, synthetic_mixture

__all__ = ["FAMILIES", "build_char_tokenizer", "synthetic_examples", "synthetic_mixture"]
