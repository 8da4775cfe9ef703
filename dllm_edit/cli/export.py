"""`dllm-edit export sglang`: write SGLang's JointThreshold YAML and its launch command."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .checks import check_writable_dir
from .parsing import Parser, add_debug_argument

CONFIG_NAME = "joint_threshold.yaml"
LAUNCH_NAME = "launch_sglang.sh"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit export sglang",
        description="Write SGLang's JointThreshold config (YAML) and the launch command for a preset "
        "with overrides. Settings SGLang cannot express are refused (or dropped with a warning under "
        "--allow-approximate).",
    )
    parser.add_argument(
        "--mode",
        default="speedy",
        choices=("speedy", "quality"),
        help="preset: speedy (S, default) or quality (Q); LLaDA-1's fixed-steps rule has no SGLang form",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an EditGenerationConfig field (repeatable; the value is read as YAML: 0.6, "
        "null, true); e.g. --set threshold=0.6 --set editing_threshold=null",
    )
    parser.add_argument("--model", required=True, help="model path or Hub id for --model-path")
    parser.add_argument("--out", required=True, help="folder for the YAML and the launch script")
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument("--tp-size", type=int, default=None)
    parser.add_argument(
        "--no-trust-remote-code",
        action="store_true",
        help="leave --trust-remote-code out of the command (LLaDA2.x needs it)",
    )
    parser.add_argument(
        "--architecture",
        default=None,
        help="the model's architecture (default: read from MODEL/config.json when MODEL is a folder)",
    )
    parser.add_argument("--allow-approximate", action="store_true", help="drop unsupported settings, warning")
    add_debug_argument(parser)
    return parser


def _overrides(pairs: Sequence[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes FIELD=VALUE, got {pair!r}.")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _model_config(model: str) -> dict[str, Any] | None:
    config = Path(model).expanduser() / "config.json"
    return json.loads(config.read_text()) if config.is_file() else None


def _architecture(config: dict[str, Any] | None) -> str | None:
    if config is None:
        return None
    return (config.get("architectures") or [None])[0]


def _adapter(config: dict[str, Any] | None) -> str | None:
    """The adapter dllm_edit detects for a checkpoint's config.json (declared, or by model_type)."""
    if config is None:
        return None
    from types import SimpleNamespace

    from dllm_edit.adapters import detect_adapter

    return detect_adapter(SimpleNamespace(config=SimpleNamespace(**config)))


def run(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: dllm-edit export sglang --model MODEL --out FOLDER [options]\n\n"
            "targets:\n  sglang   SGLang's JointThreshold config and launch script "
            "(dllm-edit export sglang --help)"
        )
        return 0 if args else 2
    if args[0] != "sglang":
        raise ValueError(f"Unknown export target {args[0]!r}; the one target is 'sglang'.")
    ns = build_parser().parse_args(args[1:])
    for name in ("max_running_requests", "tp_size"):
        value = getattr(ns, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
    check_writable_dir(ns.out, "--out")
    from dllm_edit.config import EditGenerationConfig

    config = EditGenerationConfig.from_mode(ns.mode, **_overrides(ns.set))
    model_config = _model_config(ns.model)
    architecture = ns.architecture or _architecture(model_config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export = config.to_sglang(
            architecture=architecture, adapter=_adapter(model_config), allow_approximate=ns.allow_approximate
        )
    for warning in caught:
        print(f"warning: {warning.message}")
    out = Path(os.path.abspath(Path(ns.out).expanduser()))  # the script runs from any folder
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / CONFIG_NAME
    config_path.write_text(export.to_yaml())
    local = Path(ns.model).expanduser()
    command = export.launch_command(
        os.path.abspath(local) if local.exists() else ns.model,
        str(config_path),
        trust_remote_code=not ns.no_trust_remote_code,
        max_running_requests=ns.max_running_requests,
        tp_size=ns.tp_size,
    )
    defaults = json.dumps(export.request_defaults)
    launch = out / LAUNCH_NAME
    launch.write_text(
        "#!/usr/bin/env bash\n# written by dllm-edit export sglang; per-request sampling parameters: "
        f"{defaults}\n{command}\n"
    )
    launch.chmod(launch.stat().st_mode | 0o111)  # executable, as a launch script is run
    print(
        f"wrote {config_path} and {out / LAUNCH_NAME}\n{command}\nper-request sampling parameters: {defaults}"
    )
    return 0
