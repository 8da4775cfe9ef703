"""The `dllm-edit` command line.

Subcommands:
    generate  decode a prompt, showing drafts and edits live (`dllm-edit generate "def f(n):" --model M`)
    infill    fill the gaps of a template (`dllm-edit infill "def add(a, b):\n    <mask:8>\n" --model M`)
    compare   S vs Q vs M2T-only on one prompt, side by side
    replay    replay a traced decode (`dllm-edit replay run.json [--html run.html]`)
    bench     accuracy / parse rate against tokens per forward over τ_mask × editing × MBE
    sft    edit-aware SFT from a TRL-style YAML recipe (`dllm-edit sft --config recipe.yaml`)
    ebpo   EBPO reinforcement learning with reward functions (`dllm-edit ebpo --config recipe.yaml`)
    export  SGLang JointThreshold config + launch command (`dllm-edit export sglang --mode speedy --out D`)
    eval   lm-evaluation-harness with the `dllm_edit` model (`dllm-edit eval --tasks T --model_args ...`)

User mistakes (a missing file, an invalid option, a model needing `--trust-remote-code`, a device
this machine lacks, an output path that cannot be written) print one line
`dllm-edit <command>: error: ...` and exit with status 2, before any long work starts; an unexpected
failure prints one line too and exits with status 1. `dllm-edit --debug <command> ...` (or
`DLLM_EDIT_DEBUG=1`) shows the Python traceback instead. `dllm-edit --version` prints the version.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence


def _generate(argv: Sequence[str]) -> int:
    from . import decode

    return decode.run_generate(argv)


def _infill(argv: Sequence[str]) -> int:
    from . import decode

    return decode.run_generate(argv, infill=True)


def _compare(argv: Sequence[str]) -> int:
    from . import decode

    return decode.run_compare(argv)


def _replay(argv: Sequence[str]) -> int:
    from . import replay

    return replay.run(argv)


def _bench(argv: Sequence[str]) -> int:
    from . import bench

    return bench.run(argv)


def _sft(argv: Sequence[str]) -> int:
    from . import sft

    return sft.run(argv)


def _ebpo(argv: Sequence[str]) -> int:
    from . import ebpo

    return ebpo.run(argv)


def _export(argv: Sequence[str]) -> int:
    from . import export

    return export.run(argv)


def _eval(argv: Sequence[str]) -> int:
    from . import evaluate

    return evaluate.run(argv)


COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "generate": (_generate, "decode a prompt with the editable decoder, drafts and edits shown live"),
    "infill": (_infill, "fill the <mask:N> gaps of a template (models with full attention)"),
    "compare": (_compare, "decode a prompt with S, Q and M2T-only, side by side with their numbers"),
    "replay": (_replay, "replay a decode traced with generate --trace: on the terminal or as an HTML page"),
    "bench": (_bench, "the speed / quality trade-off table (and plot) on held-out data"),
    "sft": (_sft, "edit-aware SFT (mixed M2T + T2T objective) from a YAML recipe or flags"),
    "ebpo": (_ebpo, "EBPO reinforcement learning with verifiable rewards, from a YAML recipe or flags"),
    "export": (_export, "SGLang serving export: JointThreshold YAML and launch command"),
    "eval": (_eval, "lm-evaluation-harness tasks with the dllm_edit model (arguments go to lm-eval run)"),
}

USAGE = (
    "usage: dllm-edit [--version] [--debug] <command> [options]   (dllm-edit <command> --help for its "
    "options)\n\ncommands:\n"
    + "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())
    + "\n\n  --version  print the version and exit\n  --debug    show the Python traceback of an error "
    "(also DLLM_EDIT_DEBUG=1)"
)

# commands whose own parsers take `--debug` after the command name (sft / ebpo leave it to
# TrainingArguments' `--debug`, eval to lm-eval)
_DEBUG_AFTER_COMMAND = ("generate", "infill", "compare", "bench", "export", "replay")
# exceptions that mean "the input is wrong", not "the program is": exit status 2
_USER_ERRORS = (ValueError, TypeError, OSError, ImportError)


def version() -> str:
    """The installed version of dllm-edit."""
    from dllm_edit import __version__

    return __version__


def _debug_from_env() -> bool:
    return os.environ.get("DLLM_EDIT_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def _report(command: str, err: Exception) -> int:
    """Print what went wrong in one line; the exit status (2: the input, 1: anything else)."""
    try:
        from yaml import YAMLError  # a dependency of transformers
    except ImportError:  # pragma: no cover
        YAMLError = ()  # type: ignore[assignment,misc]

    prefix = f"dllm-edit {command}: error:"
    if isinstance(err, YAMLError):
        print(f"{prefix} the YAML file cannot be read: {_one_line(err)}", file=sys.stderr)
        return 2
    if type(err).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch
        print(
            f"{prefix} out of memory on the device ({_one_line(err)[:200]}). Lower --max-new-tokens or the "
            "batch size, choose a smaller --dtype, or use another device.",
            file=sys.stderr,
        )
        return 1
    if isinstance(err, _USER_ERRORS):
        print(f"{prefix} {_one_line(err)}", file=sys.stderr)
        return 2
    print(
        f"{prefix} unexpected {type(err).__name__}: {_one_line(err)} (rerun with --debug for the traceback; "
        "please report it if the input is right)",
        file=sys.stderr,
    )
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `dllm-edit` console script. Returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_from_env()
    while args and args[0] == "--debug":
        debug = True
        args.pop(0)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"dllm-edit {version()}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        print(f"dllm-edit: error: unknown command {command!r}.{hint}\n\n{USAGE}", file=sys.stderr)
        return 2
    if command in _DEBUG_AFTER_COMMAND and "--debug" in rest:
        debug = True
        rest = [a for a in rest if a != "--debug"]
    run, _ = COMMANDS[command]
    try:
        return run(rest)
    except SystemExit as exit_:  # --help, or a parser of another library giving up
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(f"dllm-edit {command}: error: {exit_.code}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of our output went away (`dllm-edit sft --help | head`): quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit does not raise again
        return 141  # 128 + SIGPIPE, what a shell reports for a command whose pipe closed
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"dllm-edit {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if debug:
            raise
        return _report(command, err)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
