"""`dllm-edit bench`: the speed / quality trade-off table (and plot) on held-out data.

dllm-edit bench                                   # the shipped model, the full grid
dllm-edit bench --model m2t=runs/m2t --model edit=runs/edit --plot tradeoff.png
dllm-edit bench --quick                           # a small grid on few prompts
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dllm-edit bench",
        description="Accuracy / parse rate against tokens per forward over τ_mask × editing × MBE "
        "(held-out data).",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="a model to measure, as name=path (repeatable; default: the shipped model)",
    )
    parser.add_argument("--synthetic", type=int, default=200, help="held-out synthetic prompts (default 200)")
    parser.add_argument("--code", type=int, default=50, help="held-out code prompts (default 50)")
    parser.add_argument(
        "--thresholds", type=float, nargs="+", default=[0.9, 0.7, 0.5, 0.3], help="τ_mask values"
    )
    parser.add_argument("--no-mbe", action="store_true", help="skip the multi-block-editing half of the grid")
    parser.add_argument("--quick", action="store_true", help="τ_mask 0.7 and 0.5, no MBE, 40 + 10 prompts")
    parser.add_argument(
        "--plot", default=None, metavar="PNG", help="draw accuracy against TPF (needs matplotlib)"
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="allow models that ship their own code"
    )
    return parser


def _models(specs: list[str] | None, trust_remote_code: bool) -> dict[str, tuple[Any, Any]]:
    from dllm_edit.shipped import load_default

    from .loading import load_model_and_tokenizer

    if not specs:
        return {"shipped": load_default()}
    models = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model takes NAME=PATH (e.g. edit=runs/edit-sft), got {spec!r}.")
        model, tokenizer = load_model_and_tokenizer(path, trust_remote_code=trust_remote_code)
        models[name] = (model.eval(), tokenizer)
    return models


def run(argv: Sequence[str]) -> int:
    from dllm_edit.data.builtin import builtin_rows
    from dllm_edit.evaluation import format_table, plot, tradeoff, tradeoff_settings

    args = build_parser().parse_args(list(argv))
    if args.quick:
        args.thresholds, args.no_mbe, args.synthetic, args.code = [0.7, 0.5], True, 40, 10
    if args.synthetic < 0 or args.code < 0 or args.synthetic + args.code == 0:
        raise ValueError("--synthetic and --code must be >= 0, and not both 0.")
    if any(not 0.0 <= t <= 1.0 for t in args.thresholds):
        raise ValueError(f"--thresholds must lie in [0, 1], got {args.thresholds}.")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError as err:
            raise ImportError('--plot needs matplotlib: pip install "dllm-edit[bench]".') from err
    models = _models(args.model, args.trust_remote_code)
    synthetic = builtin_rows("dllm_edit:synthetic", "test")[: args.synthetic]
    code = builtin_rows("dllm_edit:code", "test")[: args.code]
    settings = tradeoff_settings(args.thresholds, multi_block_edit=(False,) if args.no_mbe else (False, True))
    rows = tradeoff(models, synthetic, code, settings)
    print(
        f"held-out: {len(synthetic)} synthetic prompts (exact match), {len(code)} code prompts (parse rate)"
    )
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    if args.plot:
        plot(rows, args.plot)
        print(f"plot written to {args.plot}")
    return 0
