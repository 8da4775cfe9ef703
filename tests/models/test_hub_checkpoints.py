"""The checkpoints people load, proven on their published files (tests/models/data/hub/, see
tests/models/hub.py): each published config builds the native class through the Auto classes with no
remote code, with the published parameter count and weight names; a tiny copy of it forwards and
decodes with every algorithm and cache its adapter takes; a folder laid out like the hub's (sharded
safetensors under the published index, the published tokenizer and generation configs) loads with
`dllm_edit.load`, resolves the mask / EOS ids and block origin from its files and applies the
checkpoint's chat template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import dllm_edit
import dllm_edit.models
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.special_tokens import resolve_special_tokens
from tests.helpers.registry import build
from tests.models import hub

CONFIGS = hub.with_file("config.json")
INDEXED = [c for c in CONFIGS if c in hub.with_file("model.safetensors.index.json")]
# the hub-layout and chat tests need the special tokens' ids: Dream's `added_tokens_decoder`; LLaDA2.x's
# tokenizer_config.json names its tokens only (their ids are in its tokenizer.json, not found), so its
# pad / EOS id comes from config.json and its mask id from the family's published code (`hub.token_ids`)
TOKENIZED = [c for c in hub.with_file("tokenizer_config.json") if hub.token_ids(c)]
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
BLOCK = 4

#: The chat template's rendering of one user turn "hi" with the generation prompt, per family: the
#: markers of the published templates (read off the files; the test checks the files still say so).
CHAT_MARKERS = {
    "Dream": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "llada2_moe": "<role>HUMAN</role>hi<|role_end|><role>ASSISTANT</role>",
}


def _same(key: str, published, read) -> bool:
    """`read` is the published value, or what transformers turns it into on this release:
    transformers 5.x reads `rope_scaling: null` as the default RoPE parameters, and LLaDA-MoE's
    `model_type: llada` is read as its own family's `lladamoe`."""
    if key in ("dtype", "torch_dtype"):  # transformers reads the name as a torch.dtype
        return str(read).removeprefix("torch.") == published
    if key == "model_type" and published == "llada" and read == "lladamoe":  # LLaDA-MoE's hub config
        return True
    if key == "rope_scaling" and published is None and isinstance(read, dict):
        return read.get("rope_type", "default") == "default"
    return read == published


# ----------------------------------------------------------------------------------------------
# the files and where they came from


@pytest.mark.parametrize("checkpoint", hub.REQUIRED)
def test_every_named_checkpoint_has_its_folder_and_sources(checkpoint):
    source = hub.HUB / checkpoint / "SOURCE"
    assert source.is_file(), (
        f"{checkpoint}: no SOURCE (say where each file came from, or that it was not found)"
    )
    lines = source.read_text(encoding="utf-8").splitlines()
    for name in hub.FILES:
        found = [m for line in lines if (m := hub.FOUND.match(line)) and m["file"] == name]
        missing = [m for line in lines if (m := hub.NOT_FOUND.match(line)) and m["file"] == name]
        present = (hub.HUB / checkpoint / name).is_file()
        assert len(found) + len(missing) == 1, f"{checkpoint}/SOURCE: one line for {name}"
        assert present == bool(found), f"{checkpoint}/{name}: the file and its SOURCE line disagree"


@pytest.mark.parametrize("checkpoint", hub.checkpoints())
def test_the_files_are_json_as_published(checkpoint):
    for name in hub.FILES:
        path = hub.HUB / checkpoint / name
        if path.is_file():
            assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


# ----------------------------------------------------------------------------------------------
# the published config builds the native class unchanged


@pytest.mark.parametrize("checkpoint", CONFIGS)
def test_the_published_config_builds_the_native_class_through_the_auto_classes(checkpoint):
    published = hub.published(checkpoint)
    fam = hub.family(published)
    config_class, model_class = dllm_edit.models.NATIVE_FAMILIES[fam]
    config = AutoConfig.from_pretrained(hub.HUB / checkpoint)  # no trust_remote_code
    assert type(config) is config_class
    for key, value in published.items():  # every field is honoured: read back as published
        if key in ("_name_or_path", "transformers_version"):
            continue
        assert _same(key, value, getattr(config, key)), f"{checkpoint}: {key} = {getattr(config, key)!r}"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert type(model) is model_class


@pytest.mark.parametrize("checkpoint", INDEXED)
def test_the_weight_map_is_the_native_state_dict(checkpoint):
    published = hub.published(checkpoint)
    index = hub.published(checkpoint, "model.safetensors.index.json")
    config = AutoConfig.from_pretrained(hub.HUB / checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    state = model.state_dict()
    missing = sorted(set(index["weight_map"]) - set(state))
    unexpected = sorted(set(state) - set(index["weight_map"]))
    assert not missing and not unexpected, f"missing {missing[:5]}, unexpected {unexpected[:5]}"
    # the published size is the native tensors at the published dtype; LLaDA2.1 stores the router's
    # expert bias (a buffer) in float32
    dtype = published.get("torch_dtype") or published["dtype"]  # transformers 4.57 writes `dtype`
    buffers = {name for name, _ in model.named_buffers()} & set(state)
    at_dtype = sum(t.numel() for t in state.values()) * DTYPE_BYTES[dtype]
    buffers_fp32 = at_dtype + sum(state[n].numel() for n in buffers) * (4 - DTYPE_BYTES[dtype])
    assert index["metadata"]["total_size"] in (at_dtype, buffers_fp32)


# ----------------------------------------------------------------------------------------------
# a tiny copy forwards and decodes with every algorithm and cache


def _tiny(checkpoint: str, **extra) -> torch.nn.Module:
    published = hub.published(checkpoint)
    config = hub.native_config(published, **hub.tiny_sizes(published), **extra)
    model_class = dllm_edit.models.NATIVE_FAMILIES[hub.family(published)][1]
    return hub.seeded(model_class(config))


DECODES = [(c, a) for c in CONFIGS for a in hub.ADAPTERS[hub.family(hub.published(c))]]


@pytest.mark.parametrize(("checkpoint", "adapter"), DECODES)
def test_a_tiny_copy_decodes_with_every_algorithm(checkpoint, adapter):
    model = _tiny(checkpoint)
    published = hub.published(checkpoint)
    assert model.config.vocab_size == published["vocab_size"]  # the published ids are the model's
    mask = hub.mask_token_id(checkpoint)
    ids = torch.tensor([[11, 12, 13], [14, 15, 16]])  # [B, P]
    logits = model(ids).logits
    assert logits.shape[:2] == (2, 3) and bool(torch.isfinite(logits).all())
    decoded, refused = [], []
    rules = [None, *unmasking_strategies()]  # None: the Speedy preset (threshold unmasking + T2T edits)
    for rule in rules:
        config = dllm_edit.EditGenerationConfig.from_mode(
            "speedy", max_new_tokens=2 * BLOCK, block_length=BLOCK, eos_early_stop=False, mask_token_id=mask
        )
        if rule is not None:
            config = config.replace(strategies=[build(rule, BLOCK)])
        try:
            out = dllm_edit.generate(
                model,
                ids,
                generation_config=config,
                adapter=adapter,
                generator=torch.Generator().manual_seed(0),
            )
        except ValueError as error:  # a rule the adapter cannot run is refused by name, before a forward
            assert adapter in str(error), f"{rule} on {adapter}: {error}"
            refused.append(rule)
            continue
        completion = out.sequences[:, ids.shape[1] :]
        assert completion.shape == (2, 2 * BLOCK), rule
        assert not bool((completion == mask).any()), rule
        decoded.append(rule)
    assert len(decoded) >= len(rules) - 1, f"refused on {adapter}: {refused}"  # WINO's shadow block at most


# ----------------------------------------------------------------------------------------------
# a folder laid out like the hub's


def _hub_folder(checkpoint: str, folder: Path) -> Path:
    """The tiny copy with the published layer and expert counts (the published weight names), saved
    as the hub does: the shards the published index names, that index's weight map, the published
    generation config, the small tokenizer."""
    from safetensors.torch import save_file

    published = hub.published(checkpoint)
    folder.mkdir(parents=True)
    sizes = hub.tiny_sizes(published, keep_counts=True)
    config = {**published, **sizes}
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for name in ("generation_config.json",):
        if (hub.HUB / checkpoint / name).is_file():
            shutil.copyfile(hub.HUB / checkpoint / name, folder / name)
    model_class = dllm_edit.models.NATIVE_FAMILIES[hub.family(published)][1]
    model = hub.seeded(model_class(hub.native_config(published, **sizes)), seed=1)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    index_path = hub.HUB / checkpoint / "model.safetensors.index.json"
    if index_path.is_file():
        index = json.loads(index_path.read_text(encoding="utf-8"))
        shards: dict[str, dict[str, torch.Tensor]] = {}
        for key, shard in index["weight_map"].items():
            shards.setdefault(shard, {})[key] = state[key]
        for shard, tensors in shards.items():
            save_file(tensors, str(folder / shard), metadata={"format": "pt"})
        size = sum(t.numel() * t.element_size() for t in state.values())
        index = {**index, "metadata": {**index.get("metadata", {}), "total_size": size}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")
    else:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if (hub.HUB / checkpoint / "tokenizer_config.json").is_file():
        hub.write_small_tokenizer(checkpoint, folder)
    torch.save(state, folder / "expected.pt")  # what the folder holds, for the test to compare
    return folder


@pytest.mark.parametrize("checkpoint", [c for c in CONFIGS if c in TOKENIZED])
def test_a_hub_layout_folder_loads_with_its_files(checkpoint, tmp_path):
    published = hub.published(checkpoint)
    fam = hub.family(published)
    folder = _hub_folder(checkpoint, tmp_path / checkpoint)
    model, tokenizer = dllm_edit.load(str(folder))  # native class, no remote code
    assert type(model) is dllm_edit.models.NATIVE_FAMILIES[fam][1]
    expected = torch.load(folder / "expected.pt")
    state = model.state_dict()
    assert set(state) == set(expected) and all(
        torch.equal(state[k], v.to(state[k].dtype))
        for k, v in expected.items()  # at the loaded dtype
    )
    # the mask and EOS ids and the block origin come from the files
    special = resolve_special_tokens(model, dllm_edit.EditGenerationConfig(), tokenizer)
    known = hub.token_ids(checkpoint)
    tokenizer_config = hub.published(checkpoint, "tokenizer_config.json")
    assert (
        special.mask
        == known[hub.token_content(tokenizer_config.get("mask_token"))]
        == hub.mask_token_id(checkpoint)
    )
    if published.get("mask_token_id") is not None:
        assert special.mask == published["mask_token_id"]
    generation = (
        hub.published(checkpoint, "generation_config.json")
        if (folder / "generation_config.json").is_file()
        else {}
    )
    # the generation config's EOS, else the config's, else the tokenizer's EOS token (LLaDA2.x)
    eos = generation.get("eos_token_id", published.get("eos_token_id"))
    if eos is None:
        eos = known[hub.token_content(tokenizer_config["eos_token"])]
    assert special.eos == tuple(eos if isinstance(eos, list) else [eos])
    adapter = dllm_edit.adapters.resolve_adapter(model, None)
    assert adapter.name == hub.ADAPTERS[fam][0]
    assert adapter.resolve_block_start(None) == hub.BLOCK_START[fam]


@pytest.mark.parametrize("checkpoint", [c for c in CONFIGS if c in TOKENIZED])
def test_the_command_line_applies_the_checkpoint_s_chat_template(checkpoint, tmp_path, monkeypatch, capsys):
    from dllm_edit.cli import main

    fam = hub.family(hub.published(checkpoint))
    folder = _hub_folder(checkpoint, tmp_path / checkpoint)
    _, tokenizer = dllm_edit.load(str(folder))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert CHAT_MARKERS[fam] in text
    seen = []
    real = dllm_edit.generate
    monkeypatch.setattr(
        dllm_edit, "generate", lambda model, ids, **kw: seen.append(ids) or real(model, ids, **kw)
    )
    args = ["--max-new-tokens", str(BLOCK), "--block-length", str(BLOCK), "--json", "--no-live", "--chat"]
    assert main(["generate", "hi", "--model", str(folder), *args]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["num_forwards"] >= 1
    (ids,) = seen
    assert ids[0].tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]  # the template, once
