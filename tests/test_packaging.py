"""The package layout: every module is a real folder under dllm_edit/, nothing installs at top level."""

import importlib
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUBPACKAGES = (
    "dllm_edit.strategies",
    "dllm_edit.kernels",
    "dllm_edit.kernels.candidates",
    "dllm_edit.trainers",
)


def test_no_package_dir_mapping_and_no_top_level_packages():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in setup
    assert setup["packages"]["find"]["include"] == ["dllm_edit*"]
    for generic in ("strategies", "kernels", "trainers"):
        assert not (ROOT / generic).exists(), f"top-level {generic}/ would shadow or claim an import name"


def test_subpackages_are_folders_of_dllm_edit():
    for name in SUBPACKAGES:
        module = importlib.import_module(name)
        assert module.__name__ == name
        folder = ROOT.joinpath(*name.split("."))
        assert pathlib.Path(module.__file__).resolve() == (folder / "__init__.py").resolve()


def test_uninstalled_checkout_imports(tmp_path):
    # a fresh interpreter whose only path to dllm_edit is the checkout itself (no site-packages entry)
    code = (
        "import sys; sys.path = [p for p in sys.path if 'dllm_edit' not in p and p not in ('', '.')];"
        f"sys.path.insert(0, {str(ROOT)!r});"
        "import dllm_edit, dllm_edit.strategies, dllm_edit.kernels;"
        f"assert dllm_edit.__file__.startswith({str(ROOT)!r}), dllm_edit.__file__;"
        "print(dllm_edit.strategies.ThresholdUnmask.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert out.stdout.strip() == "dllm_edit.strategies.unmask"


def test_hugging_face_kernels_package_is_not_shadowed():
    # transformers >= 5.25 imports Hugging Face's `kernels`; from the repository root the name must
    # resolve to that package (or to nothing, where it is not installed), never to a folder of ours
    code = "import importlib.util as u; s = u.find_spec('kernels'); print(s.origin if s else '-')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    origin = out.stdout.strip()
    assert origin == "-" or "site-packages" in pathlib.Path(origin).parts, origin
