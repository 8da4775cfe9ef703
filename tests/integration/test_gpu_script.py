"""The GPU script's decode steps run on a CPU: `benchmarks/gpu.sh` runs only on the rare day a
device is lent, so its `real_shapes.py` commands are run here as it writes them, on the CPU in
float32 at smoke sizes (the real vocabularies, tiny layers and lengths). It checks that the commands
parse and run and that the dual cache agrees with Fast-dLLM's rule; never a time."""

from __future__ import annotations

import re
import runpy
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_SH = ROOT / "benchmarks" / "gpu.sh"
# the GPU flags that need a GPU, and what a CPU run takes instead; the smoke sizes come last so
# they override the script's lengths (argparse keeps the last)
ON_CPU = {"--device": "cpu", "--dtype": "float32"}
SMOKE = ["--smoke", "--prompt", "16", "--gen", "32", "--block", "16", "--batch", "2", "--repeats", "1"]


def real_shapes_steps() -> dict[str, list[str]]:
    """`{step name: real_shapes.py arguments}` of gpu.sh's `step` lines (continuations joined)."""
    text = GPU_SH.read_text().replace("\\\n", " ")
    steps = {}
    for line in text.splitlines():
        match = re.match(r"\s*step (\w+) \d+ \"\$python\" benchmarks/real_shapes\.py (.*)$", line)
        if match:
            steps[match.group(1)] = shlex.split(match.group(2))
    return steps


def on_cpu(args: list[str]) -> list[str]:
    out = list(args)
    for flag, value in ON_CPU.items():
        if flag in out:
            out[out.index(flag) + 1] = value
    return out + SMOKE


def test_gpu_sh_parses():
    subprocess.run(["bash", "-n", str(GPU_SH)], check=True)
    assert set(real_shapes_steps()) == {"llada_dual_cache", "llada2_modes"}


@pytest.mark.parametrize("step", ["llada_dual_cache", "llada2_modes"])
def test_gpu_sh_decode_step_runs_on_cpu(step, capsys):
    main = runpy.run_path(str(ROOT / "benchmarks" / "real_shapes.py"))["main"]
    assert main(on_cpu(real_shapes_steps()[step])) == 0
    out = capsys.readouterr().out
    if step == "llada_dual_cache":
        assert "same tokens and forwards: True" in out
        assert out.count("| dllm_edit, native class |") == 1
    else:
        rows = re.findall(r"^\| (speedy|quality) \| (prefix cache|StaticCache) \| (on|off) \|", out, re.M)
        assert rows == [
            ("speedy", "prefix cache", "off"),
            ("quality", "prefix cache", "off"),
            ("speedy", "StaticCache", "off"),
            ("speedy", "StaticCache", "on"),
        ]
