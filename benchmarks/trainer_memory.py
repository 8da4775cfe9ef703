"""Peak memory of a trainer step, logits path vs fused-linear path (`fused_lm_head`), on the CPU.

One step is what `EditSFTTrainer.compute_loss` + backward runs (`DiffusionForward` in the
block-diffusion form, `edit_objective`, `loss.backward()`), or what `EBPOTrainer` runs for the
policy's ELBO (`elbo_token_logps` with `--elbo-timesteps` forwards, backward of its sum), on a random
Llama with a large vocabulary (default: V = 157184 as LLaDA2.x, hidden 256, 2 layers, untied
embeddings, batch 2 x 256 tokens, float32).

Memory: the worst of `--processes` (default 3) fresh child processes per case. Each child builds
the model and batch, runs one warm-up step, drops the gradients (as the Trainer's `zero_grad` does),
resets the resident-set high-water mark (Linux `VmHWM`, through `/proc/self/clear_refs`) and reports
the high-water mark of the measured step minus the resident set just before it: activations, logits,
their gradients and the parameter gradients, every byte the step touches. Each child then times
`--repeats` more steps (median).

    python benchmarks/trainer_memory.py            # the table (about a minute on 2 cores)
    python benchmarks/trainer_memory.py --tiny     # V = 48: checks both paths give the same loss
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from dllm_edit.trainers import DiffusionForward, elbo_token_logps
from dllm_edit.trainers.objective import edit_objective

MiB = 2**20
CASES = ("sft_logits", "sft_fused", "elbo_logits", "elbo_fused")


def build(args: argparse.Namespace, case: str) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    """The model and a closure computing the step's loss for `case`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).train()
    mask_id = args.vocab - 1
    gen = torch.Generator().manual_seed(1)
    clean = torch.randint(0, args.vocab - 1, (args.batch, args.length), generator=gen)  # [B, T]
    valid = torch.ones_like(clean, dtype=torch.bool)  # [B, T]
    response = torch.arange(args.length)[None].expand_as(clean) >= args.length // 4  # [B, T]
    noisy = torch.where(response & (torch.rand(clean.shape, generator=gen) < 0.5), mask_id, clean)  # [B, T]
    rate = torch.full(clean.shape, 0.5)  # [B, T]
    forward = DiffusionForward(
        model, "block_diffusion", args.block_length, fused_lm_head=case.endswith("fused")
    )
    seeds = torch.arange(args.batch)

    def sft() -> torch.Tensor:
        scores = forward.scores(noisy, clean, valid)
        return edit_objective(scores, noisy, clean, response, mask_token_id=mask_id, mask_rate=rate).loss

    def elbo() -> torch.Tensor:
        logps = elbo_token_logps(
            forward,
            clean,
            valid,
            response,
            seeds,
            mask_token_id=mask_id,
            num_timesteps=args.elbo_timesteps,
            t_min=0.1,
            t_max=1.0,
        )
        return -logps.sum() / response.sum()

    return model, sft if case.startswith("sft") else elbo


def step(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor]) -> float:
    model.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    return float(loss.detach())


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def probe(case: str, args: argparse.Namespace) -> None:
    """Child process: print the step's peak extra resident bytes and its median time."""
    torch.set_num_threads(args.threads)
    model, loss_fn = build(args, case)
    step(model, loss_fn)  # warm-up
    model.zero_grad(set_to_none=True)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _status_kib("VmRSS")
    loss = step(model, loss_fn)
    peak = _status_kib("VmHWM")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step(model, loss_fn)
        times.append(time.perf_counter() - start)
    print(json.dumps({"extra": (peak - before) * 1024, "seconds": statistics.median(times), "loss": loss}))


def measure(case: str, args: argparse.Namespace) -> list[dict[str, float]]:
    cmd = [sys.executable, __file__, "--probe", case]
    for name in ("vocab", "hidden", "layers", "batch", "length", "block_length", "elbo_timesteps"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    cmd += ["--threads", str(args.threads), "--repeats", str(args.repeats)]
    runs = []
    for _ in range(args.processes):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs


def tiny_check() -> None:
    """Both paths give the same loss and gradients on a small vocabulary (what CI runs)."""
    args = argparse.Namespace(
        vocab=48, hidden=32, layers=2, batch=2, length=16, block_length=4, elbo_timesteps=2
    )
    for kind in ("sft", "elbo"):
        results = []
        for case in (f"{kind}_logits", f"{kind}_fused"):
            model, loss_fn = build(args, case)
            loss = step(model, loss_fn)
            results.append((loss, {k: p.grad.clone() for k, p in model.named_parameters()}))
        (plain, plain_grads), (fused, fused_grads) = results
        if abs(plain - fused) > 1e-5 * max(1.0, abs(plain)):
            raise SystemExit(f"{kind}: the fused loss {fused} differs from the logits path's {plain}")
        for name, grad in plain_grads.items():
            torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
        print(f"{kind}: loss {plain:.6f} (logits) = {fused:.6f} (fused), gradients equal: OK")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", type=int, default=157184)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--elbo-timesteps", type=int, default=2)
    p.add_argument("--processes", type=int, default=3, help="fresh processes per case (memory: worst)")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per process (median)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="V = 48: check the paths agree, no table")
    p.add_argument("--probe", choices=CASES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tiny:
        tiny_check()
        return
    if args.probe:
        probe(args.probe, args)
        return
    print(
        f"V={args.vocab}, hidden {args.hidden}, {args.layers} layers, batch {args.batch} x {args.length}, "
        f"block {args.block_length}, float32, {args.threads} threads; memory: worst of {args.processes} "
        f"fresh processes; time: median of {args.repeats} steps per process, median over processes\n"
    )
    print("| step | path | peak extra MiB (worst) | all processes | step s (median) | loss |")
    print("|---|---|---|---|---|---|")
    worst: dict[str, float] = {}
    for case in CASES:
        runs = measure(case, args)
        extras = [r["extra"] / MiB for r in runs]
        worst[case] = max(extras)
        seconds = statistics.median(r["seconds"] for r in runs)
        kind, path = case.split("_")
        listed = ", ".join(f"{e:.0f}" for e in extras)
        print(f"| {kind} | {path} | {worst[case]:.0f} | {listed} | {seconds:.2f} | {runs[0]['loss']:.4f} |")
    for kind in ("sft", "elbo"):
        ratio = worst[f"{kind}_fused"] / worst[f"{kind}_logits"]
        print(f"\n{kind}: fused / logits peak = {ratio:.2f}", end="")
    print()


if __name__ == "__main__":
    main()
