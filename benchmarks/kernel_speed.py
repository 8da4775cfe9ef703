"""Vocabulary kernels: the dispatcher paths against the naive softmax paths (CPU, and GPU when present).

CPU section (the dispatcher's chunked torch path; default 2048 rows x V = 157184, float32 logits):

* peak extra memory of one call, naive vs dispatcher: the worst of `--processes` (default 5) fresh
  child processes per case. Each child allocates and touches its inputs, makes one warm-up call,
  resets the resident-set high-water mark (Linux `VmHWM`, through `/proc/self/clear_refs`) and
  reports the high-water mark of the measured call minus the resident set just before it. The
  children run with the allocator's defaults, as a user's process does (glibc may or may not reuse
  freed blocks, differently from run to run: hence several processes and the worst of them);
  `--mmap-threshold` runs them with `MALLOC_MMAP_THRESHOLD_=65536` instead, so every tensor larger
  than 64 KiB is its own mmap and the resident set follows the live tensors. This counts every byte
  the call touches, torch or not.
* wall time: median of `--repeats` calls after one warm-up, in this process, the naive and the
  dispatcher calls interleaved.

GPU section (runs when CUDA is available, else prints that it is skipped): achieved GB/s of the
Triton `candidates` kernel (logits bytes read / time) against the device copy bandwidth (bytes read
and written by `dst.copy_(src)` / time) of the same tensor, the speed-up over the torch path and the
naive softmax, for float32 and bfloat16; `masked_logprob` forward + backward, logits input and fused
linear input, against the naive log-softmax, with peak extra memory (`torch.cuda.max_memory_allocated`).
It also checks the kernels against the torch path (greedy tokens equal, probabilities and
log-probabilities close) and prints OK / MISMATCH lines.

    python benchmarks/kernel_speed.py               # CPU tables, then the GPU section if CUDA is present
    python benchmarks/kernel_speed.py --gpu-only    # the GPU section alone (about a minute on an H200)
    python benchmarks/kernel_speed.py --rows 512    # a smaller CPU run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from dllm_edit.kernels import (
    candidate_stats,
    candidates,
    edit_candidates,
    masked_logprob,
    masked_logprob_reference,
)

MiB = 2**20


# --- the naive paths: what decoding and training do without the kernels -------------------------


def naive_candidates(logits: torch.Tensor, temperature: float = 0.0, generator=None):
    """Full float32 softmax `[N, V]`, then max (greedy) or multinomial (sampling)."""
    x = logits.float()
    if temperature > 0:
        x = x / temperature
    p = torch.softmax(x, dim=-1)  # [N, V]
    if temperature > 0:
        tok = torch.multinomial(p, 1, generator=generator)  # [N, 1]
        return tok.squeeze(-1), p.gather(-1, tok).squeeze(-1)
    prob, tok = p.max(dim=-1)
    return tok, prob


def naive_edit_candidates(logits: torch.Tensor, current: torch.Tensor):
    p = torch.softmax(logits.float(), dim=-1)  # [N, V]
    prob, tok = p.max(dim=-1)
    return tok, prob, p.gather(-1, current[:, None]).squeeze(-1)


def naive_stats(logits: torch.Tensor, prev_logp: torch.Tensor | None = None):
    """The margin/entropy rules' statistics (and the KL to `prev_logp`) from a full softmax `[N, V]`."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    p = logp.exp()  # [N, V]
    top2, tok = p.topk(2, dim=-1)  # [N, 2]
    entropy = -(p * logp).sum(-1)  # [N]
    kl = None if prev_logp is None else (p * (logp - prev_logp)).sum(-1)  # [N]
    return tok[:, 0], top2, entropy, kl, logp  # logp: what the next step's KL needs


def logprob_step(fn: Callable, leaf: torch.Tensor, targets: torch.Tensor, **kwargs) -> None:
    """Forward + backward of `fn` (masked_logprob or its reference) with a unit cotangent."""
    leaf.grad = None
    for t in kwargs.values():
        if isinstance(t, torch.Tensor):
            t.grad = None
    fn(leaf, targets, **kwargs).sum().backward()


# --- CPU -------------------------------------------------------------------------------------------


def cpu_cases(
    rows: int, vocab: int, lin_rows: int, hidden: int
) -> dict[str, Callable[[], Callable[[], object]]]:
    """Case name -> builder of (inputs, call). Builders allocate and touch the inputs."""

    def logits():
        x = torch.empty(rows, vocab)
        x.normal_(generator=torch.Generator().manual_seed(0))  # in place: no temporary
        return x

    def targets(n, v):
        return torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(1))

    def cand(naive):
        def build():
            x = logits()
            return (lambda: naive_candidates(x)) if naive else (lambda: candidates(x))

        return build

    def sample(naive):
        def build():
            x = logits()
            g = torch.Generator().manual_seed(2)
            if naive:
                return lambda: naive_candidates(x, 1.0, g)
            return lambda: candidates(x, temperature=1.0, generator=g)

        return build

    def edit(naive):
        def build():
            x, cur = logits(), targets(rows, vocab)
            return (lambda: naive_edit_candidates(x, cur)) if naive else (lambda: edit_candidates(x, cur))

        return build

    def stats(naive):  # top-2 and entropy: what Dream's orders, EB-Sampler and Prophet read
        def build():
            x = logits()
            if naive:
                return lambda: naive_stats(x)
            return lambda: candidate_stats(x, {"top_prob", "entropy"})

        return build

    def stats_kl(naive):  # KLASS: the KL to the previous step, whose distribution the call keeps
        def build():
            x = logits()
            if naive:
                prev_logp = torch.log_softmax(logits(), dim=-1)  # [N, V], the previous step's, kept
                return lambda: naive_stats(x, prev_logp)
            kept = candidate_stats(logits(), {"kl"})
            prev = (kept.kept_logits, kept.kept_lse)  # [N, V], [N]: the previous step's, kept
            return lambda: candidate_stats(x, {"top_prob", "kl"}, prev=prev)

        return build

    def lp_logits(naive):
        def build():
            x = logits().requires_grad_(True)
            t = targets(rows, vocab)
            fn = masked_logprob_reference if naive else masked_logprob
            return lambda: logprob_step(fn, x, t)

        return build

    def lp_linear(naive):
        def build():
            g = torch.Generator().manual_seed(3)
            h = torch.randn(lin_rows, hidden, generator=g).requires_grad_(True)
            w = (torch.randn(vocab, hidden, generator=g) / hidden**0.5).requires_grad_(True)
            t = targets(lin_rows, vocab)
            fn = masked_logprob_reference if naive else masked_logprob
            return lambda: logprob_step(fn, h, t, weight=w)

        return build

    out: dict[str, Callable[[], Callable[[], object]]] = {}
    for name, maker in (
        ("candidates greedy", cand),
        ("candidates T=1 sampling", sample),
        ("edit_candidates greedy", edit),
        ("candidate_stats second+entropy", stats),
        ("candidate_stats second+kl", stats_kl),
        ("masked_logprob fwd+bwd, logits", lp_logits),
        (f"masked_logprob fwd+bwd, linear H={hidden}", lp_linear),
    ):
        out[f"{name}|naive"] = maker(True)
        out[f"{name}|dispatcher"] = maker(False)
    return out


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_probe(case: str, args: argparse.Namespace) -> None:
    """Child process: print the peak extra resident memory (bytes) of one call of `case`."""
    torch.set_num_threads(args.threads)
    call = cpu_cases(args.rows, args.vocab, args.lin_rows, args.hidden)[case]()
    call()  # warm-up: thread pools, lazy initialisation
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _status_kib("VmRSS")
    call()
    peak = _status_kib("VmHWM")
    print(json.dumps({"extra": (peak - before) * 1024}))


def measure_memory(case: str, args: argparse.Namespace) -> list[float]:
    """Peak extra resident bytes of one call of `case`, in each of `args.processes` fresh processes."""
    env = dict(os.environ)
    if args.mmap_threshold:
        env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536")
    cmd = [sys.executable, __file__, "--probe", case, "--rows", str(args.rows), "--vocab", str(args.vocab)]
    cmd += ["--lin-rows", str(args.lin_rows), "--hidden", str(args.hidden), "--threads", str(args.threads)]
    peaks = []
    for _ in range(args.processes):
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        peaks.append(json.loads(out.strip().splitlines()[-1])["extra"])
    return peaks


def median_time(call: Callable[[], object], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    call()  # warm-up (and, on GPU, compilation)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_section(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    print(
        f"# CPU: {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{args.rows} rows x V={args.vocab} float32 logits ({args.rows * args.vocab * 4 / MiB:.0f} MiB); "
        f"linear: {args.lin_rows} rows, H={args.hidden}; memory: worst of {args.processes} fresh "
        f"processes ({'MALLOC_MMAP_THRESHOLD_=65536' if args.mmap_threshold else 'default allocator'}); "
        f"time: median of {args.repeats} runs"
    )
    print()
    print(
        "| case | naive peak extra MiB | dispatcher peak extra MiB (all processes) | ratio (worst) "
        "| naive s | dispatcher s | time ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    cases = cpu_cases(args.rows, args.vocab, args.lin_rows, args.hidden)
    names = [
        n
        for n in dict.fromkeys(k.split("|")[0] for k in cases)
        if not args.cases or n.startswith(tuple(args.cases))
    ]
    for name in names:
        peaks = {kind: measure_memory(f"{name}|{kind}", args) for kind in ("naive", "dispatcher")}
        mem = {kind: max(values) for kind, values in peaks.items()}
        each = " ".join(f"{v / MiB:.0f}" for v in peaks["dispatcher"])
        calls = {kind: cases[f"{name}|{kind}"]() for kind in ("naive", "dispatcher")}
        times: dict[str, list[float]] = {"naive": [], "dispatcher": []}
        for call in calls.values():
            call()  # warm-up
        for _ in range(args.repeats):  # interleaved, so that a slow spell of the machine hits both
            for kind, call in calls.items():
                start = time.perf_counter()
                call()
                times[kind].append(time.perf_counter() - start)
        del calls
        secs = {kind: statistics.median(t) for kind, t in times.items()}
        print(
            f"| {name} | {mem['naive'] / MiB:.0f} | {mem['dispatcher'] / MiB:.0f} ({each}) | "
            f"{mem['dispatcher'] / mem['naive']:.1%} | {secs['naive']:.3f} | {secs['dispatcher']:.3f} | "
            f"{secs['dispatcher'] / secs['naive']:.2f} |",
            flush=True,
        )
    print()
    print(
        "ratio: dispatcher / naive (target <= 10% for memory, <= 1.00 for time). masked_logprob: "
        "the memory excludes the returned gradients (the previous call's are resident at the "
        "baseline and freed as the call starts, the new ones take their place)."
    )


# --- GPU -------------------------------------------------------------------------------------------


def gpu_section(args: argparse.Namespace) -> None:
    if not torch.cuda.is_available():
        print("# GPU section skipped: CUDA is not available")
        return
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    print(
        f"# GPU: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}; "
        f"median of {args.gpu_repeats} runs (masked_logprob: {max(3, args.gpu_repeats // 4)})"
    )
    rows, vocab = args.gpu_rows, args.vocab
    checks: list[str] = []
    print()
    print(
        "| op | dtype | triton ms | GB/s | copy GB/s | % of copy | torch path ms | naive ms | "
        "speed-up vs torch | vs naive |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(rows, vocab, device=dev).to(dtype)  # [N, V]
        cur = torch.randint(0, vocab, (rows,), device=dev)
        nbytes = x.numel() * x.element_size()
        dst = torch.empty_like(x)
        copy_s = median_time(lambda x=x, dst=dst: dst.copy_(x), args.gpu_repeats, sync)
        copy_gbs = 2 * nbytes / copy_s / 1e9
        del dst
        g = torch.Generator(device=dev).manual_seed(0)
        ops = {
            "candidates greedy": (
                lambda x=x: candidates(x, backend="triton"),
                lambda x=x: candidates(x, backend="torch"),
                lambda x=x: naive_candidates(x),
            ),
            "candidates T=1": (
                lambda x=x, g=g: candidates(x, 1.0, generator=g, backend="triton"),
                lambda x=x, g=g: candidates(x, 1.0, generator=g, backend="torch"),
                lambda x=x, g=g: naive_candidates(x, 1.0, g),
            ),
            "edit_candidates greedy": (
                lambda x=x, cur=cur: edit_candidates(x, cur, backend="triton"),
                lambda x=x, cur=cur: edit_candidates(x, cur, backend="torch"),
                lambda x=x, cur=cur: naive_edit_candidates(x, cur),
            ),
        }
        for name, (tri, ref, naive) in ops.items():
            t_tri = median_time(tri, args.gpu_repeats, sync)
            t_ref = median_time(ref, args.gpu_repeats, sync)
            t_naive = median_time(naive, args.gpu_repeats, sync)
            gbs = nbytes / t_tri / 1e9
            print(
                f"| {name} | {str(dtype).removeprefix('torch.')} | {t_tri * 1e3:.3f} | {gbs:.0f} | "
                f"{copy_gbs:.0f} | {gbs / copy_gbs:.0%} | {t_ref * 1e3:.3f} | {t_naive * 1e3:.3f} | "
                f"{t_ref / t_tri:.1f}x | {t_naive / t_tri:.1f}x |",
                flush=True,
            )
        a, b = edit_candidates(x, cur, backend="triton"), edit_candidates(x, cur, backend="torch")
        ok = (
            torch.equal(a[0], b[0])
            and torch.allclose(a[1], b[1], rtol=1e-4)
            and torch.allclose(a[2], b[2], rtol=1e-4)
        )
        checks.append(f"{'OK' if ok else 'MISMATCH'}: edit_candidates greedy triton == torch ({dtype})")
        del x
        torch.cuda.empty_cache()

    print()
    print("| op | dtype | triton ms | torch path ms | naive ms | triton peak MiB | naive peak MiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for dtype in (torch.float32, torch.bfloat16):
        gen = torch.Generator(device=dev).manual_seed(1)
        cases = {
            f"masked_logprob fwd+bwd logits {rows}xV": _lp_logits(rows, vocab, dtype, dev, gen),
            f"masked_logprob fwd+bwd linear {args.gpu_lin_rows}xH{args.gpu_hidden}": _lp_linear(
                args.gpu_lin_rows, args.gpu_hidden, vocab, dtype, dev, gen
            ),
        }
        for name, (leaf, targets, kwargs) in cases.items():
            row = {}
            for kind, fn, backend in (
                ("triton", masked_logprob, "triton"),
                ("torch", masked_logprob, "torch"),
                ("naive", masked_logprob_reference, None),
            ):
                extra = {"backend": backend} if backend else {}

                def step(fn=fn, extra=extra, leaf=leaf, targets=targets, kwargs=kwargs):
                    logprob_step(fn, leaf, targets, **kwargs, **extra)

                row[kind] = median_time(step, max(3, args.gpu_repeats // 4), sync)
                if kind != "torch":
                    leaf.grad = None
                    sync()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    step()
                    sync()
                    row[kind + " mem"] = (torch.cuda.max_memory_allocated() - base) / MiB
            print(
                f"| {name} | {str(dtype).removeprefix('torch.')} | {row['triton'] * 1e3:.2f} | "
                f"{row['torch'] * 1e3:.2f} | {row['naive'] * 1e3:.2f} | {row['triton mem']:.0f} | "
                f"{row['naive mem']:.0f} |",
                flush=True,
            )
            got = masked_logprob(leaf.detach(), targets, **kwargs, backend="triton")
            want = masked_logprob_reference(leaf.detach(), targets, **kwargs)
            tol = 1e-3 if dtype == torch.float32 else 5e-2
            ok = torch.allclose(got, want, rtol=tol, atol=tol)
            checks.append(f"{'OK' if ok else 'MISMATCH'}: {name} triton == reference ({dtype})")
            del leaf, kwargs
        torch.cuda.empty_cache()
    print()
    print("\n".join(checks))


def _lp_logits(rows, vocab, dtype, dev, gen):
    x = torch.randn(rows, vocab, device=dev, generator=gen).to(dtype).requires_grad_(True)
    t = torch.randint(0, vocab, (rows,), device=dev, generator=gen)
    return x, t, {}


def _lp_linear(rows, hidden, vocab, dtype, dev, gen):
    h = torch.randn(rows, hidden, device=dev, generator=gen).to(dtype).requires_grad_(True)
    w = (torch.randn(vocab, hidden, device=dev, generator=gen) / hidden**0.5).to(dtype).requires_grad_(True)
    t = torch.randint(0, vocab, (rows,), device=dev, generator=gen)
    return h, t, {"weight": w}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu-only", action="store_true", help="skip the CPU section")
    p.add_argument("--cpu-only", action="store_true", help="skip the GPU section")
    p.add_argument("--rows", type=int, default=2048, help="CPU rows (B*L)")
    p.add_argument("--vocab", type=int, default=157184)
    p.add_argument("--lin-rows", type=int, default=256, help="CPU rows of the fused linear case")
    p.add_argument("--hidden", type=int, default=256, help="CPU hidden size of the fused linear case")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--repeats", type=int, default=5, help="CPU timed runs (median)")
    p.add_argument("--processes", type=int, default=5, help="fresh processes per memory case (worst)")
    p.add_argument("--mmap-threshold", action="store_true", help="children with MALLOC_MMAP_THRESHOLD_")
    p.add_argument("--cases", nargs="+", help="only the CPU cases whose names start with one of these")
    p.add_argument("--gpu-rows", type=int, default=2048)
    p.add_argument("--gpu-lin-rows", type=int, default=4096)
    p.add_argument("--gpu-hidden", type=int, default=4096)
    p.add_argument("--gpu-repeats", type=int, default=20)
    p.add_argument("--probe", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        memory_probe(args.probe, args)
        return
    if not args.gpu_only:
        cpu_section(args)
        print()
    if not args.cpu_only:
        gpu_section(args)


if __name__ == "__main__":
    main()
