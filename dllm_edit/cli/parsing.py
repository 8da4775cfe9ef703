"""Argument parsers of `dllm-edit`: no prefix matching, and a usage mistake is one line.

A usage mistake raises `UsageError` (a `ValueError`) instead of printing the whole usage and
exiting, so `dllm-edit` reports it as `dllm-edit <command>: error: ...` with exit status 2, like
every other bad setting.
"""

from __future__ import annotations

import argparse
import difflib
import types
from collections.abc import Iterable
from typing import Any, NoReturn


class UsageError(ValueError):
    """A command line that the parser refuses (unknown option, missing or invalid value)."""


def _hint(parser: argparse.ArgumentParser, message: str) -> str:
    """`message`, plus the closest option to an unknown one (or the parser's own hint for it), plus
    where the options are listed."""
    extra = ""
    if message.startswith("unrecognized arguments:"):
        words = message.split(":", 1)[1].split()
        own = getattr(parser, "unknown_hints", {})
        named = [own[w.split("=", 1)[0]] for w in words if w.split("=", 1)[0] in own]
        options = [s for action in parser._actions for s in action.option_strings]
        extra = f" {named[0]}" if named else unknown_option_hint(words, options)
    return f"{message.rstrip('.')}.{extra} ({parser.prog} --help lists the options)"


def _error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    raise UsageError(_hint(self, message))


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with `allow_abbrev=False` (`--mode` is never read as `--model`) and
    errors raised as `UsageError`.

    Examples:
        >>> parser = Parser(prog="demo")
        >>> _ = parser.add_argument("--model")
        >>> parser.parse_args(["--mod", "x"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dllm_edit.cli.parsing.UsageError: unrecognized arguments: --mod x. Did you mean --model? ...
    """

    def __init__(self, *args: Any, unknown_hints: dict[str, str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.unknown_hints = dict(unknown_hints or {})  # option this parser lacks -> what to say

    def error(self, message: str) -> NoReturn:
        _error(self, message)


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make a parser built elsewhere (TRL's `TrlParser`) raise `UsageError` instead of exiting."""
    parser.error = types.MethodType(_error, parser)  # type: ignore[method-assign]
    return parser


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    """`--debug` (read by `dllm_edit.cli.main`, listed here so that `--help` shows it)."""
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error (or DLLM_EDIT_DEBUG=1)"
    )


def unknown_option_hint(words: Iterable[str], options: Iterable[str]) -> str:
    """' Did you mean --x?' for the first of `words` close to one of `options` ('' if none)."""
    options = list(options)
    for word in words:
        close = difflib.get_close_matches(str(word).split("=", 1)[0], options, n=1)
        if str(word).startswith("-") and close:
            return f" Did you mean {close[0]}?"
    return ""
