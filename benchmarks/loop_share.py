"""The decoding loop's share of decode time, where compute dominates: hidden 1024, one CPU thread.

Decoding costs the forwards it runs plus the loop's own work (layout, candidate statistics over the
vocabulary, the rules, writes, the trace when asked for). This script times every `model.forward`
of a decode with hooks and reports the loop's share: `(wall - time inside the forwards) / wall`,
and also the issue's estimate `(wall - forwards x one forward's median time) / wall`, which
overcounts the loop where forwards differ in size (a dual-cache block starts with a forward over
the whole canvas), so a third column counts each forward at the median of its own size. Two
settings, random weights of real vocabularies:

- **block-causal, S preset**: a Llama (hidden 1024, LLaDA2.x's vocabulary of 157,184) through the
  block-causal adapter with its exact prefix cache;
- **bidirectional, dual cache**: dllm_edit's native LLaDA class (hidden 1024, LLaDA-8B's vocabulary
  of 126,464) through `bidirectional_dual_cache`, S preset.

    python benchmarks/loop_share.py                      # 3 repeats, prompt 64, 128 new tokens
    python benchmarks/loop_share.py --repeats 5 --layers 4

Each line: median (min-max) over the repeats, after one warm-up decode. The share depends on the
machine (the forward's matrix products and the loop's vocabulary passes scale differently from one
CPU to another): compare trees on one machine, and read the last column, the loop's milliseconds
per forward, next to it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch

import dllm_edit


def _seeded(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            fill = torch.randn(param.shape, generator=generator) * 0.02
            param.copy_(fill + 1 if param.dim() == 1 and "norm" in name else fill)
    return model.eval()


def block_causal_model(hidden: int, layers: int) -> tuple[Any, int]:
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = 157184
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=int(2.75 * hidden), num_hidden_layers=layers,
        num_attention_heads=hidden // 128, num_key_value_heads=max(1, hidden // 512), eos_token_id=1,
        pad_token_id=0, bos_token_id=2, attn_implementation="sdpa",
    )  # fmt: skip
    return _seeded(LlamaForCausalLM(config), 0), vocab - 1


def bidirectional_model(hidden: int, layers: int) -> tuple[Any, int]:
    from dllm_edit.models import LLaDAConfig, LLaDAModelLM

    vocab = 126464
    config = LLaDAConfig(
        d_model=hidden, n_heads=hidden // 128, n_kv_heads=hidden // 128, n_layers=layers,
        mlp_hidden_size=int(2.75 * hidden), vocab_size=vocab, embedding_size=vocab, mask_token_id=126336,
        eos_token_id=126081, pad_token_id=126081,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return _seeded(LLaDAModelLM(config), 1), 126336


class ForwardTimer:
    """Seconds inside each `model.forward` (pre/post hooks), and each forward's number of query
    positions (a dual-cache block starts with a forward over the whole canvas, then reads the block)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.times: list[float] = []
        self.positions: list[int] = []
        self._start = 0.0
        model.register_forward_pre_hook(self._pre, with_kwargs=True)
        model.register_forward_hook(self._post)

    def _pre(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.positions.append(-1 if ids is None else int(ids.shape[-1]))
        self._start = time.perf_counter()

    def _post(self, *_: Any) -> None:
        self.times.append(time.perf_counter() - self._start)

    def clear(self) -> None:
        self.times.clear()
        self.positions.clear()

    def by_size(self) -> float:
        """Forwards x the median forward of their own size, summed over the sizes (seconds)."""
        sizes: dict[int, list[float]] = {}
        for width, seconds in zip(self.positions, self.times):
            sizes.setdefault(width, []).append(seconds)
        return sum(len(group) * statistics.median(group) for group in sizes.values())


def measure(model: Any, mask: int, adapter: str, args: argparse.Namespace) -> dict[str, list[float]]:
    timer = ForwardTimer(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 30000, (args.batch, args.prompt), generator=generator)  # [B, P]
    config = dllm_edit.EditGenerationConfig.from_mode(
        "speedy",
        max_new_tokens=args.new_tokens,
        block_length=args.block,
        mask_token_id=mask,
        eos_early_stop=False,
    )
    keys = ("wall", "in_forward", "share", "estimate", "by_size", "forwards", "per_forward")
    out: dict[str, list[float]] = {key: [] for key in keys}
    for repeat in range(args.repeats + 1):  # the first decode warms up
        timer.clear()
        start = time.perf_counter()
        result = dllm_edit.generate(model, ids, generation_config=config, adapter=adapter)
        wall = time.perf_counter() - start
        if repeat == 0:
            continue
        inside = sum(timer.times)
        one = statistics.median(timer.times)
        out["wall"].append(wall)
        out["in_forward"].append(inside)
        out["share"].append((wall - inside) / wall)
        out["estimate"].append((wall - len(timer.times) * one) / wall)
        out["by_size"].append((wall - timer.by_size()) / wall)
        out["per_forward"].append((wall - inside) / len(timer.times))
        out["forwards"].append(float(result.num_forwards.max()))
    return out


def _fmt(values: list[float], scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
    med, lo, hi = (scale * f(values) for f in (statistics.median, min, max))
    return f"{med:.{digits}f}{suffix} ({lo:.{digits}f}-{hi:.{digits}f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"hidden {args.hidden}, {args.layers} layers, batch {args.batch}, prompt {args.prompt}, "
        f"{args.new_tokens} new tokens, block {args.block}, {args.threads} thread(s), "
        f"torch {torch.__version__}"
    )
    print(
        "| setting | forwards | wall s | in forward s | loop share | estimate (forwards x median) "
        "| estimate (x median of their size) | loop ms per forward |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, build, adapter in (
        ("block-causal, S", block_causal_model, "block_causal"),
        ("bidirectional dual cache, S", bidirectional_model, "bidirectional_dual_cache"),
    ):
        model, mask = build(args.hidden, args.layers)
        with torch.no_grad():
            r = measure(model, mask, adapter, args)
        forwards = statistics.median(r["forwards"])
        cells = [
            _fmt(r["wall"]),
            _fmt(r["in_forward"]),
            _fmt(r["share"], 100, 1, "%"),
            _fmt(r["estimate"], 100, 1, "%"),
            _fmt(r["by_size"], 100, 1, "%"),
            _fmt(r["per_forward"], 1000, 1),
        ]
        print(f"| {label} | {forwards:.0f} | " + " | ".join(cells) + " |", flush=True)
        del model
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
