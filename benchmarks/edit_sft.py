"""Does edit-aware SFT let the Speedy preset keep quality at more tokens per forward? (CPU, small)

Trains the same small block-causal model (a Llama architecture decoding block-causally), from the
same initialisation, on the same synthetic tasks for the same number of steps, three ways:

- `m2t`: masked-diffusion SFT only (edit rate 0, no loss on visible tokens: the LLaDA recipe);
- `m2t+t2t`: the mixed objective (random-token noise on up to `--edit-rate` of the unmasked
  response, clean term λ_clean = 1);
- `m2t+t2t+mtf`: the same plus one Multi-turn Forward turn;
- `m2t+clean` (ablation, `--variants`): no random-token noise, but the clean term (λ_clean = 1);
- `m2t+t2t+stream` (`--variants`): the trainer's defaults, i.e. `m2t+t2t` where a quarter of the
  examples are an editing stream (nothing masked, random replacements only; `editing_stream_rate`).
  The other variants set `editing_stream_rate=0`, as when their table in docs/benchmarks.md was measured.
- `m2t+t2t+stream+ctx` (`--variants`): the same, with half of the replacements copying another
  token of the same response (`edit_noise_in_context=0.5`): plausible errors instead of uniform noise.

Each checkpoint then decodes the held-out split (a different seed) with the Q preset, the S preset,
and the S preset with editing off (`editing_threshold=None`, M2T at τ_mask = 0.5), reporting
exact-match accuracy, tokens per forward (completion tokens / forwards, median over prompts is
not used: the mean over rows, as the paper's TPF) and the training time.

    python benchmarks/edit_sft.py                    # ~10 min on a 2-core CPU
    python benchmarks/edit_sft.py --steps 300 --quick
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.data import build_char_tokenizer, synthetic_mixture
from dllm_edit.trainers import EditSFTConfig, EditSFTTrainer

FAMILIES = ("addition", "sort", "reverse", "brackets")
VARIANTS = {
    "m2t": dict(edit_rate_min=0.0, edit_rate_max=0.0, clean_loss_weight=0.0, editing_stream_rate=0.0),
    # ablation: the clean term without noise
    "m2t+clean": dict(edit_rate_min=0.0, edit_rate_max=0.0, editing_stream_rate=0.0),
    "m2t+t2t": dict(editing_stream_rate=0.0),
    "m2t+t2t+mtf": dict(mtf_turns=2, editing_stream_rate=0.0),
    # the trainer's default: a quarter of the examples unmasked, with random replacements only
    "m2t+t2t+stream": dict(),
    # the same, half of the replacements copied from the response itself (plausible errors)
    "m2t+t2t+stream+ctx": dict(edit_noise_in_context=0.5),
}
PRESETS = {
    "Q": dict(mode="quality"),
    "S": dict(mode="speedy"),
    "S, no edit": dict(mode="speedy", editing_threshold=None),
}


def build_model(vocab: int, hidden: int, layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        attn_implementation="sdpa",
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def train(variant: str, args: argparse.Namespace, tokenizer, data: Dataset) -> tuple[LlamaForCausalLM, float]:
    model = build_model(len(tokenizer), args.hidden, args.layers, seed=args.seed)
    config = EditSFTConfig(
        output_dir=f"/tmp/dllm_edit_bench_edit_sft/{variant}",
        block_length=args.block_length,
        max_length=32,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, args.steps // 20),
        max_steps=args.steps,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        seed=args.seed,
        disable_tqdm=True,
        **{"edit_rate_max": args.edit_rate, **VARIANTS[variant]},
    )
    trainer = EditSFTTrainer(model, args=config, train_dataset=data, processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    return trainer.model.eval(), time.perf_counter() - start


@torch.no_grad()
def evaluate(
    model, tokenizer, test: list[dict], preset: dict, args: argparse.Namespace
) -> tuple[float, float]:
    overrides = {k: v for k, v in preset.items() if k != "mode"}
    config = dllm_edit.EditGenerationConfig.from_mode(
        preset["mode"], max_new_tokens=16, block_length=args.block_length, **overrides
    )
    correct, tpf = [], []
    for start in range(0, len(test), 64):
        chunk = test[start : start + 64]
        enc = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True)
        out = dllm_edit.generate(
            model,
            enc["input_ids"],
            attention_mask=enc["attention_mask"],
            generation_config=config,
            tokenizer=tokenizer,
        )
        texts = tokenizer.batch_decode(
            out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        correct += [float(t == r["completion"]) for t, r in zip(texts, chunk, strict=True)]
        tpf += out.tokens_per_forward.tolist()
    return 100 * sum(correct) / len(correct), sum(tpf) / len(tpf)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--block-length", type=int, default=8)
    parser.add_argument("--edit-rate", type=float, default=0.2)
    parser.add_argument("--train-per-family", type=int, default=5000)
    parser.add_argument("--test-per-family", type=int, default=100)
    parser.add_argument(
        "--variants", nargs="+", default=["m2t", "m2t+t2t", "m2t+t2t+mtf"], choices=list(VARIANTS)
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small data, for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.train_per_family, args.test_per_family = 500, 25
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    tokenizer = build_char_tokenizer()
    data = Dataset.from_list(
        synthetic_mixture(FAMILIES, args.train_per_family, split="train", seed=args.seed)
    )
    test = synthetic_mixture(FAMILIES, args.test_per_family, split="test", seed=args.seed)
    print(
        f"model: Llama hidden {args.hidden}, {args.layers} layers, char vocab {len(tokenizer)}; "
        f"{args.steps} steps x batch {args.batch_size}; block {args.block_length}; "
        f"held-out {len(test)} prompts ({', '.join(FAMILIES)})"
    )
    rows = []
    for variant in args.variants:
        model, seconds = train(variant, args, tokenizer, data)
        for name, preset in PRESETS.items():
            accuracy, tpf = evaluate(model, tokenizer, test, preset, args)
            rows.append((variant, name, accuracy, tpf, seconds))
            print(
                f"  {variant:<12} {name:<11} acc {accuracy:5.1f}%  TPF {tpf:.2f}  (trained {seconds:.0f} s)"
            )
    print("\n| training | preset | exact match (%) | tokens / forward | training time (s) |")
    print("|---|---|---:|---:|---:|")
    for variant, name, accuracy, tpf, seconds in rows:
        print(f"| {variant} | {name} | {accuracy:.1f} | {tpf:.2f} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
