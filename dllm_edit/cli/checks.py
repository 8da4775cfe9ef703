"""Checks of command-line settings that run before any model is loaded: dtype, device, output paths.

Each raises a `ValueError` naming the option, what was given and what is accepted, so that
`dllm-edit` prints one line and exits with status 2 instead of failing minutes later.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

DTYPES: dict[str, str | None] = {
    "auto": None,
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "fp64": "float64",
}
"""`--dtype` spellings and the torch dtype name each means (None: keep the checkpoint's)."""


def check_dtype(value: str | None, option: str = "--dtype") -> str | None:
    """The torch dtype name `value` means (`"bf16"` -> `"bfloat16"`), None for `auto` or unset.

    Raises:
        ValueError: an unknown spelling.

    Examples:
        >>> check_dtype("bf16"), check_dtype("auto"), check_dtype(None)
        ('bfloat16', None, None)
    """
    if value is None:
        return None
    name = DTYPES.get(str(value).strip().lower(), "?")
    if name == "?":
        raise ValueError(
            f"{option} {value!r} is not a dtype; use auto (the checkpoint's), float32, bfloat16, float16 or "
            "float64 (also fp32, bf16, fp16)."
        )
    return name


def check_device(value: str | None, option: str = "--device") -> Any:
    """The `torch.device` to decode on: `value`, or cuda when available and cpu otherwise.

    Raises:
        ValueError: not a device name, or a device this machine does not have.

    Examples:
        >>> check_device("cpu")
        device(type='cpu')
    """
    import torch

    if value is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(value).strip())
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(
            f"{option} {value!r} is not a device; use cpu, cuda, cuda:N or mps (default: cuda when "
            "available, else cpu)."
        ) from None
    kind = device.type
    if kind == "cpu":
        return device
    if kind == "meta":
        raise ValueError(f"{option} meta holds no weights and cannot decode; use cpu, cuda or mps.")
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = "this torch was built without CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise ValueError(
                f"{option} {value!r}: no CUDA device is available here ({why}). Use --device cpu, or "
                "leave --device out (cuda when available, else cpu)."
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"{option} {value!r}: this machine has {count} CUDA device(s) (cuda:0 .. cuda:{count - 1})."
            )
        return device
    if kind == "mps":
        available = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    else:
        module = getattr(torch, kind, None)
        is_available = getattr(module, "is_available", None)
        available = bool(callable(is_available) and is_available())
    if not available:
        raise ValueError(f"{option} {value!r}: no {kind} device is available here. Use --device cpu.")
    return device


def check_writable_file(path: str, option: str, suffixes: tuple[str, ...] = ()) -> Path:
    """Check, before the work starts, that a file can be written at `path` (its folder exists and
    accepts files); leaves an existing file as it is.

    Args:
        path: the file to be written.
        option: the option that named it, for the message (`--json`).
        suffixes: accepted file suffixes (`(".png", ".pdf")`); empty: any.

    Raises:
        ValueError: `path` is a folder, its folder does not exist, it cannot be written, or its
            suffix is not accepted.
    """
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"{option} {path!r} is a folder; give the path of a file to write.")
    if suffixes and target.suffix.lower() not in suffixes:
        raise ValueError(
            f"{option} {path!r}: the file type {target.suffix or '(none)'!r} is not supported; use one of "
            f"{list(suffixes)}."
        )
    folder = target.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"{option} {path!r} cannot be written: the folder {str(folder)!r} {what}.")
    try:
        if target.exists():
            with open(target, "a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".dllm-edit-check-"):
                pass
    except OSError as err:
        raise ValueError(f"{option} {path!r} cannot be written ({err.strerror or err}).") from None
    return target


def check_writable_dir(path: str, option: str) -> Path:
    """Check, before the work starts, that `path` is (or can be created as) a folder that accepts
    files. Nothing is created.

    Raises:
        ValueError: `path` or one of its parents is a file, or the nearest existing folder cannot be
            written.
    """
    target = Path(path).expanduser()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(
            f"{option} {path!r} cannot be used as a folder: {str(existing)!r} is a file, not a folder."
        )
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".dllm-edit-check-"):
            pass
    except OSError as err:
        raise ValueError(
            f"{option} {path!r} cannot be written: {str(existing)!r} does not accept files "
            f"({err.strerror or err})."
        ) from None
    if not os.access(existing, os.W_OK | os.X_OK):  # pragma: no cover - only without root rights
        raise ValueError(f"{option} {path!r} cannot be written: no write permission on {str(existing)!r}.")
    return target
