"""The installed layout: strategies/, kernels/, trainers/ map into dllm_edit, never top level."""

import importlib
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed_in_pyproject():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping, packages = setup["package-dir"], set(setup["packages"])
    on_disk = set()
    for top, name in (
        ("dllm_edit", "dllm_edit"),
        ("strategies", "dllm_edit.strategies"),
        ("kernels", "dllm_edit.kernels"),
        ("trainers", "dllm_edit.trainers"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            on_disk.add(".".join((name, *rel)))
    assert on_disk == packages
    for package in packages:
        assert (ROOT / mapping[package] / "__init__.py").exists(), package


def test_subpackages_import_under_dllm_edit():
    for name in (
        "dllm_edit.strategies",
        "dllm_edit.kernels",
        "dllm_edit.kernels.candidates",
        "dllm_edit.trainers",
    ):
        module = importlib.import_module(name)
        assert module.__name__ == name
