"""A tenth algorithm is one file: a plugin registered through the entry-point group is picked up
by the registry, the registry-wide properties and the comparison harness, with no edit elsewhere.

The plugin is `tests/strategies/plugins/entropy_threshold.py`, installed here the way a package
installs it: a throw-away site folder holding the module and a `.dist-info` whose
`entry_points.txt` names it in the group `dllm_edit.strategies`. Each check runs in a fresh
interpreter that has that folder on its path (and nothing of this process's registry).
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from dllm_edit.strategies import ENTRY_POINT_GROUP

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = pathlib.Path(__file__).with_name("plugins") / "entropy_threshold.py"
NAME = "entropy_threshold"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A site folder with the plugin installed as a distribution with one entry point."""
    folder = tmp_path_factory.mktemp("site")
    shutil.copy(PLUGIN, folder / "entropy_threshold.py")
    info = folder / "dllm_edit_entropy_threshold-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dllm-edit-entropy-threshold\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{NAME} = entropy_threshold:EntropyThreshold\n"
    )
    return folder


def run(site, *command, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "HYPOTHESIS_PROFILE": "ci"}
    return subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_plugin_file_is_a_working_rule():
    spec = importlib.util.spec_from_file_location("entropy_threshold_example", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert doctest.testmod(module).failed == 0
    rule = module.EntropyThreshold(max_entropy=0.2)
    assert rule.needs.stats == {"entropy"} and rule.unmasks and rule.sweep[0] == "max_entropy"
    with pytest.raises(ValueError, match="`max_entropy` of EntropyThreshold must be a finite float >= 0"):
        module.EntropyThreshold(max_entropy=-1.0)


def test_the_registry_finds_it_through_the_entry_point(site):
    code = (
        "from dllm_edit.strategies import available_strategies, get_strategy, strategy_from_dict;"
        "from dllm_edit.algorithm_bench import resolve_names;"
        f"cls = get_strategy({NAME!r}); print(cls.__name__);"
        f"print({NAME!r} in available_strategies() and {NAME!r} in resolve_names('all'));"
        "print(strategy_from_dict(cls(max_entropy=0.2).to_dict()) == cls(max_entropy=0.2))"
    )
    out = run(site, "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["EntropyThreshold", "True", "True"]


def test_the_registry_wide_properties_cover_it(site):
    out = run(site, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/properties", "-k", NAME)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    passed = {line.split("::")[1].split("[")[0] for line in out.stdout.splitlines() if " PASSED" in line}
    assert {
        "test_progress_history_and_no_mask_written",  # progress, the block bound, no mask written
        "test_batch_equals_alone",
        "test_step_is_pure",
        "test_every_combination_decodes_or_is_refused_before_a_forward",
        "test_every_rule_runs_alone_on_some_adapter",
    } <= passed, out.stdout[-3000:]


def test_the_comparison_harness_sweeps_it(site, tmp_path):
    results = tmp_path / "bench.json"
    out = run(
        site,
        "-m",
        "dllm_edit.cli",
        "bench",
        "--strategies",
        NAME,
        "--synthetic",
        "2",
        "--editing",
        "off",
        "--json",
        str(results),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(results.read_text())
    assert [row["value"] for row in rows] == [0.05, 0.2, 0.5, 1.0, 2.0]  # its own sweep
    assert {row["algorithm"] for row in rows} == {NAME} and all(row["tpf_synthetic"] > 0 for row in rows)
