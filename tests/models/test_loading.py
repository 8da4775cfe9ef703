"""The native classes are picked without asking: `dllm_edit.load`, transformers' Auto classes and the
command line build dllm_edit's class for a checkpoint of each family, with the checkpoint's own
`config.json` (its `auto_map` to remote code included) and no `trust_remote_code`; `native=False` /
`--remote-code` opt out; bad checkpoints fail before any forward with the setting named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM

import dllm_edit
from dllm_edit.cli import main
from dllm_edit.models import DreamModel, LLaDA2MoeModel, LLaDA2MoeModelLM, LLaDAModelLM, LLaDAMoEModelLM
from tests.helpers import MASK, tiny_tokenizer
from tests.models import test_dream, test_llada, test_llada2_moe, test_llada_moe

# family -> (tiny config, native LM class, what AutoModel builds, detected adapter, the hub's auto_map)
FAMILIES: dict[str, tuple[dict[str, Any], type, type, str, dict[str, str]]] = {
    "llada": (
        test_llada.TINY_CONFIG,
        LLaDAModelLM,
        LLaDAModelLM,
        "bidirectional",
        {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModel": "modeling_llada.LLaDAModelLM",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        },
    ),
    "lladamoe": (
        test_llada_moe.TINY_CONFIG,
        LLaDAMoEModelLM,
        LLaDAMoEModelLM,
        "bidirectional",
        {
            "AutoConfig": "configuration_lladamoe.LLaDAMoEConfig",
            "AutoModel": "modeling_lladamoe.LLaDAMoEModelLM",
            "AutoModelForCausalLM": "modeling_lladamoe.LLaDAMoEModelLM",
        },
    ),
    "Dream": (
        test_dream.TINY_CONFIG,
        DreamModel,
        DreamModel,
        "shifted",
        {
            "AutoConfig": "configuration_dream.DreamConfig",
            "AutoModel": "modeling_dream.DreamModel",
        },
    ),
    "llada2_moe": (
        test_llada2_moe.TINY_CONFIG,
        LLaDA2MoeModelLM,
        LLaDA2MoeModel,
        "block_causal",
        {
            "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
            "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
            "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
        },
    ),
}


def hub_checkpoint(family: str, folder: Path) -> Path:
    """A tiny checkpoint of `family` laid out as on the hub: the native class's weights, a
    config.json whose `auto_map` names remote code (absent here, as it would be unrun), a tokenizer."""
    fields, model_class, _, _, auto_map = FAMILIES[family]
    fields = {k: v for k, v in fields.items() if k not in ("architectures", "model_type")}
    config_class = dllm_edit.models.NATIVE_FAMILIES[family][0]
    model = model_class(config_class(**{"mask_token_id": MASK, **fields}))
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = auto_map
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("family", list(FAMILIES))
def test_load_builds_the_native_class_without_remote_code(family, tmp_path):
    folder = hub_checkpoint(family, tmp_path / family)
    _, model_class, auto_model_class, adapter, _ = FAMILIES[family]
    model, tokenizer = dllm_edit.load(str(folder))
    assert type(model) is model_class and not model.training
    assert dllm_edit.detect_adapter(model) == adapter
    assert type(AutoModelForCausalLM.from_pretrained(folder)) is model_class  # no trust_remote_code
    assert type(AutoModel.from_pretrained(folder)) is auto_model_class
    ids = tokenizer("w2 w3", return_tensors="pt")["input_ids"]
    config = dllm_edit.EditGenerationConfig(max_new_tokens=4, block_length=4, threshold=0.0)
    out = dllm_edit.generate(model, ids, generation_config=config)
    assert out.sequences.shape == (1, ids.shape[1] + 4) and bool((out.sequences != MASK).all())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_opting_out_runs_the_checkpoint_s_code_and_needs_trust(family, tmp_path):
    folder = hub_checkpoint(family, tmp_path / family)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        dllm_edit.load(str(folder), native=False)
    with pytest.raises(ValueError, match="native"):
        dllm_edit.load(str(folder), native=False, trust_remote_code=True)  # the remote files are absent


def test_load_takes_a_dtype_and_refuses_a_bad_native_argument(tmp_path):
    folder = hub_checkpoint("llada", tmp_path / "llada")
    model, _ = dllm_edit.load(str(folder), dtype="bf16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(TypeError, match="`native` must be a bool"):
        dllm_edit.load(str(folder), native="yes")  # type: ignore[arg-type]


def test_llada_moe_hub_checkpoints_saying_llada_get_the_moe_class(tmp_path):
    """LLaDA-MoE's hub config.json says `model_type: llada`; its architecture routes it."""
    folder = hub_checkpoint("lladamoe", tmp_path / "moe")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "llada"
    (folder / "config.json").write_text(json.dumps(config))
    model, _ = dllm_edit.load(str(folder))
    assert type(model) is LLaDAMoEModelLM
    assert type(AutoModelForCausalLM.from_pretrained(folder)) is LLaDAMoEModelLM  # the Auto classes too


def test_a_config_field_the_native_class_does_not_implement_is_named(tmp_path):
    folder = hub_checkpoint("llada", tmp_path / "llada")
    config = json.loads((folder / "config.json").read_text())
    config["sliding_window_every"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="sliding_window_every") as error:
        dllm_edit.load(str(folder))
    assert "native=False" in str(error.value)


def test_the_command_line_decodes_a_native_checkpoint_and_opts_out(tmp_path, capsys):
    folder = hub_checkpoint("llada", tmp_path / "llada")
    args = ["--max-new-tokens", "4", "--block-length", "4", "--json", "--no-live"]
    assert main(["generate", "w2 w3", "--model", str(folder), *args]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["tokens"] >= 1
    assert main(["generate", "w2 w3", "--model", str(folder), "--remote-code", *args]) == 2
    assert "--model" in capsys.readouterr().err  # the remote files are absent: a one-line error
    assert main(["generate", "w2 w3", "--remote-code", *args]) == 2
    assert "--remote-code loads a checkpoint with its own code: it needs --model" in capsys.readouterr().err


def test_opting_out_loads_the_checkpoint_s_own_classes(tmp_path):
    """With the family's published files beside the weights (as on the hub), `native=False` builds
    the checkpoint's own classes, imported from its auto_map. (LLaDA-MoE's: LLaDA-8B's published
    `LLaDAModelLM` builds its blocks on CUDA, so it cannot be loaded on a CPU-only machine.)"""
    import shutil

    import transformers

    from tests.helpers.remote_code import remote_dir

    source = remote_dir("lladamoe")
    if source is None:
        pytest.skip("LLaDA-MoE's remote code is not provided: set DLLM_EDIT_REMOTE_CODE_DIR")
    if int(transformers.__version__.split(".")[0]) >= 5:
        pytest.skip("LLaDA-MoE's published code does not build under transformers 5 (ROPE_INIT_FUNCTIONS)")
    folder = hub_checkpoint("lladamoe", tmp_path / "moe")
    for name in ("configuration_lladamoe.py", "modeling_lladamoe.py"):
        shutil.copy(source / name, folder / name)
    model, _ = dllm_edit.load(str(folder), native=False, trust_remote_code=True)
    assert type(model).__name__ == "LLaDAMoEModelLM" and not type(model).__module__.startswith("dllm_edit")


@pytest.mark.parametrize(
    "adapter", ["bidirectional_dual_cache", "bidirectional_approx_cache", "block_causal"]
)
def test_a_cache_the_family_cannot_take_is_refused_before_a_forward(adapter, tmp_path):
    """Dream predicts position j at output j - 1: a cache built for outputs read at j would hold every
    prediction one slot off, so it is refused with the adapters that fit, before any forward."""
    model, tokenizer = dllm_edit.load(str(hub_checkpoint("Dream", tmp_path / "dream")))
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    ids = tokenizer("w2 w3", return_tensors="pt")["input_ids"]
    config = dllm_edit.EditGenerationConfig(max_new_tokens=4, block_length=4)
    with pytest.raises(ValueError, match=f"adapter='{adapter}' caches .* cannot take that cache") as error:
        dllm_edit.generate(model, ids, generation_config=config, adapter=adapter)
    assert "block_causal_shifted" in str(error.value) and "'shifted'" in str(error.value) and not calls


@pytest.mark.parametrize("family", list(FAMILIES))
def test_embedding_and_decoder_accessors(family, tmp_path):
    """transformers' accessors (resizing, PEFT, the trainers read them) find each family's modules."""
    model, _ = dllm_edit.load(str(hub_checkpoint(family, tmp_path / family)))
    base = model.get_decoder()
    assert base is model.model and isinstance(model.get_input_embeddings(), torch.nn.Embedding)
    head = model.get_output_embeddings()
    assert head is None or head.weight.shape[0] == model.get_input_embeddings().weight.shape[0]
    fresh = torch.nn.Embedding(*model.get_input_embeddings().weight.shape)
    model.set_input_embeddings(fresh)
    assert model.get_input_embeddings() is fresh and base.get_input_embeddings() is fresh
