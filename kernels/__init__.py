"""Vocabulary-sized kernels with pure-torch references (installed as `dllm_edit.kernels`)."""

from .candidates import candidates, candidates_reference

__all__ = ["candidates", "candidates_reference"]
