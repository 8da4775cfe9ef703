"""The trade-off grid (`dllm_edit.evaluation`, `dllm-edit bench`) on a tiny random model."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dllm_edit.cli import main
from dllm_edit.data import build_char_tokenizer, synthetic_examples
from dllm_edit.evaluation import format_table, tradeoff, tradeoff_settings


@pytest.fixture(scope="module")
def char_model_dir(tmp_path_factory):
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            attn_implementation="sdpa",
        )
    )
    model.generation_config.mask_token_id = tokenizer.mask_token_id
    path = tmp_path_factory.mktemp("char_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model.eval(), tokenizer


def test_grid_rows_have_every_measure(char_model_dir):
    _, model, tokenizer = char_model_dir
    settings = tradeoff_settings([0.7], editing=["off", "S (0.0)"], multi_block_edit=[False, True])
    synthetic = synthetic_examples("sort", 3, split="test")
    code = [{"prompt": "def f(x):", "completion": "\n    return x\n"}]
    rows = tradeoff(
        {"tiny": (model, tokenizer)},
        synthetic,
        code,
        settings,
        progress=False,
        block_length=4,
        synthetic_tokens=8,
        code_tokens=8,
    )
    assert len(rows) == 4
    for row in rows:
        assert 0 <= row["accuracy"] <= 100 and 0 <= row["parse_rate"] <= 100
        assert row["tpf_synthetic"] > 0 and row["tpf_code"] > 0
    assert format_table(rows).count("\n") == 5
    with pytest.raises(ValueError, match="editing"):
        tradeoff_settings(editing=["sometimes"])


def test_bench_command_writes_table_json_and_plot(char_model_dir, tmp_path, capsys):
    path, _, _ = char_model_dir
    out_json, out_png = tmp_path / "rows.json", tmp_path / "plot.png"
    status = main(
        [
            "bench",
            "--model",
            f"tiny={path}",
            "--quick",
            "--synthetic",
            "4",
            "--code",
            "2",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ]
    )
    assert status == 0
    assert "| tiny | 0.7 |" in capsys.readouterr().out
    assert len(json.loads(out_json.read_text())) == 6 and out_png.stat().st_size > 0
    assert main(["bench", "--model", "nameless"]) == 2
    assert "NAME=PATH" in capsys.readouterr().err
