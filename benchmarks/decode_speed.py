"""Decoding speed of the engine on tiny random block-causal models (CPU).

Default run: a random Llama. Rows: (a) cache off, batch 1 (the reference decoder's cost model: the
whole window re-run at every step), (b) cache on, batch 1, (c) cache on, batch B, (d) cache on,
batch 1, multi-block editing with a window of one block (the cost of MBE; its quality needs a
trained model, see the shipped model). Each row reports the median wall time over `--repeats` runs,
forwards, and tokens/s (completion tokens of the whole batch per second). The speed-ups are ratios
measured in the same run. Outputs of (a) and (b) are compared token for token.

`--vs-reference`: `dllm_edit.generate` (defaults: cache on) against the project's port of the
LLaDA2.1 reference decoder (`tests/helpers/reference_decoder.py`: batch 1, no cache, the whole window re-run
at every forward) on a random block-causal MoE model (`Qwen3MoeForCausalLM`, a confident head), for
the S and Q presets. The runs alternate in one process (reference, dllm_edit, dllm_edit batch B,
...), so a slow spell of a shared machine hits all of them; every run's tokens are compared with the
reference's and the script exits with status 1 on any difference. It prints, per preset, the median
and the range of the wall times and of the per-round ratio, the batch-B vs batch-1 tokens/s, and a
profile: the share of dllm_edit's wall time spent inside the model's forward (the rest is the
loop, the cache, the candidate step). `--tiny` shrinks everything to a seconds-long check (CI runs
it; it never asserts a time).

    python benchmarks/decode_speed.py                                   # tiny Llama: hidden 64, 2 layers
    python benchmarks/decode_speed.py --hidden 256 --layers 4 --vocab 4096  # small Llama
    python benchmarks/decode_speed.py --vs-reference                    # MoE hidden 128, P=256, G=256
    python benchmarks/decode_speed.py --vs-reference --prompt-len 64 --hidden 256
    python benchmarks/decode_speed.py --vs-reference --tiny             # the CI check
    python benchmarks/decode_speed.py --moe-forward [--compile]         # ms per MoE forward by width
    python benchmarks/decode_speed.py --device-grid --hidden 768 --layers 8 --vocab 32000  # GPU, ~125M
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

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


def build_moe(vocab: int, hidden: int, layers: int, seed: int) -> torch.nn.Module:
    """A random block-causal MoE decoder (Qwen3-MoE: 8 experts, 2 per token) with a confident head.

    The head is scaled up (so thresholds change decisions, as on a trained model) and the mask
    token (id `vocab - 1`) is never its argmax, so the reference decoder, which has no mask guard,
    always finishes.
    """
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    heads = max(2, hidden // 32)
    cfg = Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        moe_intermediate_size=hidden,
        num_experts=8,
        num_experts_per_tok=2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    model = Qwen3MoeForCausalLM(cfg).eval()
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight * 8.0)
        head.bias.zero_()
        head.bias[vocab - 1] = -1e4
    model.lm_head = head
    return model


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


class ForwardTimer:
    """Wall time spent inside `model.forward` (forward pre-hook to forward hook)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.total = 0.0
        self.calls = 0
        self._start = 0.0
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, *_: object) -> None:
        self._start = time.perf_counter()

    def _post(self, *_: object) -> None:
        self.total += time.perf_counter() - self._start
        self.calls += 1


def spread(values: list[float]) -> str:
    """`median (min-max)` of a list of numbers."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def vs_reference(args: argparse.Namespace) -> bool:
    """Time generate against the reference decoder; return True when every run's tokens matched."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
    from reference_decoder import reference_generate_21

    model = build_moe(args.vocab, args.hidden, args.layers, args.seed)
    if args.experts is not None:
        if not hasattr(model, "set_experts_implementation"):
            raise SystemExit("--experts needs transformers >= 5 (PreTrainedModel.set_experts_implementation)")
        model.set_experts_implementation(args.experts)
    experts = getattr(model.config, "_experts_implementation", None) or "eager"
    params = sum(p.numel() for p in model.parameters())
    mask_id, eos_id, pad_id = args.vocab - 1, args.vocab - 2, args.vocab - 3
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, args.vocab - 3, (args.batch, args.prompt_len), generator=g)  # [B, P]
    one = prompts[:1]  # [1, P]
    timer = ForwardTimer(model)
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores, threads {torch.get_num_threads()}; model: "
        f"Qwen3-MoE hidden {args.hidden}, {args.layers} layers, 8 experts (2 active, {experts!r} experts "
        f"implementation), vocab {args.vocab}, "
        f"{params / 1e6:.2f}M params; prompt {args.prompt_len} + {args.new_tokens} new, block "
        f"{args.block_length}, eos_early_stop off; {args.repeats} alternating rounds (median (min-max))"
    )
    print()
    print(
        f"| preset | reference s | dllm_edit s | dllm_edit / reference | batch {args.batch} s "
        f"| batch {args.batch} / batch 1 tokens/s | forwards | in forward | ceiling | identical |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    all_identical = True
    for mode in args.modes:
        cfg = dllm_edit.EditGenerationConfig.from_mode(
            mode,
            max_new_tokens=args.new_tokens,
            block_length=args.block_length,
            mask_token_id=mask_id,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            eos_early_stop=False,
            **({"compile": True} if args.compile else {}),
        )
        ref_kw = dict(
            mask_id=mask_id,
            eos_id=eos_id,
            gen_length=args.new_tokens,
            block_length=args.block_length,
            threshold=cfg.threshold,
            editing_threshold=cfg.editing_threshold,
            max_post_steps=cfg.max_post_steps,
        )
        ours_t, ref_t, batch_t, ratios, batch_gain, shares, ceilings = [], [], [], [], [], [], []
        identical = True
        forwards = 0
        dllm_edit.generate(model, one, generation_config=cfg)  # warm-up (and compilation)
        for _ in range(args.repeats):
            start = time.perf_counter()
            ref = reference_generate_21(model, one, **ref_kw)  # [n <= G]
            ref_t.append(time.perf_counter() - start)

            timer.total = 0.0
            start = time.perf_counter()
            out = dllm_edit.generate(model, one, generation_config=cfg)
            ours_t.append(time.perf_counter() - start)
            shares.append(timer.total / ours_t[-1])
            ceilings.append(ref_t[-1] / timer.total)  # the ratio if everything outside forward cost 0
            forwards = int(out.num_forwards[0])

            start = time.perf_counter()
            out_b = dllm_edit.generate(model, prompts, generation_config=cfg)
            batch_t.append(time.perf_counter() - start)

            ratios.append(ref_t[-1] / ours_t[-1])
            batch_gain.append(args.batch * ours_t[-1] / batch_t[-1])
            completion = out.sequences[0, args.prompt_len :]  # [G]
            identical &= torch.equal(completion[: len(ref)], ref)
            identical &= bool((completion[len(ref) :] == pad_id).all())  # cut after the first EOS
            identical &= torch.equal(out_b.sequences[0], out.sequences[0])
        all_identical &= identical
        print(
            f"| {mode} | {spread(ref_t)} | {spread(ours_t)} | {spread(ratios)}x | {spread(batch_t)} "
            f"| {spread(batch_gain)}x | {forwards} | {statistics.median(shares):.0%} "
            f"({min(shares):.0%}-{max(shares):.0%}) | {spread(ceilings)}x | {identical} |",
            flush=True,
        )
    print()
    print(
        "dllm_edit: defaults of the preset (cache on), batch 1; batch row 0 must equal the prompt alone. "
        "in forward: share of dllm_edit's batch-1 wall time inside model.forward (the rest is the "
        "decoding loop, the cache bookkeeping and the candidate step). ceiling: reference s / dllm_edit's "
        "seconds inside model.forward, the ratio a decoding loop costing nothing would reach with the "
        "same forwards."
    )
    print(f"tokens identical to the reference in every run: {all_identical}")
    return all_identical


@torch.no_grad()
def moe_forward_cost(args: argparse.Namespace) -> None:
    """ms per forward of the `--vs-reference` MoE model over 32, 64 and 512 positions (no cache), for
    each transformers experts implementation (and compiled, with `--compile`): the fixed cost per
    forward that bounds what a cached decoder can gain over one that re-runs the whole window."""
    widths = (32, 64, 512)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; Qwen3-MoE hidden {args.hidden}, "
        f"{args.layers} layers, vocab {args.vocab}; median of {args.repeats} calls after 3 warm-up calls"
    )
    print()
    print("| experts | compiled | " + " | ".join(f"ms, {w} positions" for w in widths) + " | 512 / 32 |")
    print("|---|---|" + "---:|" * (len(widths) + 1))
    ids = torch.randint(0, args.vocab - 3, (1, max(widths)), generator=torch.Generator().manual_seed(0))
    kinds = ["eager", "grouped_mm", "batched_mm"] if args.experts is None else [args.experts]
    for experts in kinds:
        for compiled in (False, True) if args.compile else (False,):
            model = build_moe(args.vocab, args.hidden, args.layers, args.seed)
            if hasattr(model, "set_experts_implementation"):
                model.set_experts_implementation(experts)
            elif experts != "eager":
                continue  # transformers 4.x: the experts loop only
            call = torch.compile(model, dynamic=True) if compiled else model
            ms = []
            for width in widths:
                for _ in range(3):
                    call(input_ids=ids[:, :width])
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    call(input_ids=ids[:, :width])
                    times.append(time.perf_counter() - start)
                ms.append(1e3 * statistics.median(times))
            cells = " | ".join(f"{m:.2f}" for m in ms)
            done = "yes" if compiled else "no"
            print(f"| {experts} | {done} | {cells} | {ms[-1] / ms[0]:.1f} |", flush=True)


def device_grid(args: argparse.Namespace) -> None:
    """tokens/s of S vs Q, cache on vs off vs transformers' `StaticCache` (`block_causal_static`),
    compile off vs on, on `--device` in `--dtype` (a random block-causal Llama; the GPU script runs it
    at ~100M parameters in bfloat16)."""
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    model = build_model(args.vocab, args.hidden, args.layers, args.seed).to(device=device, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, args.vocab - 2, (args.batch, args.prompt_len), generator=g).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    print(
        f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, "
        f"torch {torch.__version__}; "
        f"Llama hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, {params / 1e6:.0f}M params, "
        f"{args.dtype}; batch {args.batch}, prompt {args.prompt_len} + {args.new_tokens}, block "
        f"{args.block_length}; median of {args.repeats} after one untimed run (compilation)"
    )
    print()
    print("| preset | cache | compile | wall s | forwards | tokens/s | same tokens as cache on, eager |")
    print("|---|---|---|---:|---:|---:|---|")
    for mode in args.modes:
        base = None
        # (cache, use_cache, compile, adapter): the preallocated cache, none, and transformers' StaticCache
        settings = [("on", True, False, "block_causal"), ("off", False, False, "block_causal")]
        settings.append(("static", True, False, "block_causal_static"))
        if device.type != "cpu" or args.compile:  # compiling takes minutes on a CPU: --compile to include it
            settings += [("on", True, True, "block_causal"), ("static", True, True, "block_causal_static")]
        for cache_label, use_cache, compile_, adapter in settings:
            cfg = dllm_edit.EditGenerationConfig.from_mode(
                mode,
                max_new_tokens=args.new_tokens,
                block_length=args.block_length,
                mask_token_id=args.vocab - 1,
                eos_token_id=args.vocab - 2,
                eos_early_stop=False,
                use_cache=use_cache,
                compile=compile_,
            )

            def run(cfg=cfg, adapter=adapter):
                out = dllm_edit.generate(model, prompts, generation_config=cfg, adapter=adapter)
                sync()
                return out

            run()
            t, out = timed(run, args.repeats)
            base = out.sequences if base is None else base
            print(
                f"| {mode} | {cache_label} | {'on' if compile_ else 'off'} | {t:.2f} "
                f"| {int(out.num_forwards.max())} | {args.batch * args.new_tokens / t:.0f} "
                f"| {torch.equal(out.sequences, base)} |",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vs-reference", action="store_true", help="time vs tests/helpers/reference_decoder.py")
    p.add_argument("--tiny", action="store_true", help="seconds-long run for CI (with --vs-reference)")
    p.add_argument("--compile", action="store_true", help="EditGenerationConfig(compile=True)")
    p.add_argument(
        "--moe-forward",
        action="store_true",
        help="ms per forward of the --vs-reference MoE model at 32/64/512 positions, per experts kind",
    )
    p.add_argument("--device-grid", action="store_true", help="S/Q x cache x compile tokens/s on --device")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--mode", default="quality", choices=sorted(dllm_edit.MODES))
    p.add_argument("--modes", nargs="+", default=["speedy", "quality"], choices=sorted(dllm_edit.MODES))
    p.add_argument("--repeats", type=int, default=None, help="default 3 (5 with --vs-reference)")
    p.add_argument("--vocab", type=int, default=None, help="default 2048 (512 with --vs-reference)")
    p.add_argument("--hidden", type=int, default=None, help="default 64 (128 with --vs-reference)")
    p.add_argument("--layers", type=int, default=None, help="default 2 (4 with --vs-reference)")
    p.add_argument(
        "--experts",
        default=None,
        choices=["eager", "grouped_mm", "batched_mm"],
        help="the MoE model's experts implementation (transformers >= 5; default: transformers' choice)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tiny:
        if not args.vs_reference:
            p.error("--tiny needs --vs-reference")
        args.prompt_len, args.new_tokens, args.block_length, args.batch = 12, 16, 8, 2
        args.repeats, args.vocab, args.hidden, args.layers = 1, 64, 32, 1
    if args.moe_forward and args.repeats is None:
        args.repeats = 20
    defaults = (5, 512, 128, 4) if args.vs_reference or args.moe_forward else (3, 2048, 64, 2)
    for name, value in zip(("repeats", "vocab", "hidden", "layers"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.vs_reference:
        return 0 if vs_reference(args) else 1
    if args.device_grid:
        device_grid(args)
        return 0
    if args.moe_forward:
        moe_forward_cost(args)
        return 0
    llama_table(args)
    return 0


def llama_table(args: argparse.Namespace) -> None:
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
    sys.exit(main())
