"""Griffe extensions used by mkdocs.yml to render the `dllm_edit` API.

`PackageDirMapping`: `strategies/` and `kernels/` sit at the top of the repository and are installed as
`dllm_edit.strategies` and `dllm_edit.kernels` through `[tool.setuptools] package-dir`. Griffe
discovers submodules by walking the package folder, so it cannot find them on its own (neither
statically nor with `force_inspection`). Once `dllm_edit` is loaded, this extension reads the
mapping from pyproject.toml and loads each mapped folder as the submodule it is installed as.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dllm_edit"


def package_dirs() -> dict[str, Path]:
    """The `package-dir` mapping of pyproject.toml, as absolute folders."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


class PackageDirMapping(griffe.Extension):
    """Attach the mapped folders of pyproject.toml as submodules of `dllm_edit`."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        # parents before children, so `dllm_edit.kernels` exists before `dllm_edit.kernels.candidates`
        for name, folder in sorted(package_dirs().items(), key=lambda item: item[0].count(".")):
            if not name.startswith(PACKAGE + "."):
                continue
            parent_path, _, child = name.rpartition(".")
            parent = pkg.modules_collection.get_member(parent_path)
            existing = parent.members.get(child)
            if existing is not None and not existing.is_alias and existing.is_module:
                continue  # an ordinary sub-folder, already found by Griffe
            # Griffe has no public call to load a folder under a given parent; `_load_module` is the
            # loader's own (griffe 1.x and 2.x), recursing into the folder's submodules.
            module = loader._load_module(child, folder / "__init__.py", submodules=True, parent=parent)
            parent.set_member(child, module)
            loader.expand_exports(module)
