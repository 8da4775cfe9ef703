"""`dllm-edit generate` / `compare` on a tiny local model."""

import json

from dllm_edit.cli import main

ARGS = ["--max-new-tokens", "8", "--block-length", "4", "--device", "cpu"]


def test_generate_json(tiny_model_dir, capsys):
    assert main(["generate", "w2 w3 w4", "--model", str(tiny_model_dir), "--json", *ARGS]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"text", "tokens_per_forward", "num_forwards", "seconds", "num_edits"} <= set(result)
    assert result["num_forwards"] >= 1 and result["tokens_per_forward"] > 0


def test_generate_lists_each_edit_of_the_completion(tiny_model_dir, capsys):
    # a random tiny model with the S preset (edit on any disagreement) rewrites its tokens
    assert main(["generate", "w2 w3 w4", "--model", str(tiny_model_dir), "--json", *ARGS]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    edits = result["edits"]
    assert edits and len(edits) <= result["num_edits"]  # num_edits also counts rewrites after the EOS
    assert all(e["from"] != e["to"] and 0 <= e["position"] < result["tokens"] for e in edits)
    assert [e["forward"] for e in edits] == sorted(e["forward"] for e in edits)
    assert all(1 <= e["forward"] <= result["num_forwards"] for e in edits)
    assert main(["generate", "w2 w3 w4", "--model", str(tiny_model_dir), *ARGS]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "edits (T2T rewrites" in lines[1] and len(lines) == 3 + len(edits)
    assert lines[-1].startswith("[speedy]")


def test_generate_plain_and_quality_mode(tiny_model_dir, capsys):
    assert main(["generate", "w2 w3", "--model", str(tiny_model_dir), "--mode", "quality", *ARGS]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert (
        lines[0].startswith("w2 w3") and lines[-1].startswith("[quality]") and "tokens/forward" in lines[-1]
    )


def test_compare_reports_three_decoders(tiny_model_dir, capsys):
    assert main(["compare", "w5 w6", "--model", str(tiny_model_dir), "--json", *ARGS]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(rows) == {"S (speedy)", "Q (quality)", "M2T only"}
    assert rows["M2T only"]["num_edits"] == 0


def test_user_mistakes(tiny_model_dir, tmp_path, capsys):
    assert main(["generate", "w2", "--model", str(tmp_path / "nope"), *ARGS]) == 2
    assert "No model at" in capsys.readouterr().err
    assert main(["generate", "w2", "--model", str(tiny_model_dir), "--mode", "fast", *ARGS]) == 2
    assert "--mode must be one of" in capsys.readouterr().err
    long_prompt = " ".join(["w3"] * 600)
    assert main(["generate", long_prompt, "--model", str(tiny_model_dir), *ARGS]) == 2
    assert "Shorten the prompt" in capsys.readouterr().err
