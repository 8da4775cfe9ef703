"""`dllm-edit bench`: the speed / quality trade-off table (and plot) on held-out data.

dllm-edit bench                                   # the shipped model, the full grid
dllm-edit bench --model m2t=runs/m2t --model edit=runs/edit --plot tradeoff.png
dllm-edit bench --quick                           # a small grid on few prompts
dllm-edit bench --ar-model ar=runs/default-model-ar   # add an autoregressive baseline (plain generate)
dllm-edit bench --strategies all --json algos.json --plot algos.png   # every decoding algorithm
dllm-edit bench --strategies eb_sampler,fast_dllm_factor --editing off,S
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from .checks import check_writable_file
from .parsing import Parser, add_debug_argument


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    parser.add_argument(
        "--ar-model",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="an autoregressive causal LM to compare, decoded with plain greedy model.generate (repeatable)",
    )
    parser.add_argument(
        "--synthetic",
        type=int,
        default=None,
        help="held-out synthetic prompts (default 200; 40 with --quick)",
    )
    parser.add_argument(
        "--code", type=int, default=None, help="held-out code prompts (default 50; 10 with --quick)"
    )
    parser.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=None,
        help="τ_mask values (default 0.9 0.7 0.5 0.3; 0.7 0.5 with --quick)",
    )
    parser.add_argument(
        "--remask",
        action="store_true",
        help="add the S preset with low-confidence remasking (LowConfidenceRemask 0.3) to the grid",
    )
    parser.add_argument("--no-mbe", action="store_true", help="skip the multi-block-editing half of the grid")
    parser.add_argument(
        "--quick", action="store_true", help="defaults to τ_mask 0.7 and 0.5, no MBE, 40 + 10 prompts"
    )
    parser.add_argument(
        "--plot", default=None, metavar="PNG", help="draw accuracy against TPF (needs matplotlib)"
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument(
        "--strategies",
        default=None,
        metavar="NAME[,NAME...]",
        help="compare decoding algorithms instead of the trade-off grid: registered unmasking strategies "
        "(comma-separated) or 'all', each over its own sweep (one model)",
    )
    parser.add_argument(
        "--editing",
        default=None,
        metavar="off|Q|S[,...]",
        help="with --strategies: T2T editing composed with each algorithm (default: off)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="with --strategies: decode each setting N times; times are the median (default 1)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="with --strategies: seed of the generator every decode draws from (default 0)",
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="allow models that ship their own code"
    )
    parser.add_argument(
        "--remote-code",
        action="store_true",
        help="load LLaDA / LLaDA-MoE / Dream / LLaDA2.x checkpoints with their own code instead of "
        "dllm_edit's native classes (implies --trust-remote-code)",
    )
    add_debug_argument(parser)
    return parser


def check_outputs(args: argparse.Namespace) -> None:
    """`--plot` (matplotlib installed, a file type it writes) and `--json` can be written: checked
    before any model is loaded, so an unwritable path never costs a whole benchmark."""
    if args.plot is not None:
        try:
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError('--plot needs matplotlib: pip install "dllm-edit[bench]".') from err
        formats = tuple(f".{kind}" for kind in Figure().canvas.get_supported_filetypes())
        check_writable_file(args.plot, "--plot", suffixes=formats)
    if args.json is not None:
        check_writable_file(args.json, "--json")


def _split_specs(specs: list[str], option: str) -> list[tuple[str, str]]:
    """`NAME=PATH` pairs, checked before any model is loaded."""
    pairs = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{option} takes NAME=PATH (e.g. edit=runs/edit-sft), got {spec!r}.")
        pairs.append((name, path))
    return pairs


def _load(pairs: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, tuple[Any, Any]]:
    from .loading import load_model_and_tokenizer

    models = {}
    for name, path in pairs:
        model, tokenizer = load_model_and_tokenizer(
            path, trust_remote_code=args.trust_remote_code or args.remote_code, native=not args.remote_code
        )
        models[name] = (model.eval(), tokenizer)
    return models


def _check_multi_block_edit(models: dict[str, Any]) -> None:
    """Refuse, before the grid runs, a model whose adapter cannot decode its multi-block-editing half."""
    from dllm_edit.adapters import resolve_adapter

    unable = {}
    for name, (model, _) in models.items():
        adapter = resolve_adapter(model, None)
        if not adapter.supports_multi_block_edit:
            unable[name] = adapter.name
    if unable:
        listed = ", ".join(f"{name} ({adapter})" for name, adapter in unable.items())
        raise ValueError(
            f"The grid's multi-block-editing half cannot run on {listed}: the adapter has no multi-block "
            "editing. Pass --no-mbe."
        )


def _run_algorithms(args: argparse.Namespace) -> int:
    """`--strategies`: every named algorithm over its sweep on one model (`dllm_edit.algorithm_bench`)."""
    from dllm_edit.algorithm_bench import (
        algorithm_settings,
        compare_algorithms,
        format_algorithm_table,
        pareto_plot,
        resolve_names,
    )
    from dllm_edit.data.builtin import builtin_rows

    if args.ar_model or args.remask or args.thresholds is not None:
        raise ValueError(
            "--strategies compares unmasking algorithms over their own sweeps; --ar-model, --remask and "
            "--thresholds belong to the trade-off grid. Drop them, or drop --strategies."
        )
    args.editing = "off" if args.editing is None else args.editing
    args.repeats = 1 if args.repeats is None else args.repeats
    args.seed = 0 if args.seed is None else args.seed
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}.")
    for option, value in (("--synthetic", args.synthetic), ("--code", args.code)):
        if value is not None and value < 0:
            raise ValueError(f"{option} must be >= 0 (a number of held-out prompts), got {value}.")
    names = resolve_names(args.strategies)
    editing = [e.strip() for e in args.editing.split(",") if e.strip()]
    settings = algorithm_settings(names, editing=editing)  # every setting validated before a forward
    specs = _split_specs(args.model or [], "--model")
    if len(specs) > 1:
        raise ValueError("--strategies measures one model; pass a single --model NAME=PATH.")
    if args.remote_code and not specs:
        raise ValueError("--remote-code loads checkpoints with their own code: it needs --model NAME=PATH.")
    if specs:
        model, tokenizer = _load(specs, args)[specs[0][0]]
    else:
        from dllm_edit.shipped import load_default

        model, tokenizer = load_default()
    synthetic = builtin_rows("dllm_edit:synthetic", "test")[
        : 200 if args.synthetic is None else args.synthetic
    ]
    code = builtin_rows("dllm_edit:code", "test")[: 0 if args.code is None else args.code]
    everything = args.strategies.strip() == "all"  # 'all' leaves out what this model cannot run
    rows = compare_algorithms(
        model,
        tokenizer,
        settings,
        synthetic,
        code,
        repeats=args.repeats,
        skip_unsupported=everything,
        seed=args.seed,
    )
    print(
        f"held-out: {len(synthetic)} synthetic prompts (exact match), {len(code)} code prompts (parse rate)"
    )
    print(format_algorithm_table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1, default=str)
    if args.plot:
        pareto_plot(rows, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def run(argv: Sequence[str]) -> int:
    from dllm_edit.data.builtin import builtin_rows
    from dllm_edit.evaluation import format_table, plot, tradeoff, tradeoff_settings

    args = build_parser().parse_args(list(argv))
    check_outputs(args)
    if args.strategies is not None:
        return _run_algorithms(args)
    given = [f"--{name}" for name in ("editing", "repeats", "seed") if getattr(args, name) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} belong to --strategies (the algorithms comparison); the trade-off grid "
            "decodes each setting once, greedily, with editing off / Q / S built in. Add --strategies, or "
            "drop them."
        )
    if args.quick:  # a smaller default grid; explicit --thresholds / --synthetic / --code still win
        args.no_mbe = True
    if args.thresholds is None:
        args.thresholds = [0.7, 0.5] if args.quick else [0.9, 0.7, 0.5, 0.3]
    if args.synthetic is None:
        args.synthetic = 40 if args.quick else 200
    if args.code is None:
        args.code = 10 if args.quick else 50
    if args.synthetic < 0 or args.code < 0 or args.synthetic + args.code == 0:
        raise ValueError("--synthetic and --code must be >= 0, and not both 0.")
    if any(not 0.0 <= t <= 1.0 for t in args.thresholds):
        raise ValueError(f"--thresholds must lie in [0, 1], got {args.thresholds}.")
    diffusion_specs = _split_specs(args.model or [], "--model")
    ar_specs = _split_specs(args.ar_model or [], "--ar-model")
    names = [name for name, _ in diffusion_specs + ar_specs]
    if len(set(names)) != len(names):
        raise ValueError(f"--model / --ar-model names must be distinct, got {names}.")
    if args.remote_code and not names:
        raise ValueError("--remote-code loads checkpoints with their own code: it needs --model NAME=PATH.")
    if diffusion_specs:
        models = _load(diffusion_specs, args)
    else:
        from dllm_edit.shipped import load_default

        models = {"shipped": load_default()}
    if not args.no_mbe:
        _check_multi_block_edit(models)
    autoregressive = _load(ar_specs, args)
    synthetic = builtin_rows("dllm_edit:synthetic", "test")[: args.synthetic]
    code = builtin_rows("dllm_edit:code", "test")[: args.code]
    from dllm_edit.evaluation import DEFAULT_EDITING, REMASKING

    editing = (*DEFAULT_EDITING, *REMASKING) if args.remask else DEFAULT_EDITING
    settings = tradeoff_settings(
        args.thresholds, editing=editing, multi_block_edit=(False,) if args.no_mbe else (False, True)
    )
    rows = tradeoff(models, synthetic, code, settings, autoregressive=autoregressive)
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
