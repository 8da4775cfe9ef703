"""How does a forward's cost grow with the number of positions it reads? (the shipped model, cached)

Tokens per forward turns into tokens per second only if a forward over a block of `w` new positions
costs about as much as a forward over one. An autoregressive model with a KV cache reads 1 new
position per forward; a block-diffusion model with the exact cache of finished blocks reads its
whole block (32 for the presets). This script times one forward of the shipped model over `w` new
positions on top of a cached prefix, for several widths and batch sizes, and prints the median of
`--repeats` calls (after warm-up) and the cost relative to width 1.

    python benchmarks/forward_cost.py                     # CPU
    python benchmarks/forward_cost.py --device cuda       # where a GPU is lent
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

import dllm_edit
from dllm_edit.adapters.base import cache_argument


@torch.no_grad()
def forward_seconds(model, batch: int, prefix: int, width: int, repeats: int, device: str) -> float:
    """Median seconds of one forward over `width` new positions after `prefix` cached ones."""
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    past_ids = torch.randint(0, vocab, (batch, prefix), generator=generator).to(device)  # [B, prefix]
    new_ids = torch.randint(0, vocab, (batch, width), generator=generator).to(device)  # [B, width]
    positions = torch.arange(prefix, prefix + width, device=device).expand(batch, width)  # [B, width]
    cache = DynamicCache()
    cache_kwarg = {cache_argument(model): cache}
    model(input_ids=past_ids, use_cache=True, **cache_kwarg)
    times = []
    for i in range(repeats + 2):  # two warm-up calls
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(input_ids=new_ids, position_ids=positions, use_cache=True, **cache_kwarg)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
        cache.crop(-width)  # drop the new positions: the next call sees the same prefix again
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prefix", type=int, default=64, help="cached positions before the new ones")
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if min(args.widths) < 1 or min(args.batches) < 1 or args.prefix < 1 or args.repeats < 1:
        parser.error("--widths, --batches, --prefix and --repeats must be >= 1")
    model, _ = dllm_edit.load_default(device=args.device)
    print(f"shipped model, {args.prefix} cached positions, median of {args.repeats} forwards ({args.device})")
    print("| batch | new positions | ms / forward | × the narrowest | positions / ms |")
    print("|---:|---:|---:|---:|---:|")
    for batch in args.batches:
        base = None
        for width in sorted(args.widths):
            seconds = forward_seconds(model, batch, args.prefix, width, args.repeats, args.device)
            base = base or seconds
            print(
                f"| {batch} | {width} | {seconds * 1e3:.2f} | {seconds / base:.1f} | "
                f"{batch * width / (seconds * 1e3):.1f} |"
            )


if __name__ == "__main__":
    main()
