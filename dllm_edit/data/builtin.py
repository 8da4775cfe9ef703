"""Datasets and starting models the toolkit builds itself, addressable by name from recipes.

A recipe for `dllm-edit sft` can say

    model_name_or_path: dllm_edit:init/small      # a freshly initialised small model + its tokenizer
    dataset_name: dllm_edit:default_mix           # synthetic tasks + standard-library code

and needs no download: the data are generated (`dllm_edit.data.synthetic`, `dllm_edit.data.code_corpus`)
and the tokenizer is trained on the training split of the same mix.

Datasets (`dataset_name: dllm_edit:<name>`, split from `dataset_train_split` / `dataset_test_split`):

- `synthetic`: three synthetic families with answers of 2 to 10 tokens — sorting digits, reversing
  digits, closing brackets (`MIX_FAMILIES`; 5,000 examples each for train, 200 for test). Letter
  reversal is left out because a BPE tokenizer merges letters (digits and brackets stay single
  tokens); addition is left out because the small model gets 2 % of it right after the shipped
  budget (a flat family that shows no trade-off; `benchmarks/edit_sft.py` still uses it);
- `code`: functions of the standard library (whole modules held out for test);
- `default_mix`: both.

Models (`model_name_or_path: dllm_edit:init/<size>`): `tiny` (hidden 64, 2 layers), `small` (hidden
192, 4 layers, 2.7 M parameters), `medium` (hidden 256, 5 layers, 5.3 M parameters, about twice the
small model's training cost per step; the shipped model's size); a Llama architecture (loads with
`from_pretrained`, no remote code) with a byte-level BPE tokenizer of 4,096 tokens.
"""

from __future__ import annotations

from typing import Any

from .code_corpus import code_examples
from .synthetic import synthetic_mixture

PREFIX = "dllm_edit:"
DATASETS = ("synthetic", "code", "default_mix")
MIX_FAMILIES: dict[str, int] = {"sort": 7, "reverse_digits": 7, "brackets": 7}
"""The built-in synthetic families and their difficulty (answers of 3-10 digits, 2-9 brackets)."""
MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4},
    "small": {"hidden_size": 192, "intermediate_size": 576, "num_hidden_layers": 4, "num_attention_heads": 6},
    "medium": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 5,
        "num_attention_heads": 8,
    },
}
_SIZES = {"train": 5000, "test": 200}
TOKENIZER_VOCAB = 4096
MAX_POSITIONS = 512


def is_builtin(name: str) -> bool:
    """Whether `name` addresses something this module builds (`dllm_edit:...`)."""
    return name.startswith(PREFIX)


def builtin_rows(name: str, split: str = "train") -> list[dict[str, str]]:
    """The prompt/completion rows of a built-in dataset (see the module docstring).

    Raises:
        ValueError: an unknown dataset name or split.
    """
    key = name[len(PREFIX) :] if is_builtin(name) else name
    if key not in DATASETS:
        raise ValueError(f"Unknown built-in dataset {name!r}; choose from {[PREFIX + d for d in DATASETS]}.")
    if split not in _SIZES:
        raise ValueError(f"Built-in datasets have splits 'train' and 'test', not {split!r}.")
    rows: list[dict[str, str]] = []
    if key in ("synthetic", "default_mix"):
        rows += [
            {**r, "kind": "synthetic"} for r in synthetic_mixture(MIX_FAMILIES, _SIZES[split], split=split)
        ]
    if key in ("code", "default_mix"):
        rows += [{**r, "kind": "code"} for r in code_examples(split)]
    return rows


def builtin_dataset(name: str, split: str = "train") -> Any:
    """`builtin_rows` as a `datasets.Dataset`."""
    from datasets import Dataset

    return Dataset.from_list(builtin_rows(name, split))


def init_model(name: str) -> tuple[Any, Any]:
    """A freshly initialised model and its tokenizer, for `model_name_or_path: dllm_edit:init/<size>`.

    The tokenizer is a byte-level BPE trained on the training split of `default_mix`; the model a
    Llama with that vocabulary, tied embeddings and `MAX_POSITIONS` positions, initialised from the
    seed 0 (so the same recipe always starts from the same weights).

    Raises:
        ValueError: an unknown size.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from .bpe_tokenizer import build_bpe_tokenizer

    size = name[len(PREFIX + "init/") :] if name.startswith(PREFIX + "init/") else name
    if size not in MODEL_SIZES:
        raise ValueError(
            f"Unknown built-in model {name!r}; choose from {[PREFIX + 'init/' + s for s in MODEL_SIZES]}."
        )
    rows = builtin_rows("default_mix", "train")
    tokenizer = build_bpe_tokenizer((r["prompt"] + r["completion"] for r in rows), vocab_size=TOKENIZER_VOCAB)
    dims = MODEL_SIZES[size]
    fields: dict[str, Any] = {
        **dims,
        "vocab_size": len(tokenizer),
        "num_key_value_heads": dims["num_attention_heads"],
        "max_position_embeddings": MAX_POSITIONS,
        "tie_word_embeddings": True,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
        "attn_implementation": "sdpa",  # the 4-D block masks need sdpa or eager
    }
    config = LlamaConfig(**fields)
    config.mask_token_id = tokenizer.mask_token_id
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(0)  # a fixed starting point: the same recipe starts from the same weights
        model = LlamaForCausalLM(config)
    return model, tokenizer
