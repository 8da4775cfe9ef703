"""Cookbook: edit-aware SFT with LoRA on your own data, then decode with the S and Q presets.

Runs offline on the CPU: the data are synthetic tasks the toolkit generates, the tokenizer is a
character tokenizer built in memory, the model a small randomly initialised Llama decoding
block-causally. Swap in your own model, tokenizer and `datasets.Dataset` of prompt/completion (or
`messages`) rows for real work; `examples/recipes/edit_sft_lora.yaml` is the same run as a recipe
for `dllm-edit sft --config`.

    python examples/edit_sft_lora.py                 # a few minutes on a 2-core CPU
    python examples/edit_sft_lora.py --steps 5 --tiny
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.data import build_char_tokenizer, synthetic_mixture
from dllm_edit.trainers import DecodeEvalCallback, EditSFTConfig, EditSFTTrainer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer width-32 model and little data (CI)")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()

    tokenizer = build_char_tokenizer()  # pad / eos / mask tokens included
    families = ("addition", "reverse")
    train = Dataset.from_list(synthetic_mixture(families, 32 if args.tiny else 2000, split="train"))
    held_out = synthetic_mixture(families, 4 if args.tiny else 32, split="test")

    width = 32 if args.tiny else 128
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=width,
            intermediate_size=3 * width,
            num_hidden_layers=2 if args.tiny else 4,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=128,
            attn_implementation="sdpa",
        )
    )

    config = EditSFTConfig(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="edit-sft-"),
        # LLaDA2.1 section 3.1: drafting stream (mask) + editing stream (random-token noise)
        mask_rate_min=0.1,
        mask_rate_max=1.0,
        edit_rate_min=0.0,
        edit_rate_max=0.2,
        clean_loss_weight=1.0,  # keeps confidence on right tokens calibrated for the T2T rule
        mtf_turns=2,  # Multi-turn Forward: one extra turn on the model's own draft
        block_length=8,
        max_length=32,
        learning_rate=2e-3,
        per_device_train_batch_size=32,
        max_steps=args.steps,
        logging_steps=max(1, args.steps // 5),
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=args.tiny,
    )
    callback = DecodeEvalCallback(
        [r["prompt"] for r in held_out],
        [r["completion"] for r in held_out],
        every_n_steps=max(1, args.steps // 2),
        max_new_tokens=16,
    )
    trainer = EditSFTTrainer(
        model,
        args=config,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[callback],
        # a fresh model needs its embeddings trained too: LoRA on attention + MLP, embeddings saved whole
        peft_config=LoraConfig(
            r=16,
            lora_alpha=32,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"],
            modules_to_save=["embed_tokens", "lm_head"],
        ),
    )
    trainer.train()
    for entry in trainer.state.log_history:
        if "decode/speedy/accuracy" in entry:
            print(
                f"step {entry['step']}: "
                + ", ".join(
                    f"{mode} accuracy {entry[f'decode/{mode}/accuracy']:.2f} "
                    f"TPF {entry[f'decode/{mode}/tokens_per_forward']:.2f}"
                    for mode in ("speedy", "quality")
                )
            )

    model = trainer.model.merge_and_unload().eval()  # LoRA folded into the weights
    prompt = held_out[0]["prompt"]
    enc = tokenizer([prompt], return_tensors="pt")
    for mode in ("speedy", "quality"):
        cfg = dllm_edit.EditGenerationConfig.from_mode(mode, max_new_tokens=16, block_length=8)
        out = dllm_edit.generate(model, enc["input_ids"], generation_config=cfg, tokenizer=tokenizer)
        text = tokenizer.decode(out.sequences[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        print(
            f"{mode:>8}: {prompt}{text}   (expected {held_out[0]['completion']}, "
            f"{out.num_forwards.item()} forwards)"
        )


if __name__ == "__main__":
    main()
