"""Cookbook: EBPO with a verifiable reward (exact match on synthetic tasks), after a short SFT.

Offline on the CPU: a small random Llama (decoding block-causally) first learns the task format with
edit-aware SFT, then EBPO optimises the exact-match reward of its own rollouts, decoded with the S
preset. Prints the held-out reward and rollout tokens per forward before and after.

    python examples/ebpo_verifiable_reward.py              # a few minutes on a 2-core CPU
    python examples/ebpo_verifiable_reward.py --tiny       # seconds (CI)
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.data import build_char_tokenizer, synthetic_examples
from dllm_edit.trainers import EBPOConfig, EBPOTrainer, EditSFTConfig, EditSFTTrainer, exact_match_reward


def held_out_reward(model, tokenizer, rows, block_length):
    """Mean exact match and tokens per forward of the S preset on `rows` (greedy)."""
    cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=8, block_length=block_length)
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    out = dllm_edit.generate(
        model.eval(),
        enc["input_ids"],
        attention_mask=enc["attention_mask"],
        generation_config=cfg,
        tokenizer=tokenizer,
    )
    texts = tokenizer.batch_decode(out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    reward = exact_match_reward(texts, completion=[r["completion"] for r in rows])
    return sum(reward) / len(reward), out.tokens_per_forward.mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--ebpo-steps", type=int, default=30)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CI)")
    args = parser.parse_args()
    if args.tiny:
        args.sft_steps, args.ebpo_steps = 3, 2
    block = 4
    common = dict(
        report_to="none",
        save_strategy="no",
        activation_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
        logging_steps=10,
    )

    tokenizer = build_char_tokenizer("0123456789+=")
    train = synthetic_examples("addition", 64 if args.tiny else 4000, difficulty=2)
    test = synthetic_examples("addition", 16 if args.tiny else 200, split="test", difficulty=2)
    width = 32 if args.tiny else 96
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=width,
            intermediate_size=3 * width,
            num_hidden_layers=2 if args.tiny else 3,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=64,
            attn_implementation="sdpa",
        )
    )

    # 1. edit-aware SFT: the model learns the format (and to edit)
    sft = EditSFTTrainer(
        model,
        args=EditSFTConfig(
            output_dir=tempfile.mkdtemp(prefix="sft-"),
            block_length=block,
            max_length=16,
            learning_rate=3e-3,
            per_device_train_batch_size=64,
            max_steps=args.sft_steps,
            **common,
        ),
        train_dataset=Dataset.from_list(train),
        processing_class=tokenizer,
    )
    sft.train()
    before = held_out_reward(sft.model, tokenizer, test, block)

    # 2. EBPO on the exact-match reward (section 3.2): rollouts with the S preset, group size 8
    ebpo = EBPOTrainer(
        sft.model,
        reward_funcs=exact_match_reward,
        args=EBPOConfig(
            output_dir=tempfile.mkdtemp(prefix="ebpo-"),
            num_generations=8,  # group-relative advantages over 8 completions per prompt
            per_device_train_batch_size=32,
            rollout_mode="speedy",  # the S preset decodes the rollouts
            max_completion_length=8,
            block_length=block,
            temperature=1.0,
            elbo_timesteps=2,
            ratio_level="sequence",
            epsilon=0.2,
            epsilon_high=0.28,
            num_iterations=2,
            learning_rate=5e-4,
            max_steps=args.ebpo_steps,
            **common,
        ),
        train_dataset=Dataset.from_list([{"prompt": r["prompt"], "answer": r["completion"]} for r in train]),
        processing_class=tokenizer,
    )
    ebpo.train()
    after = held_out_reward(ebpo.model, tokenizer, test, block)
    print(
        f"held-out exact match: {before[0]:.3f} -> {after[0]:.3f}; "
        f"tokens per forward (S preset): {before[1]:.2f} -> {after[1]:.2f}"
    )


if __name__ == "__main__":
    main()
