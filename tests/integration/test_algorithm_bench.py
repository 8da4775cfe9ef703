"""The algorithm comparison (`dllm_edit.algorithm_bench`, `bench --strategies`) on the shipped model.

It also holds the compositions the zoo promises on a real trained model: EB-Sampler + T2T editing and
Fast-dLLM's factor rule + T2T editing decode the shipped model's held-out prompts, and their edits
happen (or the table would not say anything about composing).
"""

from __future__ import annotations

import json

import pytest
import torch

import dllm_edit
from dllm_edit.algorithm_bench import (
    AlgorithmSetting,
    algorithm_settings,
    compare_algorithms,
    format_algorithm_table,
    resolve_names,
    unmasking_strategies,
)
from dllm_edit.cli import main
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.shipped import load_default
from dllm_edit.strategies import get_strategy


@pytest.fixture(scope="module")
def shipped():
    return load_default()


@pytest.fixture(scope="module")
def held_out():
    return builtin_rows("dllm_edit:synthetic", "test")[:24]


def test_names_resolve_and_bad_names_are_refused():
    everything = resolve_names("all")
    assert everything == unmasking_strategies() and "threshold_unmask" in everything
    assert all(get_strategy(n).unmasks for n in everything)
    # the class name (the earlier registry name) is an alias of the snake_case one
    assert resolve_names("ThresholdUnmask, threshold_unmask") == ["threshold_unmask"]
    with pytest.raises(ValueError, match="Did you mean"):
        resolve_names("ThresholdUnmsk")
    with pytest.raises(ValueError, match="does not unmask"):
        resolve_names("TokenEdit")
    with pytest.raises(ValueError, match="at least one"):
        resolve_names(",")
    with pytest.raises(ValueError, match="--editing"):
        algorithm_settings(["ThresholdUnmask"], editing=["X"])


def test_every_algorithm_builds_its_whole_sweep():
    settings = algorithm_settings(unmasking_strategies(), editing=("off", "S"))
    for name in unmasking_strategies():
        sweep = get_strategy(name).sweep
        points = [s for s in settings if s.algorithm == name and s.editing == "off"]
        assert len(points) == (1 if sweep is None else len(sweep[1]))
    composed = AlgorithmSetting("ThresholdUnmask", "threshold", 0.5, "S").config(16, 32)
    kinds = [type(s).__name__ for s in composed.build_strategies()]
    assert kinds == ["ThresholdUnmask", "TokenEdit"]


# aggressive settings of each rule (a large entropy budget, a large factor) draft several tokens per
# forward, so the shipped model's T2T edits have drafts to repair (at the papers' careful defaults it
# commits about one token per forward and finds nothing to edit on these prompts)
@pytest.mark.parametrize(
    "name", [{"type": "eb_sampler", "gamma": 10.0}, {"type": "fast_dllm_factor", "factor": 4.0}], ids=str
)
def test_zoo_rule_with_t2t_editing_decodes_the_shipped_model(shipped, held_out, name):
    model, tokenizer = shipped
    prompts = [r["prompt"] for r in held_out]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", unmasking=name, max_new_tokens=16)
    assert [type(s).__name__ for s in cfg.build_strategies()][1:] == ["TokenEdit"]
    out = dllm_edit.generate(
        model, enc["input_ids"], attention_mask=enc["attention_mask"], generation_config=cfg
    )
    texts = tokenizer.batch_decode(out.completions(enc["input_ids"].shape[1]), skip_special_tokens=True)
    right = sum(t.strip() == r["completion"].strip() for t, r in zip(texts, held_out, strict=True))
    assert right >= len(held_out) // 2, f"{name} + T2T got {right}/{len(held_out)} right"
    assert int(out.num_edits.sum()) > 0  # the editing half of the composition ran
    off = dllm_edit.generate(
        model,
        enc["input_ids"],
        attention_mask=enc["attention_mask"],
        generation_config=cfg.replace(editing_threshold=None),
    )
    assert int(off.num_edits.sum()) == 0
    assert not torch.equal(off.sequences, out.sequences) or not torch.equal(
        off.num_forwards, out.num_forwards
    )


def test_compare_rows_and_table(shipped, held_out):
    model, tokenizer = shipped
    settings = algorithm_settings(["ThresholdUnmask"], editing=("off",))[:2]
    rows = compare_algorithms(model, tokenizer, settings, held_out[:8], [], repeats=2, progress=False)
    assert [r["value"] for r in rows] == [0.9, 0.7]
    for r in rows:
        assert {"accuracy", "tpf_synthetic", "tokens_per_s_synthetic", "seconds", "label"} <= set(r)
        assert r["repeats"] == 2 and r["tpf_synthetic"] >= 1.0 and 0 <= r["accuracy"] <= 100
        assert r["seconds_min"] <= r["seconds"] <= r["seconds_max"]  # the median inside its spread
    assert rows[1]["tpf_synthetic"] >= rows[0]["tpf_synthetic"]  # a lower threshold commits more per forward
    table = format_algorithm_table(rows)
    assert table.count("\n") == 1 + len(rows) and "threshold=0.9" in table
    with pytest.raises(ValueError, match="repeats"):
        compare_algorithms(model, tokenizer, settings, held_out, [], repeats=0)


def test_cli_writes_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out_json, out_png = tmp_path / "algos.json", tmp_path / "algos.png"
    argv = ["bench", "--strategies", "fast_dllm_threshold", "--synthetic", "6", "--json", str(out_json)]
    assert main([*argv, "--plot", str(out_png)]) == 0
    rows = json.loads(out_json.read_text())
    assert {r["algorithm"] for r in rows} == {"fast_dllm_threshold"} and out_png.stat().st_size > 0
    assert "fast_dllm_threshold" in capsys.readouterr().out


def test_cli_refuses_grid_options_with_strategies(capsys):
    assert main(["bench", "--strategies", "ThresholdUnmask", "--thresholds", "0.5"]) == 2
    assert "--thresholds" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--editing", "S"], ["--repeats", "2"], ["--seed", "3"]])
def test_cli_refuses_algorithm_options_without_strategies(option, capsys):
    assert main(["bench", *option]) == 2  # the grid would ignore them
    assert option[0] in capsys.readouterr().err


def test_drawing_rules_score_the_same_in_every_run(shipped, held_out):
    # llada_random draws its positions: every run decodes from a generator seeded with `seed`
    model, tokenizer = shipped
    settings = algorithm_settings(["llada_random"], editing=("off",))[-1:]  # its 4-step setting
    first = compare_algorithms(model, tokenizer, settings, held_out[:8], [], repeats=2, progress=False)
    again = compare_algorithms(model, tokenizer, settings, held_out[:8], [], progress=False)
    other = compare_algorithms(model, tokenizer, settings, held_out[:8], [], progress=False, seed=1)
    assert first[0]["tpf_synthetic"] == again[0]["tpf_synthetic"]
    assert first[0]["accuracy"] == again[0]["accuracy"]
    assert (first[0]["seed"], other[0]["seed"]) == (0, 1)  # the JSON says which draws it used
