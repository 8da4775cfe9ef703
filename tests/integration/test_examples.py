"""The cookbook's CPU examples run end to end with tiny sizes."""

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_example(name, *args, monkeypatch):
    monkeypatch.setattr(sys, "argv", [name, *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def test_edit_sft_lora_example(monkeypatch, tmp_path, capsys):
    pytest.importorskip("peft")
    run_example(
        "edit_sft_lora.py", "--steps", "4", "--tiny", "--output-dir", str(tmp_path), monkeypatch=monkeypatch
    )
    out = capsys.readouterr().out
    assert "speedy:" in out and "quality:" in out and "accuracy" in out


def test_quickstart(monkeypatch, capsys):
    run_example("quickstart.py", monkeypatch=monkeypatch)
    assert "speedy" in capsys.readouterr().out


def test_ebpo_example(monkeypatch, capsys):
    pytest.importorskip("trl")
    run_example("ebpo_verifiable_reward.py", "--tiny", monkeypatch=monkeypatch)
    assert "held-out exact match" in capsys.readouterr().out


def test_trace_diagram_of_the_shipped_model(monkeypatch, capsys):
    run_example("trace_diagram.py", "def add(a, b):", "--max-new-tokens", "16", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "block 0, step  0:" in out and "forwards" in out
