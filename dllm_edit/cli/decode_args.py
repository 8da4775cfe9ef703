"""The command-line options of `dllm-edit generate` and `dllm-edit compare`, and the decoding config
they describe: the parsers, the checks of the options' values and the config built from the
`--mode` preset or the `--config` file with the flags on top (all before any model is loaded).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from dllm_edit.config import MODES as _PRESETS

from .parsing import Parser, add_debug_argument

MODES = tuple(_PRESETS)  # every preset decodes from the command line; see `llada_on`
DEFAULT_MAX_NEW_TOKENS = 128


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `generate` and `compare` share."""
    parser.add_argument(
        "prompt",
        help="the prompt text (use quotes); <mask:N> marks a gap of N tokens to fill in (a template, "
        "where \\n and \\t are a newline and a tab)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a local model folder or a Hub id (default: the model shipped in the package)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run a checkpoint's own modelling code where dllm_edit has no native class for its family; "
        "only for sources you trust",
    )
    parser.add_argument(
        "--remote-code",
        action="store_true",
        help="load LLaDA / LLaDA-MoE / Dream / LLaDA2.x checkpoints with their own code instead of "
        "dllm_edit's native classes (implies --trust-remote-code)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens to generate (default {DEFAULT_MAX_NEW_TOKENS}, or the --config file's)",
    )
    parser.add_argument(
        "--block-length", type=int, default=None, help="tokens per block (default: the preset's, 32)"
    )
    parser.add_argument(
        "--multi-block-edit", action="store_true", help="let edits revisit the previous block"
    )
    parser.add_argument("--temperature", type=float, default=None, help="0 = greedy (default); > 0 samples")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling generator (default 0)")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:N, mps (default: cuda when available, else cpu)"
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="model dtype: auto, float32, bfloat16, float16 (default: the checkpoint's)",
    )
    parser.add_argument(
        "--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template"
    )
    add_debug_argument(parser)


def build_generate_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit generate", description="Decode a prompt with the editable decoder (M2T + T2T)."
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--mode",
        default=None,
        choices=MODES,
        help="decoding preset: speedy (S, default), quality (Q) or llada (LLaDA-1's fixed-steps rule, "
        "no editing; see docs/concepts/canvas.md)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="every decoding setting from a YAML file (an EditGenerationConfig: thresholds, schedules, "
        "strategies, unmasking); instead of --mode, the other options override it",
    )
    parser.add_argument(
        "--save-config",
        default=None,
        metavar="FILE.yaml",
        help="write the exact decoding settings used as YAML (for --config)",
    )
    parser.add_argument("--threshold", type=float, default=None, help="τ_mask, overrides the preset's")
    parser.add_argument(
        "--unmasking",
        default=None,
        metavar="NAME[:KEY=VALUE,...]",
        help="the M2T rule by its registered name, instead of the preset's threshold, e.g. eb_sampler, "
        "fast_dllm_factor:factor=2, dream:alg=entropy,steps=8 (docs/concepts/algorithms.md)",
    )
    parser.add_argument(
        "--editing-threshold",
        type=float,
        default=None,
        help="τ_edit, overrides the preset's (negative: editing off)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    parser.add_argument("--no-live", action="store_true", help="do not draw the live canvas on a terminal")
    parser.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds to wait after drawing each step of the live canvas, to follow it (default 0)",
    )
    parser.add_argument(
        "--trace", default=None, metavar="FILE.json", help="write every step of the decode to a JSON file"
    )
    parser.add_argument(
        "--trace-html",
        default=None,
        metavar="FILE.html",
        help="write a self-contained HTML page that replays the decode step by step",
    )
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit compare",
        description="Decode a prompt with S, Q and M2T-only, side by side.",
        unknown_hints={
            option: f"compare always decodes with S, Q and M2T-only; {option} is an option of "
            "dllm-edit generate."
            for option in ("--mode", "--config", "--threshold", "--editing-threshold")
        },
    )
    add_decoding_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    return parser


def check_decoding_args(args: argparse.Namespace) -> None:
    """The shared options' values, checked before any model is loaded."""
    args.max_new_tokens_given = getattr(args, "max_new_tokens_given", args.max_new_tokens is not None)
    infilling = getattr(args, "infill", False) or is_template(args.prompt or "")
    if args.max_new_tokens is None:
        args.max_new_tokens = 0 if getattr(args, "infill", False) else DEFAULT_MAX_NEW_TOKENS
    if infilling:  # the template's tags, checked before the model loads
        from dllm_edit.infill import parse_template

        parse_template(args.prompt or "", lambda text, add_special_tokens=False: {"input_ids": []}, 0)
    if args.max_new_tokens < (0 if infilling else 1):
        floor = "0 (a template's masks only)" if infilling else "1"
        raise ValueError(f"--max-new-tokens must be >= {floor}, got {args.max_new_tokens}.")
    if args.block_length is not None and args.block_length < 1:
        raise ValueError(f"--block-length must be >= 1, got {args.block_length}.")
    if args.temperature is not None and not args.temperature >= 0:
        raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}.")
    if not args.prompt:
        raise ValueError('the prompt is empty; give the text to continue, e.g. "sort:3141=".')


def is_template(prompt: str) -> bool:
    """Whether `prompt` holds a `<mask...>` tag: an infilling template (`<mask:N>` = N masks)."""
    return "<mask" in prompt


def flag_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields the shared flags set (only those given on the command line)."""
    fields: dict[str, Any] = {}
    if args.max_new_tokens_given:
        fields["max_new_tokens"] = args.max_new_tokens
    if args.temperature is not None:
        fields["temperature"] = args.temperature
    if args.block_length is not None:
        fields["block_length"] = args.block_length
    if args.multi_block_edit:
        fields["multi_block_edit"] = True
    return fields


def preset_config(args: argparse.Namespace, mode: str, **overrides: Any) -> Any:
    """The `mode` preset with the flags and `overrides` (validated; no model needed)."""
    from dllm_edit.config import EditGenerationConfig

    fields = {"max_new_tokens": args.max_new_tokens, **flag_fields(args), **overrides}
    return EditGenerationConfig.from_mode(mode, **fields)


def parse_unmasking(spec: str) -> str | dict[str, Any]:
    """`--unmasking NAME[:KEY=VALUE,...]` as the config's `unmasking` (a name, or a dict with `type`).

    Values are read as YAML scalars (`2` an int, `0.5` a float, `true`, `null`, `[5, 2.5]` a list);
    the name and the keys are checked by the config, with close matches.

    Examples:
        >>> parse_unmasking("eb_sampler")
        'eb_sampler'
        >>> parse_unmasking("dream:alg=entropy,steps=8")
        {'type': 'dream', 'alg': 'entropy', 'steps': 8}
    """
    import yaml

    name, _, rest = spec.partition(":")
    if not name.strip():
        raise ValueError(
            f"--unmasking {spec!r}: give a rule's name first, e.g. eb_sampler or eb_sampler:gamma=0.01"
        )
    if not rest.strip():
        return name.strip()
    fields: dict[str, Any] = {"type": name.strip()}
    for item in _split_top_level(rest):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(
                f"--unmasking {spec!r}: {item!r} is not KEY=VALUE; write e.g. {name.strip()}:gamma=0.01"
            )
        try:
            fields[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ValueError(
                f"--unmasking {spec!r}: the value of {key.strip()!r} is not readable: {err}"
            ) from err
    return fields


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets (`thresholds=[5, 2.5],window=2` is two items)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "[{("
        depth -= char in "]})"
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def generate_config(args: argparse.Namespace) -> Any:
    """The decoding config of `generate`: the `--config` file or the `--mode` preset, then the flags
    (validated before any model is loaded; `Session.llada_on_adapter` fits `--mode llada` to it)."""
    overrides: dict[str, Any] = {}
    if args.threshold is not None:
        overrides["threshold"] = args.threshold
    if args.editing_threshold is not None:
        overrides["editing_threshold"] = None if args.editing_threshold < 0 else args.editing_threshold
    if getattr(args, "unmasking", None) is not None:
        overrides["unmasking"] = parse_unmasking(args.unmasking)
    if args.file_config is None:
        return preset_config(args, args.mode, **overrides)
    fields = {**flag_fields(args), **overrides}
    try:
        return args.file_config.replace(**fields) if fields else args.file_config
    except (TypeError, ValueError) as err:
        raise type(err)(f"--config {args.config!r} with the options given: {err}") from err


def parse_generate(argv: Sequence[str], prog: str = "dllm-edit generate") -> argparse.Namespace:
    """Parse and check `generate`'s options; reads the `--config` file (before any model is loaded)."""
    from .config_file import check_save_path, load_config_file

    parser = build_generate_parser()
    parser.prog = prog
    args = parser.parse_args(list(argv))
    args.max_new_tokens_given = args.max_new_tokens is not None
    args.file_config = None
    if args.config is not None:
        if args.mode is not None:
            raise ValueError(
                "--mode and --config both choose the decoding settings; give one (the other options "
                "override either)."
            )
        args.file_config = load_config_file(args.config)
        if args.max_new_tokens is None:
            args.max_new_tokens = args.file_config.max_new_tokens
        args.mode = f"config {args.config}"
    elif args.mode is None:
        args.mode = "speedy"
    if args.save_config is not None:
        check_save_path(args.save_config)
    return args
