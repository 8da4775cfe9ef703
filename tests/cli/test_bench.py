"""The trade-off grid (`dllm_edit.evaluation`, `dllm-edit bench`) on a tiny random model."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dllm_edit.cli import main
from dllm_edit.data import build_char_tokenizer, synthetic_examples
from dllm_edit.evaluation import evaluate_autoregressive, format_table, tradeoff, tradeoff_settings


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
    settings = tradeoff_settings(
        [0.7], editing=["off", "S (0.0)", "S + remask (0.3)"], multi_block_edit=[False, True]
    )
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
    assert len(rows) == 6
    remasking = settings[2].config(8, 4).build_strategies()
    assert [type(s).__name__ for s in remasking] == ["ThresholdUnmask", "TokenEdit", "LowConfidenceRemask"]
    for row in rows:
        assert 0 <= row["accuracy"] <= 100 and 0 <= row["parse_rate"] <= 100
        assert row["tpf_synthetic"] > 0 and row["tpf_code"] > 0 and row["code_length"] >= 0
    table = format_table(rows)
    assert table.count("\n") == 7 and "| code length (% of ref.) |" in table.splitlines()[0]
    assert all(line.count("|") == 12 for line in table.splitlines())  # 11 columns on every line
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
    out = capsys.readouterr().out
    assert "| tiny | 0.7 |" in out and "held-out: 4 synthetic prompts" in out  # --quick keeps explicit sizes
    assert len(json.loads(out_json.read_text())) == 6 and out_png.stat().st_size > 0
    assert main(["bench", "--model", "nameless"]) == 2
    assert "NAME=PATH" in capsys.readouterr().err


def test_autoregressive_baseline_rows(char_model_dir, tmp_path, capsys):
    """An autoregressive model is decoded by plain `generate`; its row joins the table and plot."""
    path, model, tokenizer = char_model_dir
    synthetic = synthetic_examples("sort", 3, split="test")
    row = evaluate_autoregressive(model, tokenizer, synthetic, [], synthetic_tokens=6)
    assert row["editing"] == "autoregressive" and row["threshold"] is None and row["tpf_synthetic"] == 1.0
    assert 0 <= row["accuracy"] <= 100 and row["tokens_per_s_synthetic"] > 0 and "parse_rate" not in row
    # the row matches greedy decoding done by hand, token by token without a cache
    enc = tokenizer([synthetic[0]["prompt"]], return_tensors="pt")
    ids = enc["input_ids"]
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    new = ids[0, enc["input_ids"].shape[1] :].tolist()
    new = new[: new.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in new else new
    by_hand = tokenizer.decode(new, skip_special_tokens=True)
    expected = 100.0 * (by_hand.strip() == synthetic[0]["completion"].strip())
    assert (
        evaluate_autoregressive(model, tokenizer, synthetic[:1], [], synthetic_tokens=6)["accuracy"]
        == expected
    )

    out_png = tmp_path / "plot.png"
    args = ["bench", "--model", f"d={path}", "--ar-model", f"ar={path}", "--quick", "--thresholds", "0.5"]
    assert main([*args, "--synthetic", "3", "--code", "1", "--plot", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert "| ar | — | autoregressive | off |" in out and out_png.stat().st_size > 0
    assert main(["bench", "--model", f"x={path}", "--ar-model", f"x={path}"]) == 2
    assert "distinct" in capsys.readouterr().err


def test_a_model_without_multi_block_editing_is_refused_before_the_grid(
    char_model_dir, tmp_path, capsys, monkeypatch
):
    from transformers import AutoModelForCausalLM

    from dllm_edit import adapters

    class NoWindowAdapter(adapters.BlockCausalAdapter):  # a third-party adapter without MBE
        name = "no_window"
        supports_multi_block_edit = False

    monkeypatch.setattr(adapters, "_ADAPTERS", {**adapters._ADAPTERS, "no_window": NoWindowAdapter})
    path, _, tokenizer = char_model_dir
    model = AutoModelForCausalLM.from_pretrained(path)
    model.config.dllm_edit_adapter = "no_window"  # a checkpoint declaring it
    model.save_pretrained(tmp_path / "no_window")
    tokenizer.save_pretrained(tmp_path / "no_window")
    argv = ["bench", "--model", f"tiny={tmp_path / 'no_window'}", "--thresholds", "0.5", "--synthetic", "2"]
    assert main([*argv, "--code", "0"]) == 2
    err = capsys.readouterr().err
    assert "tiny (no_window)" in err and "--no-mbe" in err
    assert main([*argv, "--code", "0", "--no-mbe"]) == 0
