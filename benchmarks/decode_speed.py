"""Decoding speed of the engine on a tiny random block-causal model (CPU).

Rows: (a) cache off, batch 1 (the reference decoder's cost model: the whole window re-run at every
step), (b) cache on, batch 1, (c) cache on, batch B, (d) cache on, batch 1, multi-block editing with
a window of one block (the cost of MBE; its quality needs a trained model, see the shipped model).
Each row reports the median wall time over `--repeats` runs, forwards, and tokens/s (completion
tokens of the whole batch per second). The speed-ups are ratios measured in the same run. Outputs
of (a) and (b) are compared token for token.

    python benchmarks/decode_speed.py                                   # tiny: hidden 64, 2 layers
    python benchmarks/decode_speed.py --hidden 256 --layers 4 --vocab 4096  # small
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit


def build_model(vocab: int, hidden: int, layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 64),
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(cfg).eval()


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--mode", default="quality", choices=sorted(dllm_edit.MODES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    model = build_model(args.vocab, args.hidden, args.layers, args.seed)
    mask_id, eos_id = args.vocab - 1, args.vocab - 2
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        args.mode,
        max_new_tokens=args.new_tokens,
        block_length=args.block_length,
        mask_token_id=mask_id,
        eos_token_id=eos_id,
        eos_early_stop=False,
    )
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, args.vocab - 2, (args.batch, args.prompt_len), generator=g)
    one = prompts[:1]

    rows = []
    t_off, out_off = timed(
        lambda: dllm_edit.generate(model, one, generation_config=cfg, use_cache=False), args.repeats
    )
    t_on, out_on = timed(
        lambda: dllm_edit.generate(model, one, generation_config=cfg, use_cache=True), args.repeats
    )
    t_b, out_b = timed(
        lambda: dllm_edit.generate(model, prompts, generation_config=cfg, use_cache=True), args.repeats
    )
    mbe_cfg = cfg.replace(multi_block_edit=True, multi_block_window=1)
    t_mbe, out_mbe = timed(
        lambda: dllm_edit.generate(model, one, generation_config=mbe_cfg, use_cache=True), args.repeats
    )
    identical = torch.equal(out_off.sequences, out_on.sequences)
    batch_row0 = torch.equal(out_b.sequences[0], out_on.sequences[0])
    for name, t, out, n in (
        ("(a) cache off, batch 1", t_off, out_off, 1),
        ("(b) cache on,  batch 1", t_on, out_on, 1),
        (f"(c) cache on,  batch {args.batch}", t_b, out_b, args.batch),
        ("(d) cache on, MBE w=1", t_mbe, out_mbe, 1),
    ):
        rows.append((name, t, int(out.num_forwards.max()), n * args.new_tokens / t))

    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, model: Llama hidden {args.hidden}, "
        f"{args.layers} layers, vocab {args.vocab}; prompt {args.prompt_len} + {args.new_tokens} new, "
        f"block {args.block_length}, mode {args.mode}; median of {args.repeats}"
    )
    print(f"| {'run':<24} | {'wall s':>8} | {'forwards':>8} | {'tokens/s':>9} |")
    print(f"|{'-' * 26}|{'-' * 10}|{'-' * 10}|{'-' * 11}|")
    for name, t, fwd, tps in rows:
        print(f"| {name:<24} | {t:8.2f} | {fwd:8d} | {tps:9.1f} |")
    print(f"cache speed-up (a)/(b): {t_off / t_on:.2f}x   outputs identical: {identical}")
    print(f"batch throughput (c)/(b): {rows[2][3] / rows[1][3]:.2f}x   batch row 0 == alone: {batch_row0}")


if __name__ == "__main__":
    main()
