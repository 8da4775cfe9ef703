"""`dllm-edit replay`: look at a traced decode again, on the terminal or as an HTML page.

    dllm-edit generate "sort:8718982948=" --trace run.json     # write the trace
    dllm-edit replay run.json                                  # redraw the live canvas, step by step
    dllm-edit replay run.json --html run.html                  # a self-contained page that replays it

On a terminal the canvas is redrawn at `--step-delay` seconds a step (default 0.4); piped, it prints
the final text and the history line.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from .checks import check_writable_file
from .parsing import Parser, add_debug_argument


def check_step_delay(value: float) -> float:
    """`--step-delay` must be a finite number of seconds >= 0."""
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"--step-delay must be a number of seconds >= 0 (e.g. --step-delay 0.3; 0 draws as fast as "
            f"it decodes), got {value}."
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit replay",
        description="Replay a decode traced with `dllm-edit generate PROMPT --trace FILE.json`.",
    )
    parser.add_argument("trace", help="the trace file (JSON) written by dllm-edit generate --trace")
    parser.add_argument(
        "--html", default=None, metavar="OUT", help="write a self-contained HTML page that replays it"
    )
    parser.add_argument(
        "--step-delay",
        type=float,
        default=0.4,
        metavar="SECONDS",
        help="seconds per step when redrawing on a terminal (default 0.4)",
    )
    add_debug_argument(parser)
    return parser


def run(argv: Sequence[str]) -> int:
    from dllm_edit.replay import TraceTokenizer, load_trace, replay_to_streamer, write_html
    from dllm_edit.terminal_streamer import TerminalEditStreamer

    args = build_parser().parse_args(list(argv))
    check_step_delay(args.step_delay)
    if args.html is not None:
        check_writable_file(args.html, "--html")
    document = load_trace(args.trace)
    if args.html is not None:
        write_html(document, args.html)
        result = document["result"]
        print(
            f"wrote {args.html}: {len(document['steps'])} steps, {result['num_forwards']} forwards, "
            f"{result['tokens_per_forward']:.2f} tokens/forward"
        )
        return 0
    live = sys.stdout.isatty()
    streamer = TerminalEditStreamer(
        TraceTokenizer(document),
        skip_prompt=True,
        prefix=document["prompt"],
        step_delay=args.step_delay,
        display=None if live else "append",
        color=None if live else False,
    )
    replay_to_streamer(document, streamer)
    return 0
