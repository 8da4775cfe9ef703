"""Decoding at the published checkpoints' real shapes, random weights: the GPU script's decode step.

Two measurements, each on a model built from the published `config.json` vendored under
`tests/models/data/hub/` (or the class's defaults, which are that checkpoint's, where the file is
absent), with random weights in `--dtype` on `--device` (nothing is downloaded; a real checkpoint's
weights change the tokens, not the cost of a forward at a fixed number of forwards):

- **LLaDA-8B, the dual cache**: `dllm_edit.generate(..., adapter="bidirectional_dual_cache")` on the
  native `LLaDAModelLM` against Fast-dLLM's `generate_with_dual_cache` rule (the port in
  `tests/references/fast_dllm_cache.py`, which the tests prove token-equal to it), both with
  Fast-dLLM's confidence threshold (0.9), batch 1, `--prompt` + `--gen` tokens in blocks of
  `--block`; tokens/s at equal tokens (no EOS stop: both write all `--gen`), and whether the tokens
  and forwards agree.
- **LLaDA2.0-mini, S and Q**: the block-causal adapter with its exact prefix cache, the Speedy and
  Quality presets, batch `--batch`; then S through transformers' `StaticCache`
  (`adapter="block_causal_static"`, the same tokens) with `torch.compile` off and on.

Each line: median (min-max) of `--repeats` decodes after one warm-up.

    python benchmarks/real_shapes.py --device cuda                       # on a GPU (bf16)
    python benchmarks/real_shapes.py --device cpu --dtype float32 --smoke    # tiny shapes and lengths
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.references (the Fast-dLLM port) and the vendored configs

import dllm_edit  # noqa: E402
from dllm_edit.models import LLaDA2MoeConfig, LLaDA2MoeModelLM, LLaDAConfig, LLaDAModelLM  # noqa: E402

HUB = ROOT / "tests" / "models" / "data" / "hub"
SMOKE = {  # tiny sizes for a CPU run of the same code
    "llada": {"d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2, "mlp_hidden_size": 128},
    "llada2_moe": {
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
        "rotary_dim": 8, "num_hidden_layers": 3, "intermediate_size": 128, "moe_intermediate_size": 16,
        "num_experts": 32, "num_experts_per_tok": 4,
    },
}  # fmt: skip
# (default, default with --smoke) of the lengths and counts: a smoke run checks the code path at the
# real vocabularies in well under a minute
DEFAULTS = {"prompt": (128, 16), "gen": (256, 32), "block": (32, 16), "batch": (4, 2), "repeats": (3, 1)}


def published(folder: str) -> dict[str, Any] | None:
    path = HUB / folder / "config.json"
    if not path.is_file():
        return None
    fields = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in fields.items() if k not in ("_name_or_path", "transformers_version")}


def build(
    config_class: Any, model_class: Any, fields: dict[str, Any], dtype: torch.dtype, device: str
) -> Any:
    """`model_class` on `device` in `dtype` with random weights (N(0, 0.02), norms 1), built without
    a CPU copy first."""
    config = config_class.from_dict({**fields, "torch_dtype": str(dtype).removeprefix("torch.")})
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = model_class(config)
    model = model.to_empty(device=device).to(dtype)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and "norm" in name:
                param.fill_(1.0)
            elif param.dim() == 1:
                param.zero_()
            else:
                param.normal_(0.0, 0.02, generator=generator)
        for buffer in model.buffers():  # rotary tables and the like: rebuilt by the model if needed
            if buffer.is_floating_point() and not torch.isfinite(buffer).all():
                buffer.zero_()
    if hasattr(model, "reset_rotary"):
        model.reset_rotary()
    return model.eval()


def timed(fn: Any, repeats: int, device: str) -> tuple[list[float], Any]:
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times, out


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


@torch.no_grad()
def llada_dual_cache(args: argparse.Namespace, dtype: torch.dtype) -> None:
    from tests.references.fast_dllm_cache import fast_dllm_dual_cache

    fields = published("GSAI-ML--LLaDA-8B-Instruct") or LLaDAConfig().to_dict()
    source = "published config.json" if published("GSAI-ML--LLaDA-8B-Instruct") else "LLaDAConfig defaults"
    if args.smoke:
        fields = {**fields, **SMOKE["llada"]}
    model = build(LLaDAConfig, LLaDAModelLM, fields, dtype, args.device)
    mask = int(model.config.mask_token_id)
    prompt = torch.randint(0, 100000 if not args.smoke else 1000, (1, args.prompt), device=args.device)
    # Fast-dLLM's rule as the tests pin it against the port (tests/adapters/test_dual_cache.py): the
    # threshold with the top-1 always kept, no editing, no post step, no EOS stop, no mask guard
    config = dllm_edit.EditGenerationConfig(
        threshold=0.9, num_to_transfer=1, editing_threshold=None, max_post_steps=0, block_start="prompt_end",
        eos_early_stop=False, suppress_mask_token=False, block_length=args.block, max_new_tokens=args.gen,
        mask_token_id=mask, output_trace=True,
    )  # fmt: skip

    def ours() -> Any:
        return dllm_edit.generate(model, prompt, generation_config=config, adapter="bidirectional_dual_cache")

    def theirs() -> Any:
        return fast_dllm_dual_cache(
            model, prompt, mask_id=mask, gen_length=args.gen, block_length=args.block, threshold=0.9
        )

    ours_t, out = timed(ours, args.repeats, args.device)
    theirs_t, (x, nfe) = timed(theirs, args.repeats, args.device)
    blocks = [record.block for record in out.trace]
    at_once = sum(blocks.count(b) == 1 for b in set(blocks))  # the reference spends one more on each
    ours_nfe = int(out.num_forwards[0])
    same = bool(torch.equal(out.sequences, x)) and ours_nfe + at_once == nfe
    params = sum(p.numel() for p in model.parameters()) / 1e9
    print(f"### LLaDA-8B ({source}, {params:.2f} B parameters), dual cache, {dtype}, {args.device}")
    print("| decoder | s per decode | tokens/s | forwards |")
    print("|---|---:|---:|---:|")
    for label, times, forwards in (
        ("dllm_edit, native class", ours_t, ours_nfe),
        ("Fast-dLLM generate_with_dual_cache", theirs_t, nfe),
    ):
        print(f"| {label} | {_fmt(times)} | {args.gen / statistics.median(times):.1f} | {forwards} |")
    print(f"\nsame tokens and forwards: {same}\n", flush=True)


@torch.no_grad()
def llada2_modes(args: argparse.Namespace, dtype: torch.dtype) -> None:
    from tests.models.test_llada2_moe import REAL_CONFIG

    fields = published("inclusionAI--LLaDA2.0-mini") or dict(REAL_CONFIG)
    source = "published config.json" if published("inclusionAI--LLaDA2.0-mini") else "the tests' quote of it"
    if args.smoke:
        fields = {**fields, **SMOKE["llada2_moe"]}
    model = build(LLaDA2MoeConfig, LLaDA2MoeModelLM, fields, dtype, args.device)
    vocab = model.config.vocab_size
    mask = 156895 if vocab > 156895 else vocab - 1
    prompt = torch.randint(0, min(vocab - 2, 100000), (args.batch, args.prompt), device=args.device)
    params = sum(p.numel() for p in model.parameters()) / 1e9
    print(f"### LLaDA2.0-mini ({source}, {params:.2f} B parameters), block-causal, {dtype}, {args.device}")
    print(f"| preset | cache | compile | s per decode (batch {args.batch}) | tokens/s | forwards per row |")
    print("|---|---|---|---:|---:|---:|")
    rows = [("speedy", "block_causal", False), ("quality", "block_causal", False)]
    if not args.no_static:  # after S and Q, so a time limit cut keeps those rows
        rows += [("speedy", "block_causal_static", False), ("speedy", "block_causal_static", True)]
    cache_name = {"block_causal": "prefix cache", "block_causal_static": "StaticCache"}
    for mode, adapter, compile in rows:
        config = dllm_edit.EditGenerationConfig.from_mode(
            mode, max_new_tokens=args.gen, block_length=args.block, mask_token_id=mask, eos_early_stop=False,
            compile=compile,
        )  # fmt: skip
        times, out = timed(
            lambda c=config, a=adapter: dllm_edit.generate(model, prompt, generation_config=c, adapter=a),
            args.repeats,
            args.device,
        )  # the warm-up decode also compiles
        tokens, forwards = args.batch * args.gen, float(out.num_forwards.float().mean())
        print(
            f"| {mode} | {cache_name[adapter]} | {'on' if compile else 'off'} | {_fmt(times)} | "
            f"{tokens / statistics.median(times):.1f} | {forwards:.0f} |",
            flush=True,
        )
    print(flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    sizes = ("prompt", "gen", "block", "batch", "repeats")
    for name in sizes:
        full, smoke = DEFAULTS[name]
        parser.add_argument(f"--{name}", type=int, default=None, help=f"{full} ({smoke} with --smoke)")
    parser.add_argument("--only", choices=["llada", "llada2"], default=None)
    parser.add_argument(
        "--no-static", action="store_true", help="LLaDA2: skip the StaticCache rows (compile off and on)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU check of the code path)")
    args = parser.parse_args(argv)
    for name in sizes:
        if getattr(args, name) is None:
            setattr(args, name, DEFAULTS[name][1 if args.smoke else 0])
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda but CUDA is not available (use --device cpu --smoke for a check)")
    dtype = getattr(torch, args.dtype)
    if args.only in (None, "llada"):
        llada_dual_cache(args, dtype)
    if args.only in (None, "llada2"):
        llada2_modes(args, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
