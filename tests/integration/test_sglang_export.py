"""`EditGenerationConfig.to_sglang()` and `dllm-edit export sglang`: the mapping and every refusal."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from dllm_edit import EditGenerationConfig
from dllm_edit.cli import main
from dllm_edit.sglang import EDITING_OFF, SGLangExportError, config_from_sglang
from dllm_edit.strategies import Constant, Linear, ThresholdUnmask

COMPARED = ("threshold", "editing_threshold", "max_post_steps", "repeat_penalty", "block_length")


@pytest.mark.parametrize(
    "mode, fields",
    [
        ("speedy", {}),
        ("quality", {}),
        ("speedy", {"threshold": 0.6, "repeat_penalty": 3.0, "block_length": 16, "max_post_steps": 4}),
        ("quality", {"editing_threshold": None}),
        ("quality", {"threshold": Constant(0.8)}),
    ],
)
def test_export_parse_reproduces_the_config(mode, fields, tmp_path):
    config = EditGenerationConfig.from_mode(mode, **fields)
    export = config.to_sglang(architecture="LLaDA2MoeModelLM")
    parsed = yaml.safe_load(export.to_yaml())
    assert set(parsed) == {
        "threshold",
        "edit_threshold",
        "max_post_edit_steps",
        "penalty_lambda",
        "block_size",
    }
    back = config_from_sglang(parsed)
    for name in COMPARED:
        ours = getattr(config, name)
        ours = ours.value if isinstance(ours, Constant) else ours
        assert getattr(back, name) == ours, name
    assert export.dropped == ()


def test_editing_off_really_turns_sglang_editing_off():
    # SGLang edits where p > edit_threshold: its 0.0 edits always; only a value >= 1 never fires
    export = EditGenerationConfig.from_mode("speedy", editing_threshold=None).to_sglang()
    assert export.algorithm_config["edit_threshold"] == EDITING_OFF == 1.0
    assert EditGenerationConfig.from_mode("speedy").to_sglang().algorithm_config["edit_threshold"] == 0.0


@pytest.mark.parametrize(
    "fields, architecture, named",
    [
        ({"multi_block_edit": True}, None, "multi_block_edit"),
        ({"eos_fill": True}, None, "eos_fill"),
        ({"threshold": Linear(0.9, 0.5, num_steps=4)}, None, "`threshold` is a Linear schedule"),
        (
            {"editing_threshold": Linear(0.9, 0.5, num_steps=4)},
            None,
            "`editing_threshold` is a Linear schedule",
        ),
        ({"temperature": 0.7}, None, "temperature"),
        ({"repetition_penalty": 1.3}, None, "repetition_penalty"),
        ({"suppress_tokens": [3]}, None, "suppress_tokens"),
        ({"steps": 8}, None, "quota mode"),
        ({"num_to_transfer": 2}, None, "num_to_transfer"),
        ({"strategies": [ThresholdUnmask(threshold=0.5)]}, None, "strategies"),
        ({"max_steps_per_block": 40}, None, "max_steps_per_block"),
        ({"output_trace": True}, None, "output_trace"),
        ({}, "LlamaForCausalLM", "architecture 'LlamaForCausalLM'"),
    ],
)
def test_each_inexpressible_setting_is_refused_or_dropped_by_name(fields, architecture, named):
    config = EditGenerationConfig.from_mode("speedy", **fields)
    with pytest.raises(SGLangExportError, match=named.replace("(", r"\(")) as info:
        config.to_sglang(architecture=architecture)
    assert isinstance(info.value, ValueError) and "allow_approximate" in str(info.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export = config.to_sglang(architecture=architecture, allow_approximate=True)
    assert len(export.dropped) == 1 and named in export.dropped[0]
    assert [str(w.message) for w in caught] == [f"SGLang export drops a setting: {export.dropped[0]}."]


def test_cli_writes_the_yaml_and_the_launch_command(tmp_path, capsys):
    out = tmp_path / "serve"
    argv = [
        "export",
        "sglang",
        "--mode",
        "speedy",
        "--set",
        "editing_threshold=null",
        "--set",
        "repeat_penalty=3",
    ]
    argv += ["--model", "inclusionAI/LLaDA2.1-mini", "--architecture", "LLaDA2MoeModelLM", "--out", str(out)]
    argv += ["--max-running-requests", "4", "--tp-size", "2"]
    assert main(argv) == 0
    parsed = yaml.safe_load((out / "joint_threshold.yaml").read_text())
    assert parsed == {
        "threshold": 0.5,
        "edit_threshold": 1.0,
        "max_post_edit_steps": 16,
        "penalty_lambda": 3.0,
        "block_size": 32,
    }
    launch = (out / "launch_sglang.sh").read_text()
    for piece in (
        "--model-path inclusionAI/LLaDA2.1-mini",
        "--dllm-algorithm JointThreshold",
        "--trust-remote-code",
    ):
        assert piece in launch
    assert "--max-running-requests 4 --tp-size 2" in launch and str(out / "joint_threshold.yaml") in launch
    assert "sglang.launch_server" in capsys.readouterr().out


def test_cli_refuses_and_names_the_setting(tmp_path, capsys):
    model_dir = tmp_path / "llama"  # a Llama whose logits SGLang would read right, but not a served one
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    )
    argv = ["export", "sglang", "--model", str(model_dir), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "LlamaForCausalLM" in capsys.readouterr().err
    assert main([*argv, "--allow-approximate"]) == 0
    assert (
        "warning: SGLang export drops a setting: architecture 'LlamaForCausalLM'" in capsys.readouterr().out
    )
    assert main([*argv, "--set", "treshold=0.5"]) == 2
    assert "threshold" in capsys.readouterr().err


def test_cli_refuses_the_shipped_model_whatever_the_flags(tmp_path, capsys):
    # it declares the block_causal_shifted adapter (a next-token head): no export can serve it right
    from dllm_edit import DEFAULT_MODEL_DIR

    argv = ["export", "sglang", "--model", str(DEFAULT_MODEL_DIR), "--out", str(tmp_path)]
    for flags in ([], ["--allow-approximate"]):
        assert main([*argv, *flags]) == 2
        err = capsys.readouterr().err
        assert "'block_causal_shifted' adapter" in err and "LlamaForCausalLM" in err  # every reason
    assert not (tmp_path / "joint_threshold.yaml").exists()


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"model_type": "llama", "dllm_edit_adapter": "block_causal_shifted"}, True),  # declared
        ({"model_type": "dream"}, True),  # detected by model_type
        ({"model_type": "llama"}, False),  # block-causal: the logits SGLang reads
    ],
)
def test_export_refuses_a_model_with_shifted_logits(tmp_path, capsys, config, refused):
    """A checkpoint whose prediction for position j is its output at j - 1 would decode other tokens
    under JointThreshold: refused even with --allow-approximate (not a setting that can be dropped)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"architectures": ["LLaDA2MoeModelLM"], **config}))
    argv = ["export", "sglang", "--model", str(model_dir), "--out", str(tmp_path / "out")]
    assert main([*argv, "--allow-approximate"]) == (2 if refused else 0)
    err = capsys.readouterr().err
    assert ("output at j - 1" in err) is refused
    cfg = EditGenerationConfig.from_mode("speedy")
    with pytest.raises(SGLangExportError, match="the 'shifted' adapter"):
        cfg.to_sglang(adapter="shifted", allow_approximate=True)
    assert cfg.to_sglang(adapter="block_causal").algorithm_config["block_size"] == 32
