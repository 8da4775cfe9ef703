"""The families' published modeling files (remote code), for the native-model equality tests.

They are never part of the repository: point `DLLM_EDIT_REMOTE_CODE_DIR` at a folder holding one
sub-folder per family, named by `model_type` (`llada`, `lladamoe`, `llada2_moe`, `dream`, and
`fastdllm_llada` for Fast-dLLM's patched LLaDA with its `generate.py`), each with the family's
`configuration_*.py` and `modeling_*.py` as public repositories vendor them (the hub checkpoints'
files, or the copies in the `dllm` and Fast-dLLM repositories). A test that needs one skips, with the
reason, when the folder is absent or the file does not import under the installed transformers (the
remote code pins transformers 4.x). The cheaper tests run always: logits recorded from the remote
code on a fixed tiny config, in `tests/models/data/`.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest
import torch

ENV = "DLLM_EDIT_REMOTE_CODE_DIR"


def remote_dir(family: str) -> Path | None:
    """The folder of `family`'s remote code, or None when it is not provided."""
    root = os.environ.get(ENV)
    if not root:
        return None
    folder = Path(root) / family
    return folder if folder.is_dir() else None


def load_remote(family: str, module: str) -> types.ModuleType:
    """Import `module` (e.g. `"modeling_llada"`) of `family`'s remote code as a package member, so
    its relative imports resolve; skip the calling test with the reason when it cannot."""
    folder = remote_dir(family)
    if folder is None:
        pytest.skip(f"{family}'s remote code is not provided: set {ENV} (see tests/helpers/remote_code.py)")
    package = f"_dllm_edit_remote_{family}"
    if package not in sys.modules:
        pkg = types.ModuleType(package)
        pkg.__path__ = [str(folder)]
        sys.modules[package] = pkg
    try:
        return importlib.import_module(f"{package}.{module}")
    except Exception as error:  # the remote code pins transformers 4.x behaviour
        pytest.skip(f"{family}'s remote {module}.py does not import here: {type(error).__name__}: {error}")


def seeded_state_dict(model: torch.nn.Module, seed: int = 0, std: float = 0.1) -> dict[str, torch.Tensor]:
    """Weights for every parameter and buffer of `model` drawn from a seeded generator in sorted key
    order, independent of the class and of the transformers release (so the remote-code class and
    the native class, under transformers 4.57 and 5.x, hold the same numbers). One-dimensional
    norm weights (`norm` or `.ln_` in the key) are drawn around 1, the rest around 0 with `std`;
    integer buffers are kept.

    Examples:
        >>> import torch
        >>> a = seeded_state_dict(torch.nn.Linear(2, 2)); b = seeded_state_dict(torch.nn.Linear(2, 2))
        >>> all(torch.equal(a[k], b[k]) for k in a)
        True
    """
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in sorted(model.state_dict().items()):
        if not value.is_floating_point():
            out[key] = value.clone()
            continue
        draw = torch.randn(value.shape, generator=generator, dtype=torch.float32) * std
        is_norm = value.dim() == 1 and ("norm" in key or ".ln_" in key)
        out[key] = (1.0 + draw if is_norm else draw).to(value.dtype)
    return out


def require_remote(family: str, module: str) -> None:
    """Exit a recording script with the fix when `family`'s remote code is not provided."""
    if remote_dir(family) is None:
        raise SystemExit(f"set {ENV} to the folder holding {family}/{module}.py")


def save_recording(path: Path, **fields: object) -> None:
    """Write a recording of remote-code outputs to `path` (tensors as float32 copies) and say so."""
    record = {
        k: v.detach().to(torch.float32).clone() if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in fields.items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(record, path)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
