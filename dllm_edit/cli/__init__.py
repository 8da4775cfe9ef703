"""The `dllm-edit` command line.

Subcommands:
    generate  decode a prompt, showing drafts and edits live (`dllm-edit generate "def f(n):" --model M`)
    compare   S vs Q vs M2T-only on one prompt, side by side
    bench     accuracy / parse rate against tokens per forward over τ_mask × editing × MBE
    sft    edit-aware SFT from a TRL-style YAML recipe (`dllm-edit sft --config recipe.yaml`)
    ebpo   EBPO reinforcement learning with reward functions (`dllm-edit ebpo --config recipe.yaml`)
    export  SGLang JointThreshold config + launch command (`dllm-edit export sglang --mode speedy --out D`)
    eval   lm-evaluation-harness with the `dllm_edit` model (`dllm-edit eval --tasks T --model_args ...`)

User mistakes (a missing file, an invalid option, a model needing `--trust-remote-code`) print one
line `dllm-edit <command>: error: ...` and exit with status 2; set `DLLM_EDIT_DEBUG=1` for the
traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence


def _generate(argv: Sequence[str]) -> int:
    from . import decode

    return decode.run_generate(argv)


def _compare(argv: Sequence[str]) -> int:
    from . import decode

    return decode.run_compare(argv)


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
    "compare": (_compare, "decode a prompt with S, Q and M2T-only, side by side with their numbers"),
    "bench": (_bench, "the speed / quality trade-off table (and plot) on held-out data"),
    "sft": (_sft, "edit-aware SFT (mixed M2T + T2T objective) from a YAML recipe or flags"),
    "ebpo": (_ebpo, "EBPO reinforcement learning with verifiable rewards, from a YAML recipe or flags"),
    "export": (_export, "SGLang serving export: JointThreshold YAML and launch command"),
    "eval": (_eval, "lm-evaluation-harness tasks with the dllm_edit model (arguments go to lm-eval run)"),
}

USAGE = (
    "usage: dllm-edit <command> [options]   (dllm-edit <command> --help for its options)\n\ncommands:\n"
    + "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `dllm-edit` console script. Returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"dllm-edit: error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    run, _ = COMMANDS[command]
    try:
        return run(rest)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        if os.environ.get("DLLM_EDIT_DEBUG"):
            raise
        print(f"dllm-edit {command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
