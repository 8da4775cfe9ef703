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


def _imports(module: str, top_level_only: bool = False) -> set[str]:
    """The `dllm_edit` modules `module` imports in its source (anywhere, or at its top level only)."""
    import ast

    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    found = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("dllm_edit")}


def test_rooms_with_one_job():
    # the decoding loop never imports the terminal UI; its bridge neither (only the earlier import
    # path dllm_edit.streaming.TerminalEditStreamer reaches it, lazily)
    for module in ("dllm_edit.generation", "dllm_edit.proposer", "dllm_edit.run_checks"):
        assert not any("terminal_streamer" in name for name in _imports(module)), module
    assert not any("terminal_streamer" in name for name in _imports("dllm_edit.streaming", True))
    # no circle between the config and the SGLang export: the export never imports the config at its
    # top (only the earlier name config_from_sglang reaches it); the config imports no CLI
    assert not any(name.startswith("dllm_edit.config") for name in _imports("dllm_edit.sglang", True))
    config = _imports("dllm_edit.config")
    assert not any(name.startswith("dllm_edit.cli") for name in config), config
    assert "dllm_edit.strategy_factory" in config and "dllm_edit.modes" in config
    # the CLI's --mode llada and from_mode(model=...) take the one path
    assert "dllm_edit.modes.fit_mode_to_adapter" in _imports("dllm_edit.cli.decode")


def test_rooms_stay_small():
    """No module of dllm_edit/ over 500 lines and no function over 100 (the Triton kernels' jitted
    bodies aside): a room that grows past them is split by job (CONTRIBUTING.md, the map)."""
    import ast

    big = []
    for path in sorted((ROOT / "dllm_edit").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            big.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            jitted = any("jit" in ast.unparse(d) for d in node.decorator_list)
            length = node.end_lineno - node.lineno + 1
            if length > 100 and not jitted:
                big.append(f"{path.relative_to(ROOT)}::{node.name}: {length} lines")
    assert not big, big
