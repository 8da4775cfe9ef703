"""`dllm-edit infill` and `<mask:N>` templates in `dllm-edit generate`."""

from __future__ import annotations

import json

import pytest

from dllm_edit.cli import main
from tests.helpers import tiny_llama, tiny_tokenizer

ARGS = ["--block-length", "4", "--device", "cpu", "--json"]


@pytest.fixture
def bidirectional_model_dir(tmp_path):
    """A tiny Llama declared bidirectional (`dllm_edit_adapter`), and its tokenizer."""
    model = tiny_llama("sdpa", seed=7)
    model.config.dllm_edit_adapter = "bidirectional"
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_infill_fills_the_template(bidirectional_model_dir, capsys):
    assert main(["infill", "w2 <mask:3> w4", "--model", str(bidirectional_model_dir), *ARGS]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    words = result["filled"].split()
    assert words[0] == "w2" and words[-1] == "w4" and len(words) >= 3
    assert result["tokens"] == 0  # --max-new-tokens defaults to 0: the gaps only


def test_generate_takes_a_template_and_continues(bidirectional_model_dir, capsys):
    argv = ["generate", "w2 <mask:2> w4", "--model", str(bidirectional_model_dir), "--max-new-tokens", "4"]
    assert main([*argv, *ARGS]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "filled" in result and result["filled"].split()[0] == "w2"


@pytest.mark.parametrize(
    "template, message",
    [
        ("w2 w3", "holds no <mask:N> tag"),
        ("w2 <mask> w3", "malformed mask tag '<mask>'"),
    ],
)
def test_bad_templates_are_refused_before_loading(template, message, capsys):
    assert main(["infill", template, "--model", "/nonexistent/model", *ARGS]) == 2
    assert message in capsys.readouterr().err


def test_block_causal_model_refuses_with_the_reason(tmp_path, capsys):
    tiny_llama("sdpa", seed=7).save_pretrained(tmp_path / "m")
    tiny_tokenizer().save_pretrained(tmp_path / "m")
    assert main(["infill", "w2 <mask:2> w4", "--model", str(tmp_path / "m"), *ARGS]) == 2
    assert "adapter refuses: its attention is block-causal" in capsys.readouterr().err
