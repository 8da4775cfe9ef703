"""Small models for the cookbook's CPU recipes (offline: nothing is downloaded).

dllm_edit's shipped default model does not exist yet, so the recipes that run on a CPU decode with
one of these instead of a real diffusion LM:

* `tiny_random_model`: a randomly initialised 2-layer Llama (CI mode, `--tiny`): its text is
  meaningless, but every API call, counter and code path of the recipe runs;
* `train_small_model`: a small Llama taught a synthetic task (`dllm_edit.data`) with a few hundred
  steps of edit-aware SFT (`EditSFTTrainer`), a few seconds to a minute on a CPU: it answers often
  enough that accuracy, tokens per forward and edits mean something, but it is a toy.

Llama decodes block-causally here (`adapter="block_causal"`, detected for any decoder-only model),
with the exact KV cache. On a GPU, load a real checkpoint instead (each recipe's `--hub MODEL_ID`).
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dllm_edit.data import build_char_tokenizer, synthetic_examples, synthetic_mixture

ALPHABET = "0123456789+=:abcdefghijklmnopqrstuvwxyz"  # what the synthetic tasks use
BLOCK_LENGTH = 8  # the small model is trained and decoded with blocks of 8 (ours: short answers)


def char_tokenizer() -> Any:
    """A character tokenizer built in memory: pad 0, eos 1, mask 2, unk 3; pads on the left."""
    return build_char_tokenizer(ALPHABET)


def tiny_random_model(tokenizer: Any, width: int = 32, layers: int = 2, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised Llama sized for `tokenizer` (eval mode, float32, SDPA attention)."""
    torch.manual_seed(seed)  # scripts may seed; the library never does
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=width,
        intermediate_size=3 * width,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        attn_implementation="sdpa",  # the block-causal mask is 4-D: no flash-attention
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config).eval()


def train_small_model(
    tokenizer: Any,
    families: tuple[str, ...] = ("sort",),
    steps: int = 300,
    width: int = 64,
    layers: int = 2,
    block_length: int = BLOCK_LENGTH,
    difficulty: int = 4,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A small Llama after `steps` of edit-aware SFT on synthetic `families` (returned in eval mode)."""
    from datasets import Dataset

    from dllm_edit.trainers import EditSFTConfig, EditSFTTrainer

    model = tiny_random_model(tokenizer, width=width, layers=layers, seed=seed)
    rows = synthetic_mixture(families, 4000, split="train", seed=seed, difficulty=difficulty)
    trainer = EditSFTTrainer(
        model.train(),
        args=EditSFTConfig(
            output_dir=tempfile.mkdtemp(prefix="cookbook-sft-"),
            block_length=block_length,  # train with the block length the recipes decode with
            max_length=24,
            learning_rate=3e-3,
            per_device_train_batch_size=64,
            max_steps=steps,
            logging_steps=max(1, steps // 4),
            save_strategy="no",
            report_to="none",
            activation_checkpointing=False,
            use_cpu=not torch.cuda.is_available(),
            disable_tqdm=True,
            seed=seed,
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.model.eval()


def small_model(tokenizer: Any, tiny: bool, steps: int = 300, families: tuple[str, ...] = ("sort",)) -> Any:
    """`tiny_random_model` in CI mode, else `train_small_model` (with a line saying which)."""
    if tiny:
        print("model: tiny random Llama (CI mode: the text is meaningless, the counters are real)")
        return tiny_random_model(tokenizer)
    print(f"model: small Llama, {steps} steps of edit-aware SFT on {'/'.join(families)} (a toy)")
    return train_small_model(tokenizer, families, steps=steps)


def held_out(n: int, family: str = "sort") -> list[dict[str, str]]:
    """`n` held-out prompts of the task the small model learns (`{"prompt", "completion"}` rows)."""
    return synthetic_examples(family, n, split="test", difficulty=4)


def exact_match(texts: list[str], rows: list[dict[str, str]]) -> float:
    """Fraction of `texts` equal to the rows' completions."""
    return sum(t.strip() == r["completion"] for t, r in zip(texts, rows)) / max(len(rows), 1)
