"""Backend choice shared by the kernel dispatchers: Triton or the chunked torch path.

Nothing here imports triton: it is an optional dependency (the `kernels` extra) and importing
`dllm_edit.kernels` must stay cheap and work without it. The Triton modules are imported lazily,
on the first call that runs a Triton kernel.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from typing import Literal

import torch

Backend = Literal["auto", "triton", "torch"]
BACKENDS = ("auto", "triton", "torch")

#: Set to 1 (or true / yes / on) to force the torch path everywhere, even with `backend="triton"`.
DISABLE_ENV = "DLLM_EDIT_DISABLE_TRITON"
#: Triton's interpreter switch; it is read by triton when it is imported.
INTERPRET_ENV = "TRITON_INTERPRET"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def triton_disabled() -> bool:
    """True when `DLLM_EDIT_DISABLE_TRITON` is set to a true value (read at every call)."""
    return _flag(DISABLE_ENV)


@lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when triton can be imported (found on the path; not imported here)."""
    return importlib.util.find_spec("triton") is not None


def use_triton(tensor: torch.Tensor, backend: str, *, op: str) -> bool:
    """Whether the dispatcher of `op` runs its Triton kernel on `tensor`.

    * `"torch"`, or `DLLM_EDIT_DISABLE_TRITON` set: never.
    * `"auto"`: on CUDA tensors when triton is importable; the chunked torch path otherwise.
    * `"triton"`: always, or an error saying why it cannot: triton missing, or a CPU tensor without
      `TRITON_INTERPRET=1` (Triton runs CPU tensors only in its interpreter, which must be switched
      on before triton is first imported).
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"{op}: backend must be one of {BACKENDS}, got {backend!r}; pass 'auto' to let it choose"
        )
    if backend == "torch" or triton_disabled():
        return False
    if backend == "auto":
        return tensor.is_cuda and triton_available()
    if not triton_available():
        raise ImportError(
            f"{op}: backend='triton' needs triton, which is not installed; "
            "install the extra `pip install dllm-edit[kernels]` or pass backend='auto'"
        )
    if not tensor.is_cuda and not _flag(INTERPRET_ENV):
        raise ValueError(
            f"{op}: backend='triton' got a tensor on {tensor.device}; Triton runs CPU tensors only in its "
            f"interpreter: set {INTERPRET_ENV}=1 before triton is imported, move the tensor to CUDA, "
            "or pass backend='auto'"
        )
    return True
