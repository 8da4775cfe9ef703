"""The published checkpoint files under `tests/models/data/hub/` and what the tests build from them.

Each folder `<org>--<name>/` holds files of a Hugging Face checkpoint exactly as published
(`config.json`, `generation_config.json`, `tokenizer_config.json`, `special_tokens_map.json`,
`model.safetensors.index.json`, where found) and a `SOURCE` file naming the public repository, commit
and path of each, or saying it was not found. From them the tests build:

- the native class of the published config itself, on the meta device (parameter count, weight names);
- a *tiny copy*: the published config with only the sizes made small (hidden size, heads, MLP and
  expert widths; layer and expert counts too, or kept, for the hub-layout folder), every other field
  as published, the vocabulary included, so the published special ids are real ids of the model;
- a small tokenizer: the published `tokenizer_config.json` and `special_tokens_map.json` with a small
  byte-level BPE vocabulary that holds every special token whose id the files give at that id
  (`token_ids`; the real vocabulary files are megabytes; Dream's are public, its `vocab.json` /
  `merges.txt` layout is kept; LLaDA2.x's `tokenizer.json` was not found).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

import dllm_edit.models

HUB = Path(__file__).parent / "data" / "hub"

#: The files wanted of every checkpoint, where its hub repository publishes them.
FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors.index.json",
)

#: The checkpoints the issue names: each must have a folder with a SOURCE, even when nothing was found.
REQUIRED = (
    "GSAI-ML--LLaDA-8B-Base",
    "GSAI-ML--LLaDA-8B-Instruct",
    "GSAI-ML--LLaDA-1.5",
    "Dream-org--Dream-v0-Base-7B",
    "Dream-org--Dream-v0-Instruct-7B",
    "apple--DiffuCoder-7B-cpGRPO",
    "inclusionAI--LLaDA-MoE-7B-A1B-Instruct",
    "inclusionAI--LLaDA2.0-mini",
    "inclusionAI--LLaDA2.1-mini",
)

#: A SOURCE line of a file that was found: `<file>: github:<owner>/<repo> @ <commit> : <path>`.
FOUND = re.compile(
    r"^(?P<file>\S+): github:(?P<repo>[\w.-]+/[\w.-]+) @ (?P<commit>[0-9a-f]{40}) : (?P<path>\S.*)$"
)
#: ... and of one that was not.
NOT_FOUND = re.compile(r"^(?P<file>\S+): not found verbatim")

#: family -> the adapters its tiny copy decodes with (the detected one first), and its block origin.
ADAPTERS = {
    "llada": ("bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"),
    "lladamoe": ("bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"),
    "Dream": ("shifted", "block_causal_shifted"),
    "llada2_moe": ("block_causal", "block_causal_static"),
}
BLOCK_START = {
    "llada": "prompt_end",
    "lladamoe": "prompt_end",
    "Dream": "prompt_end",
    "llada2_moe": "absolute",
}


def checkpoints() -> list[str]:
    """Every checkpoint folder present."""
    return sorted(p.name for p in HUB.iterdir() if p.is_dir()) if HUB.is_dir() else []


def with_file(name: str) -> list[str]:
    """The checkpoint folders that hold the published `name`."""
    return [c for c in checkpoints() if (HUB / c / name).is_file()]


def published(checkpoint: str, name: str = "config.json") -> dict[str, Any]:
    return json.loads((HUB / checkpoint / name).read_text(encoding="utf-8"))


def family(config: dict[str, Any]) -> str:
    """The native family of a published config (LLaDA-MoE's hub config may say `model_type: llada`)."""
    if "LLaDAMoEModelLM" in (config.get("architectures") or ()):
        return "lladamoe"
    return config["model_type"]


def _heads(config: dict[str, Any], heads_key: str, kv_key: str) -> tuple[int, int]:
    """Tiny attention heads with the published query / key-value ratio (GQA stays GQA)."""
    heads, kv = config[heads_key], config.get(kv_key) or config[heads_key]
    ratio = max(1, heads // kv)
    tiny = ratio * max(1, 4 // ratio)
    return tiny, tiny // ratio


def tiny_sizes(config: dict[str, Any], *, keep_counts: bool = False) -> dict[str, Any]:
    """The size fields of a tiny copy of `config` (with `keep_counts`, the layer and expert counts
    stay as published, so the weight names are the published ones)."""
    fam = family(config)
    if fam == "llada":
        heads, kv = _heads(config, "n_heads", "n_kv_heads")
        sizes: dict[str, Any] = {
            "d_model": 8 * heads,
            "n_heads": heads,
            "n_kv_heads": kv,
            "mlp_hidden_size": 48,
        }
        counts: dict[str, Any] = {"n_layers": 2}
    elif fam == "Dream":
        heads, kv = _heads(config, "num_attention_heads", "num_key_value_heads")
        sizes = {"hidden_size": 8 * heads, "num_attention_heads": heads, "num_key_value_heads": kv}
        sizes["intermediate_size"] = 48
        counts = {"num_hidden_layers": 2, "max_window_layers": min(2, config.get("max_window_layers") or 2)}
    elif fam == "lladamoe":
        heads, kv = _heads(config, "num_attention_heads", "num_key_value_heads")
        sizes = {"hidden_size": 8 * heads, "num_attention_heads": heads, "num_key_value_heads": kv}
        for key in ("dense_intermediate_size", "expert_intermediate_size", "shared_expert_intermediate_size"):
            if config.get(key):
                sizes[key] = 16
        top_k = min(config.get("num_experts_per_tok") or 1, 4)
        counts = {"num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": top_k}
    elif fam == "llada2_moe":
        heads, kv = _heads(config, "num_attention_heads", "num_key_value_heads")
        head_dim = 8
        sizes = {
            "hidden_size": 8 * heads,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "head_dim": head_dim,
            "intermediate_size": 48,
            "moe_intermediate_size": 8,
        }
        if config.get("rotary_dim") and config.get("head_dim"):
            sizes["rotary_dim"] = head_dim * config["rotary_dim"] // config["head_dim"]
        groups = config.get("n_group") or 1
        counts = {
            "num_hidden_layers": (config.get("first_k_dense_replace") or 0) + 2,
            "num_experts": 4 * groups,  # 4 per routing group
            "num_experts_per_tok": min(config.get("num_experts_per_tok") or 1, 4),
        }
    else:
        raise ValueError(f"no tiny sizes for family {fam!r}")
    return sizes if keep_counts else {**sizes, **counts}


#: The mask id of a family whose config.json carries none and whose tokenizer files were not found:
#: LLaDA2.x's `<|mask|>`, the default `mask_id` of its published `generate()` (modeling_llada2_moe.py).
FAMILY_MASK = {"llada2_moe": 156895}


def mask_token_id(checkpoint: str) -> int:
    """The mask id the files give: the config's `mask_token_id`, else the id of the published
    tokenizer's mask token (`token_ids`, the ids the small tokenizer holds too), else the family's
    documented id (`FAMILY_MASK`)."""
    config = published(checkpoint)
    if config.get("mask_token_id") is not None:
        return int(config["mask_token_id"])
    if (HUB / checkpoint / "tokenizer_config.json").is_file():
        token = token_content(published(checkpoint, "tokenizer_config.json").get("mask_token"))
        known = token_ids(checkpoint)
        if token in known:
            return known[token]
    return FAMILY_MASK[family(config)]


def native_config(config: dict[str, Any], *, dtype: str = "float32", **overrides: Any) -> Any:
    """The native config class of `config`'s family, built from the published fields and `overrides`
    (the weights in `dtype`, whichever of `torch_dtype` / `dtype` the file names it by)."""
    config_class = dllm_edit.models.NATIVE_FAMILIES[family(config)][0]
    dropped = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")
    fields = {k: v for k, v in {**config, **overrides}.items() if k not in dropped}
    return config_class.from_dict({**fields, "torch_dtype": dtype})


def seeded(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """`model` with small seeded weights (norms around 1), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.dim() == 1 and "norm" in name:
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    return model.eval()


def added_tokens(checkpoint: str) -> dict[str, int]:
    """content -> id of every added token of the published `tokenizer_config.json`."""
    config = published(checkpoint, "tokenizer_config.json")
    return {entry["content"]: int(i) for i, entry in config.get("added_tokens_decoder", {}).items()}


def token_content(token: Any) -> str | None:
    """The text of a tokenizer config's special token (a string, or an `AddedToken` dict), or None."""
    return token["content"] if isinstance(token, dict) else token


def token_ids(checkpoint: str) -> dict[str, int]:
    """content -> id of the special tokens whose ids the published files give.

    The tokenizer config's `added_tokens_decoder` where it has one (Dream). LLaDA2.x's tokenizer config
    names its tokens only (the ids are in its `tokenizer.json`, not found), so there: its `pad_token`
    (also its `eos_token`) at the config's `pad_token_id`, which the published generation config of
    LLaDA2.0-mini-preview gives as its `eos_token_id` too, and its `mask_token` at the family's
    documented id (`FAMILY_MASK`). Tokens it names with no id anywhere (`bos_token`, `cls_token`,
    `gmask_token`) are left out: no id is invented for them.
    """
    added = added_tokens(checkpoint)
    if added:
        return added
    tokenizer = published(checkpoint, "tokenizer_config.json")
    config = published(checkpoint)
    out: dict[str, int] = {}
    pad = token_content(tokenizer.get("pad_token"))
    if pad is not None and config.get("pad_token_id") is not None:
        out[pad] = int(config["pad_token_id"])
    mask = token_content(tokenizer.get("mask_token"))
    if mask is not None and family(config) in FAMILY_MASK:
        out[mask] = FAMILY_MASK[family(config)]
    return out


def write_small_tokenizer(checkpoint: str, folder: Path) -> None:
    """Into `folder`: the published tokenizer config and special tokens map, verbatim, and a small
    byte-level BPE vocabulary holding every special token whose id the files give at that id
    (`token_ids`; as `vocab.json` + `merges.txt` for Dream's `DreamTokenizer`, as `tokenizer.json`
    otherwise)."""
    import shutil

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (HUB / checkpoint / name).is_file():
            shutil.copyfile(HUB / checkpoint / name, folder / name)
    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}  # 256 bytes
    merges = [("h", "i"), ("Ġ", "w"), ("o", "r")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    specials = token_ids(checkpoint)
    vocab.update(specials)
    if published(checkpoint, "tokenizer_config.json").get("tokenizer_class") == "DreamTokenizer":
        (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(content, special=True, normalized=False) for content in specials])
    tok.save(str(folder / "tokenizer.json"))
