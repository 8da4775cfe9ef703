"""Wall time of LLaDA decoding: dllm_edit on its native class against the published decoders.

Two comparisons on the same seeded weights, float32, CPU, `--threads` threads (default 1):

* dual cache: Fast-dLLM's `generate_with_dual_cache` on Fast-dLLM's patched `LLaDAModelLM` against
  `dllm_edit.generate(..., adapter="bidirectional_dual_cache")` on `dllm_edit.models.llada.LLaDAModelLM`;
* no cache: LLaDA's own `generate` (Fast-dLLM's `generate.py`) on the hub's `LLaDAModelLM` (the
  `dllm` repository's copy) against `dllm_edit.generate(..., adapter="bidirectional")`.

Every decode uses LLaDA-1's fixed-steps rule (`--steps-per-block` steps per block, the most
confident masks first; dllm_edit's `llada` mode), batch `--batch`, a `--prompt`-token prompt, `--gen`
new tokens in blocks of `--block`. Each model is LLaDA-8B's layout scaled to `--hidden` (head size
128, MLP three times as wide, `--layers` blocks, a `--vocab` vocabulary: the real 126,464-token head
would dominate the time). It prints, for each hidden size, the median and min-max wall time of
`--repeats` decodes after one warm-up, and whether the tokens agree.

The remote code comes from `--remote-dir` (default `$DLLM_EDIT_REMOTE_CODE_DIR`), holding
`llada/{configuration,modeling}_llada.py` and `fastdllm_llada/{configuration,modeling}_llada.py,
generate.py`; it needs transformers 4.x and einops. Fast-dLLM's SDPA wrapper is `torch.compile`d;
it runs uncompiled (the same attention) unless `--compile`.

    DLLM_EDIT_REMOTE_CODE_DIR=/path/to/remote python benchmarks/llada_vs_fast_dllm.py
    python benchmarks/llada_vs_fast_dllm.py --hidden 128 --layers 1 --gen 8 --block 4 --prompt 4 \\
        --steps-per-block 2 --repeats 1 --vocab 256        # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F


def remote_module(
    root: Path, family: str, module: str, extra: dict[str, Any] | None = None
) -> types.ModuleType:
    """Import `root/family/module.py` as a package member (its relative imports resolve)."""
    package = f"_llada_bench_{family}"
    if package not in sys.modules:
        pkg = types.ModuleType(package)
        pkg.__path__ = [str(root / family)]  # type: ignore[attr-defined]
        sys.modules[package] = pkg
    import transformers

    with (
        mock.patch.object(transformers.AutoConfig, "register"),
        mock.patch.object(transformers.AutoModel, "register"),
        mock.patch.dict(sys.modules, extra or {}),
    ):
        return importlib.import_module(f"{package}.{module}")


def seeded(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Class-independent weights (tests.helpers.remote_code.seeded_state_dict), in eval mode."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers.remote_code import seeded_state_dict

    model.load_state_dict(seeded_state_dict(model, seed))
    return model.eval()


def config_fields(hidden: int, layers: int, vocab: int) -> dict[str, Any]:
    return {
        "d_model": hidden,
        "n_heads": hidden // 128,
        "n_kv_heads": hidden // 128,
        "n_layers": layers,
        "mlp_hidden_size": 3 * hidden,
        "vocab_size": vocab,
        "embedding_size": vocab,
        "mask_token_id": vocab - 1,
        "eos_token_id": 1,
        "pad_token_id": 1,
        "block_type": "llama",
        "rope": True,
        "rope_theta": 500000.0,
        "layer_norm_type": "rms",
        "activation_type": "silu",
        "weight_tying": False,
        "include_bias": False,
        "bias_for_layer_norm": False,
        "attention_dropout": 0.0,
        "residual_dropout": 0.0,
        "embedding_dropout": 0.0,
        "max_sequence_length": 4096,
    }


def timed(run: Callable[[], torch.Tensor], repeats: int) -> tuple[list[float], torch.Tensor]:
    out = run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return times, out


def describe(times: list[float]) -> str:
    return f"{statistics.median(times):8.3f} s  ({min(times):.3f}-{max(times):.3f})"


def bench(hidden: int, args: argparse.Namespace, hub: Any, fast: Any, generate: Any) -> None:
    """Time the four decoders at one hidden size and print the rows."""
    import dllm_edit
    from dllm_edit.models.llada import LLaDAConfig, LLaDAModelLM

    fields = config_fields(hidden, args.layers, args.vocab)
    mask = fields["mask_token_id"]
    native = seeded(LLaDAModelLM._from_config(LLaDAConfig(**fields), attn_implementation="sdpa"))
    fast_model = seeded(fast.LLaDAModelLM(fast.LLaDAConfig(**fields)))
    hub_config = hub.LLaDAConfig(**fields)
    inner = hub.create_model_config_from_pretrained_config(hub_config)
    inner.init_device = "cpu"
    hub_model = seeded(hub.LLaDAModelLM(hub_config, model=hub.LLaDAModel(inner)))
    prompt = torch.randint(
        2, args.vocab - 1, (args.batch, args.prompt), generator=torch.Generator().manual_seed(1)
    )
    config = dllm_edit.EditGenerationConfig.from_mode(
        "llada",
        block_length=args.block,
        steps=args.steps_per_block,
        max_new_tokens=args.gen,
        mask_token_id=mask,
        eos_token_id=1,
        pad_token_id=1,
    )
    steps = args.steps_per_block * args.gen // args.block  # LLaDA's `steps` counts every block
    ref = dict(steps=steps, gen_length=args.gen, block_length=args.block, mask_id=mask)
    rows = [
        (
            "dual cache: Fast-dLLM generate_with_dual_cache",
            lambda: generate.generate_with_dual_cache(fast_model, prompt, **ref)[0],
        ),
        (
            "dual cache: dllm_edit native",
            lambda: (
                dllm_edit.generate(
                    native, prompt, generation_config=config, adapter="bidirectional_dual_cache"
                ).sequences
            ),
        ),
        (
            "no cache: LLaDA generate on the hub class",
            lambda: generate.generate(hub_model, prompt, **ref)[0],
        ),
        (
            "no cache: dllm_edit native",
            lambda: (
                dllm_edit.generate(
                    native, prompt, generation_config=config, adapter="bidirectional"
                ).sequences
            ),
        ),
    ]
    print(f"\nhidden {hidden} ({hidden // 128} heads):")
    outputs = []
    with torch.no_grad():
        for label, run in rows:
            times, out = timed(run, args.repeats)
            outputs.append(out)
            print(f"  {label:<48} {describe(times)}")
    print(
        f"  same tokens: dual cache {torch.equal(outputs[0], outputs[1])}, "
        f"no cache {torch.equal(outputs[2], outputs[3])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote-dir", default=os.environ.get("DLLM_EDIT_REMOTE_CODE_DIR"))
    parser.add_argument("--hidden", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--gen", type=int, default=64)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--steps-per-block", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="keep Fast-dLLM's torch.compile'd SDPA")
    args = parser.parse_args()
    if not args.remote_dir:
        raise SystemExit("pass --remote-dir or set DLLM_EDIT_REMOTE_CODE_DIR (see the module docstring)")
    torch.set_num_threads(args.threads)
    root = Path(args.remote_dir)

    import transformers

    hub = remote_module(root, "llada", "modeling_llada")
    fast = remote_module(root, "fastdllm_llada", "modeling_llada")
    if not args.compile:
        fast.scaled_dot_product_attention = (
            lambda q, k, v, mask=None, attn_mask=None, dropout_p=0.0, is_causal=False: (
                F.scaled_dot_product_attention(
                    q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
                )
            )
        )
    package = types.ModuleType("model")
    package.__path__ = []  # type: ignore[attr-defined]
    generate = remote_module(
        root, "fastdllm_llada", "generate", {"model": package, "model.modeling_llada": fast}
    )

    sdpa = "compiled" if args.compile else "uncompiled"
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.threads} thread(s)")
    print(
        f"batch {args.batch}, prompt {args.prompt}, gen {args.gen}, block {args.block}, "
        f"{args.steps_per_block} steps/block, {args.layers} layers, vocab {args.vocab}, Fast-dLLM SDPA {sdpa}"
    )
    for hidden in args.hidden:
        bench(hidden, args, hub, fast, generate)


if __name__ == "__main__":
    main()
