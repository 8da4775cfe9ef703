"""Does EBPO raise the held-out reward? A small SFT checkpoint, then N EBPO steps, on the CPU.

A small Llama (decoding block-causally) learns two-digit addition with edit-aware SFT for a short
budget (so that it is right only part of the time), then EBPO optimises the exact-match reward of
its rollouts (S preset, temperature 1, group size 8). The held-out split (a different seed) is
scored before and after, two ways:

- **sampled**: the reward EBPO optimises — `--samples` rollouts per prompt with the rollout decoding
  (S preset, temperature 1); mean with a 95% bootstrap interval over prompts;
- **greedy**: one greedy S-preset decode per prompt; exact match with a 95% Wilson interval.

Rollout tokens per forward are reported for both. Each configuration runs `--seeds` times (different
EBPO seeds from the same SFT checkpoint); the table gives every run and the median change.

    python benchmarks/ebpo_toy.py                  # ~5 min on a 2-core CPU (2 EBPO seeds)
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit
from dllm_edit.data import build_char_tokenizer, synthetic_examples
from dllm_edit.trainers import EBPOConfig, EBPOTrainer, EditSFTConfig, EditSFTTrainer, exact_match_reward

BLOCK = 4
COMMON = dict(
    report_to="none",
    save_strategy="no",
    activation_checkpointing=False,
    use_cpu=True,
    disable_tqdm=True,
    logging_steps=50,
)


def wilson(successes: float, n: int) -> tuple[float, float]:
    """95% Wilson interval of a proportion."""
    if n == 0:
        return (0.0, 1.0)
    z, p = 1.96, successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def bootstrap(values: list[float], seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the mean."""
    gen = torch.Generator().manual_seed(seed)
    data = torch.tensor(values)
    idx = torch.randint(0, len(values), (draws, len(values)), generator=gen)
    means = data[idx].mean(dim=1).sort().values
    return means[int(0.025 * draws)].item(), means[int(0.975 * draws)].item()


@torch.no_grad()
def score(model, tokenizer, rows, *, temperature: float, samples: int, seed: int):
    """Per-prompt mean exact match and the mean tokens per forward over `samples` decodes each."""
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "speedy", max_new_tokens=8, block_length=BLOCK, temperature=temperature
    )
    prompts = [r["prompt"] for r in rows for _ in range(samples)]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    out = dllm_edit.generate(
        model.eval(),
        enc["input_ids"],
        attention_mask=enc["attention_mask"],
        generation_config=cfg,
        tokenizer=tokenizer,
        generator=torch.Generator().manual_seed(seed),
    )
    texts = tokenizer.batch_decode(out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    hits = exact_match_reward(texts, completion=[r["completion"] for r in rows for _ in range(samples)])
    per_prompt = [sum(hits[i * samples : (i + 1) * samples]) / samples for i in range(len(rows))]
    return per_prompt, out.tokens_per_forward.mean().item()


def evaluate(model, tokenizer, rows, samples: int) -> dict[str, float]:
    sampled, tpf_sampled = score(model, tokenizer, rows, temperature=1.0, samples=samples, seed=123)
    greedy, tpf_greedy = score(model, tokenizer, rows, temperature=0.0, samples=1, seed=0)
    lo, hi = bootstrap(sampled)
    glo, ghi = wilson(sum(greedy), len(greedy))
    return dict(
        sampled=statistics.fmean(sampled),
        sampled_lo=lo,
        sampled_hi=hi,
        tpf_sampled=tpf_sampled,
        greedy=statistics.fmean(greedy),
        greedy_lo=glo,
        greedy_hi=ghi,
        tpf_greedy=tpf_greedy,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--ebpo-steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=128, help="completions per EBPO step")
    parser.add_argument("--test", type=int, default=200, help="held-out prompts")
    parser.add_argument("--samples", type=int, default=4, help="sampled decodes per held-out prompt")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)

    tokenizer = build_char_tokenizer("0123456789+=")
    train = synthetic_examples("addition", 4000, difficulty=2)
    test = synthetic_examples("addition", args.test, split="test", difficulty=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=96,
            intermediate_size=288,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=64,
            attn_implementation="sdpa",
        )
    )
    start = time.perf_counter()
    sft = EditSFTTrainer(
        model,
        args=EditSFTConfig(
            output_dir=tempfile.mkdtemp(),
            block_length=BLOCK,
            max_length=16,
            learning_rate=3e-3,
            per_device_train_batch_size=64,
            max_steps=args.sft_steps,
            seed=0,
            **COMMON,
        ),
        train_dataset=Dataset.from_list(train),
        processing_class=tokenizer,
    )
    sft.train()
    checkpoint_dir = tempfile.mkdtemp(prefix="ebpo-toy-sft-")
    sft.save_model(checkpoint_dir)  # reloaded fresh for every EBPO run (a trained model object is not copied)
    checkpoint = LlamaForCausalLM.from_pretrained(checkpoint_dir).eval()
    print(f"SFT: {args.sft_steps} steps in {time.perf_counter() - start:.0f} s")
    before = evaluate(checkpoint, tokenizer, test, args.samples)
    prompts = Dataset.from_list([{"prompt": r["prompt"], "answer": r["completion"]} for r in train])
    runs = []
    for seed in range(args.seeds):
        policy = LlamaForCausalLM.from_pretrained(checkpoint_dir)
        start = time.perf_counter()
        EBPOTrainer(
            policy,
            reward_funcs=exact_match_reward,
            args=EBPOConfig(
                output_dir=tempfile.mkdtemp(),
                num_generations=8,
                per_device_train_batch_size=args.batch,
                rollout_mode="speedy",
                max_completion_length=8,
                block_length=BLOCK,
                temperature=1.0,
                elbo_timesteps=2,
                epsilon=0.2,
                epsilon_high=0.28,
                num_iterations=2,
                learning_rate=args.lr,
                max_steps=args.ebpo_steps,
                seed=seed + 1,
                **COMMON,
            ),
            train_dataset=prompts,
            processing_class=tokenizer,
        ).train()
        seconds = time.perf_counter() - start
        runs.append((seed, evaluate(policy, tokenizer, test, args.samples), seconds))
        print(f"EBPO seed {seed + 1}: {args.ebpo_steps} steps in {seconds:.0f} s")

    def cell(r: dict[str, float], key: str) -> str:
        return f"{100 * r[key]:.1f} [{100 * r[key + '_lo']:.1f}, {100 * r[key + '_hi']:.1f}]"

    print(
        f"\nheld-out: {args.test} prompts (two-digit addition); sampled: {args.samples} decodes per "
        f"prompt, S preset, T=1; greedy: S preset. EBPO: {args.ebpo_steps} steps x {args.batch} "
        f"completions, lr {args.lr}."
    )
    columns = [
        "checkpoint",
        "sampled reward % [95% CI]",
        "greedy exact match % [95% CI]",
        "TPF (S, T=1)",
        "TPF (S)",
    ]
    print("\n| " + " | ".join(columns) + " |")
    print("|---|---|---|---:|---:|")
    print(
        f"| SFT ({args.sft_steps} steps) | {cell(before, 'sampled')} | {cell(before, 'greedy')} | "
        f"{before['tpf_sampled']:.2f} | {before['tpf_greedy']:.2f} |"
    )
    for seed, r, _ in runs:
        print(
            f"| + EBPO (seed {seed + 1}) | {cell(r, 'sampled')} | {cell(r, 'greedy')} | "
            f"{r['tpf_sampled']:.2f} | {r['tpf_greedy']:.2f} |"
        )
    d_sampled = statistics.median(100 * (r["sampled"] - before["sampled"]) for _, r, _ in runs)
    d_greedy = statistics.median(100 * (r["greedy"] - before["greedy"]) for _, r, _ in runs)
    print(
        f"\nmedian change over {len(runs)} EBPO seeds: sampled {d_sampled:+.1f} points, "
        f"greedy {d_greedy:+.1f} points"
    )


if __name__ == "__main__":
    main()
