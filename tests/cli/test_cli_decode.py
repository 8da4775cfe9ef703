"""`dllm-edit generate` / `compare` on a tiny local model."""

import json

import pytest
import torch
import yaml

import dllm_edit
from dllm_edit.cli import main
from dllm_edit.cli.decode import same_text_notes, summary

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
    assert edits and len(edits) == result["num_edits"] <= result["num_edits_total"]  # total: after EOS too
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
    assert (
        "--mode: invalid choice: 'fast' (choose from 'speedy', 'quality', 'llada')" in capsys.readouterr().err
    )
    long_prompt = " ".join(["w3"] * 600)
    assert main(["generate", long_prompt, "--model", str(tiny_model_dir), *ARGS]) == 2
    assert "Shorten the prompt" in capsys.readouterr().err


def test_every_listed_mode_decodes(tiny_model_dir, capsys):
    """`--help` lists speedy, quality and llada; each decodes (llada: LLaDA-1's rule, no editing)."""
    assert main(["generate", "--help"]) == 0
    assert "{speedy,quality,llada}" in capsys.readouterr().out
    for mode in ("speedy", "quality", "llada"):
        assert (
            main(["generate", "w2 w3", "--model", str(tiny_model_dir), "--mode", mode, "--json", *ARGS]) == 0
        )
        captured = capsys.readouterr()
        result = json.loads(captured.out.strip().splitlines()[-1])
        assert result["mode"] == mode and result["tokens"] >= 1
    assert result["num_edits_total"] == 0  # llada: no T2T
    assert result["tokens_per_forward"] <= 1.0  # steps == block_length: at most one token per forward
    assert "LLaDA-1's fixed-steps rule" in captured.err  # the block-causal tiny Llama: absolute blocks


def test_llada_mode_is_llada_ones_quota_rule(tiny_model_dir, capsys):
    from dllm_edit.strategies import QuotaUnmask

    assert (
        main(["generate", "w2 w3", "--model", str(tiny_model_dir), "--mode", "llada", "--json", *ARGS]) == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from dllm_edit.cli.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    ids = tokenizer("w2 w3", return_tensors="pt")["input_ids"]
    rule = QuotaUnmask(steps=4, block_length=4, threshold=1.0, spread="masked_count")
    cfg = dllm_edit.EditGenerationConfig.from_mode("llada", max_new_tokens=8, block_length=4)
    cfg = cfg.replace(block_start=None, steps=None, unmasking=rule)
    out = dllm_edit.generate(model.eval(), ids, generation_config=cfg, tokenizer=tokenizer)
    completion = out.completions(ids.shape[1])[0]
    assert result["text"] == tokenizer.decode(completion, skip_special_tokens=True)
    assert result["num_forwards"] == int(out.num_forwards[0])


def test_config_file_round_trip_and_strategies(tiny_model_dir, tmp_path, capsys):
    saved = tmp_path / "settings.yaml"
    argv = ["generate", "w2 w3", "--model", str(tiny_model_dir), "--json", *ARGS]
    assert main([*argv, "--mode", "quality", "--save-config", str(saved)]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert yaml.safe_load(saved.read_text())["threshold"] == 0.7
    assert main([*argv, "--config", str(saved)]) == 0  # the same settings from the file
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["text"], again["num_forwards"]) == (first["text"], first["num_forwards"])

    zoo = tmp_path / "zoo.yaml"
    zoo.write_text(
        "max_new_tokens: 8\nblock_length: 4\nediting_threshold: null\n"
        "unmasking: {type: QuotaUnmask, steps: 2, block_length: 4}\n"
    )
    assert main(["generate", "w2 w3", "--model", str(tiny_model_dir), "--json", "--config", str(zoo)]) == 0
    quota = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from dllm_edit.cli.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    ids = tokenizer("w2 w3", return_tensors="pt")["input_ids"]
    cfg = dllm_edit.EditGenerationConfig(**yaml.safe_load(zoo.read_text()))
    out = dllm_edit.generate(model.eval(), ids, generation_config=cfg, tokenizer=tokenizer)
    assert quota["num_forwards"] == int(out.num_forwards[0]) and quota["num_edits_total"] == 0
    assert quota["text"] == tokenizer.decode(out.completions(ids.shape[1])[0], skip_special_tokens=True)
    assert (
        main(["generate", "w2", "--model", str(tiny_model_dir), "--config", str(zoo), "--mode", "speedy"])
        == 2
    )
    assert "--mode and --config" in capsys.readouterr().err

    typo = tmp_path / "typo.yaml"
    typo.write_text("treshold: 0.3\n")
    assert main(["generate", "w2", "--config", str(typo)]) == 2
    err = capsys.readouterr().err
    assert "treshold" in err and "'threshold'" in err and str(typo) in err


def test_summary_counts_edits_inside_the_text_and_says_so():
    row = {"num_forwards": 3, "tokens_per_forward": 2.0, "num_edits": 2, "num_edits_total": 5}
    line = summary({**row, "tokens_per_second": 10.0})
    assert "2 edits in the text (+3 after the end of text, not counted)" in line
    assert "not counted" not in summary({**row, "num_edits_total": 2, "tokens_per_second": 1.0})


def test_compare_says_when_settings_decode_the_same_text(tiny_model_dir, capsys):
    rows = {
        "S": {"text": "ab", "num_forwards": 3},
        "Q": {"text": "ab", "num_forwards": 5},
        "M2T": {"text": "ac", "num_forwards": 4},
    }
    assert same_text_notes(rows) == ["same text from S and Q, in 3 (S), 5 (Q) forwards: S needs 2 fewer"]
    assert [r["same_text_as"] for r in rows.values()] == [None, "S", None]
    assert main(["compare", "w5 w6", "--model", str(tiny_model_dir), *ARGS]) == 0
    out = capsys.readouterr().out
    assert main(["compare", "w5 w6", "--model", str(tiny_model_dir), "--json", *ARGS]) == 0
    json_rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    texts = [r["text"] for r in json_rows.values()]
    assert ("note: same text from" in out) == (len(set(texts)) < len(texts))
    assert all("same_text_as" in r for r in json_rows.values())


@pytest.mark.parametrize("dtype", ["bf16", "float32"])
def test_dtype_applies_to_the_shipped_model_too(dtype, capsys, monkeypatch):
    import dllm_edit.shipped as shipped

    seen = {}
    original = shipped.load_default

    def recording():
        model, tokenizer = original()
        original_to = model.to

        def to(*args, **kwargs):
            seen.setdefault("dtypes", []).extend(a for a in args if isinstance(a, torch.dtype))
            return original_to(*args, **kwargs)

        model.to = to
        return model, tokenizer

    monkeypatch.setattr(shipped, "load_default", recording)
    assert main(["generate", "sort:31=", "--dtype", dtype, "--json", *ARGS]) == 0
    expected = torch.bfloat16 if dtype == "bf16" else torch.float32
    assert seen["dtypes"] == [expected]


def test_unmasking_flag_picks_a_registered_rule_by_name(tiny_model_dir, capsys):
    from dllm_edit.cli.decode import parse_unmasking

    assert parse_unmasking("prophet:thresholds=[5, 2.5, 1],base=fast_dllm_threshold") == {
        "type": "prophet",
        "thresholds": [5, 2.5, 1],
        "base": "fast_dllm_threshold",
    }
    argv = ["generate", "w2 w3", "--model", str(tiny_model_dir), "--json", *ARGS]
    assert main([*argv, "--unmasking", "fast_dllm_factor:factor=2"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from dllm_edit.cli.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    ids = tokenizer("w2 w3", return_tensors="pt")["input_ids"]
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "speedy",
        max_new_tokens=8,
        block_length=4,
        unmasking={"type": "fast_dllm_factor", "factor": 2},
    )
    out = dllm_edit.generate(model.eval(), ids, generation_config=cfg, tokenizer=tokenizer)
    assert got["num_forwards"] == int(out.num_forwards[0])
    assert got["text"] == tokenizer.decode(out.completions(ids.shape[1])[0], skip_special_tokens=True)

    for spec, named in (
        ("eb_samplr", "'eb_sampler'"),  # an unknown rule: the close names
        ("eb_sampler:gama=1", "'gamma'"),  # an unknown field: the rule's fields
        ("eb_sampler:gamma", "KEY=VALUE"),
        (":gamma=1", "name first"),
    ):
        assert main([*argv, "--unmasking", spec]) == 2
        assert named in capsys.readouterr().err, spec
    assert main([*argv, "--unmasking", "eb_sampler", "--threshold", "0.3"]) == 2  # τ_mask would go unread
    assert "threshold" in capsys.readouterr().err
