"""Export an `EditGenerationConfig` to SGLang's JointThreshold decoder (serving LLaDA2.x).

SGLang serves block-diffusion models with `--dllm-algorithm JointThreshold --dllm-algorithm-config
cfg.yaml`. Its step, per block: M2T commits masked positions whose argmax probability is `>
threshold` (at least the most confident one), T2T rewrites non-prompt tokens whose argmax differs
and has probability `> edit_threshold`, `penalty_lambda` is subtracted from the logit of the left
neighbour's token, and the block ends when a step changes nothing or after `max_post_edit_steps`
mask-free steps. The settings are fixed per server.

The mapping (docs/how-to/scaling-out.md has the full table and the differences in forward counting):

| ours                              | SGLang                          |
|-----------------------------------|---------------------------------|
| `threshold` (a constant)          | `threshold`                     |
| `editing_threshold` (a constant)  | `edit_threshold`                |
| `editing_threshold=None` (off)    | `edit_threshold: 1.0` (`p > 1` never holds) |
| `max_post_steps`                  | `max_post_edit_steps`           |
| `repeat_penalty`                  | `penalty_lambda`                |
| `block_length`                    | `block_size`                    |

Everything else SGLang cannot express is refused, or, with `allow_approximate=True`, dropped with a
warning that names it.
"""

from __future__ import annotations

import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any

from dllm_edit.strategies import Constant, Schedule

SGLANG_ARCHITECTURES = ("LLaDA2MoeModelLM", "SDARForCausalLM", "SDARMoeForCausalLM")
"""Architectures SGLang's JointThreshold serves (its `DllmConfig` table)."""

EDITING_OFF = 1.0
"""`edit_threshold` that disables SGLang's T2T: a probability is never `> 1.0`."""


class SGLangExportError(ValueError):
    """A setting SGLang's JointThreshold cannot express (export with `allow_approximate=True` to drop it)."""


@dataclass(frozen=True)
class SGLangExport:
    """The result of `EditGenerationConfig.to_sglang()`.

    Attributes:
        algorithm_config: the keys of the `--dllm-algorithm-config` YAML.
        request_defaults: per-request sampling parameters to send with each request
            (`max_new_tokens`, `temperature`).
        dropped: one sentence per setting dropped under `allow_approximate` (empty when exact).
    """

    algorithm_config: dict[str, Any]
    request_defaults: dict[str, Any]
    dropped: tuple[str, ...] = field(default=())

    def to_yaml(self) -> str:
        """The `--dllm-algorithm-config` file."""
        import yaml

        return str(yaml.safe_dump(self.algorithm_config, sort_keys=False))

    def launch_command(
        self,
        model_path: str,
        config_path: str,
        *,
        trust_remote_code: bool = True,
        max_running_requests: int | None = None,
        tp_size: int | None = None,
    ) -> str:
        """The `python -m sglang.launch_server ...` command line serving `model_path` with these settings."""
        parts = ["python", "-m", "sglang.launch_server", "--model-path", model_path]
        parts += ["--dllm-algorithm", "JointThreshold", "--dllm-algorithm-config", config_path]
        if trust_remote_code:
            parts.append("--trust-remote-code")
        if max_running_requests is not None:
            parts += ["--max-running-requests", str(max_running_requests)]
        if tp_size is not None:
            parts += ["--tp-size", str(tp_size)]
        return shlex.join(parts)


def _constant(name: str, value: Any, problems: list[str]) -> float | None:
    if isinstance(value, Schedule) and not isinstance(value, Constant):
        problems.append(
            f"`{name}` is a {type(value).__name__} schedule; SGLang's thresholds are one number per server"
        )
        return None
    return float(value.value if isinstance(value, Constant) else value)


def export_sglang(
    config: Any,
    *,
    architecture: str | None = None,
    adapter: str | None = None,
    allow_approximate: bool = False,
) -> SGLangExport:
    """The JointThreshold settings of `config` (see `EditGenerationConfig.to_sglang`)."""
    problems: list[str] = []
    threshold = _constant("threshold", config.threshold, problems)
    editing = config.editing_threshold
    edit_threshold = EDITING_OFF if editing is None else _constant("editing_threshold", editing, problems)
    if config.strategies is not None:
        problems.append("`strategies` is an explicit strategy list; SGLang runs only JointThreshold")
    if getattr(config, "unmasking", None) is not None:
        problems.append(
            f"`unmasking={config.unmasking.registry_name()!r}` is another unmasking rule; SGLang runs only "
            "JointThreshold's"
        )
    if config.steps is not None:
        problems.append(
            f"`steps={config.steps}` selects the fixed-steps quota mode, which JointThreshold lacks"
        )
    if config.multi_block_edit:
        problems.append("`multi_block_edit=True`: SGLang edits only the active block")
    if getattr(config, "eos_fill", False):
        problems.append(
            "`eos_fill=True`: JointThreshold has no EOS fill (it decodes every block; the EOS stop ends "
            "the request after a block)"
        )
    if config.num_to_transfer != 1:
        problems.append(
            f"`num_to_transfer={config.num_to_transfer}`: SGLang's fallback commits exactly 1 token"
        )
    temperature = config.temperature or 0.0
    if temperature > 0:
        problems.append(f"`temperature={temperature}`: JointThreshold always takes the argmax (no sampling)")
    for name, value in config.active_sampling_filters().items():
        problems.append(f"`{name}={value}`: JointThreshold takes the argmax (no sampling filters)")
    if config.repetition_penalty not in (None, 1.0):
        problems.append(
            f"`repetition_penalty={config.repetition_penalty}`: JointThreshold has only its adjacent "
            "`penalty_lambda` (dllm_edit's `repeat_penalty`)"
        )
    if config.suppress_tokens:
        problems.append(f"`suppress_tokens={config.suppress_tokens}`: JointThreshold suppresses no tokens")
    cap = config.max_steps_per_block
    if isinstance(cap, int):
        problems.append(
            f"`max_steps_per_block={cap}`: SGLang's cap is fixed at block_size + max_post_edit_steps + 1"
        )
    if config.output_trace:
        problems.append("`output_trace=True`: a server returns no step trace")
    if architecture is not None and architecture not in SGLANG_ARCHITECTURES:
        problems.append(
            f"architecture {architecture!r} is not one SGLang's JointThreshold serves "
            f"{list(SGLANG_ARCHITECTURES)}"
        )
    if adapter is not None:
        from dllm_edit.adapters import get_adapter_class

        if get_adapter_class(adapter).shifted_logits:
            # not a setting that can be dropped: the server would decode other tokens, so
            # allow_approximate does not apply
            raise SGLangExportError(
                f"The model decodes with the {adapter!r} adapter: its prediction for position j is its "
                "output at j - 1 (a next-token head), and SGLang's JointThreshold reads position j's "
                "own logits, so the server would decode other tokens than dllm_edit. Serve this model "
                "with dllm_edit (dllm_edit.generate, `dllm-edit generate`, the lm-eval bridge) instead."
                + (f" Besides, JointThreshold cannot express: {'; '.join(problems)}." if problems else "")
            )
    if problems and not allow_approximate:
        raise SGLangExportError(
            "SGLang's JointThreshold cannot express: "
            + "; ".join(problems)
            + ". Change these settings, or export with allow_approximate=True (--allow-approximate) "
            "to drop them."
        )
    for problem in problems:
        warnings.warn(f"SGLang export drops a setting: {problem}.", stacklevel=3)
    algorithm_config: dict[str, Any] = {
        "threshold": threshold if threshold is not None else 0.5,
        "edit_threshold": edit_threshold if edit_threshold is not None else EDITING_OFF,
        "max_post_edit_steps": int(config.max_post_steps),
        "penalty_lambda": float(config.repeat_penalty),
        "block_size": int(config.block_length),
    }
    request_defaults = {"max_new_tokens": config.max_new_tokens, "temperature": 0.0}
    return SGLangExport(algorithm_config, request_defaults, tuple(problems))


def sglang_fields(algorithm_config: dict[str, Any]) -> dict[str, Any]:
    """The `EditGenerationConfig` fields a JointThreshold YAML describes (`edit_threshold >= 1` is
    editing off; missing keys take SGLang's defaults). `EditGenerationConfig.from_sglang` builds the
    config from them.

    Raises:
        ValueError: a key JointThreshold does not have.

    Examples:
        >>> sglang_fields({"threshold": 0.5, "edit_threshold": 1.0})["editing_threshold"] is None
        True
    """
    known = {"threshold", "edit_threshold", "max_post_edit_steps", "penalty_lambda", "block_size"}
    unknown = sorted(set(algorithm_config) - known)
    if unknown:
        raise ValueError(f"Unknown JointThreshold keys {unknown}; expected a subset of {sorted(known)}.")
    edit = algorithm_config.get("edit_threshold", 0.0)  # SGLang's defaults
    return dict(
        threshold=float(algorithm_config.get("threshold", 0.5)),
        editing_threshold=None if float(edit) >= 1.0 else float(edit),
        max_post_steps=int(algorithm_config.get("max_post_edit_steps", 16)),
        repeat_penalty=float(algorithm_config.get("penalty_lambda", 0.0)),
        block_length=int(algorithm_config.get("block_size", 32)),
    )


def config_from_sglang(algorithm_config: dict[str, Any], **fields: Any) -> Any:
    """`EditGenerationConfig.from_sglang(algorithm_config, **fields)`, under its earlier name.

    This module does not import the config at its top (the config imports this module); the
    earlier name reaches it here.

    Examples:
        >>> config_from_sglang({"threshold": 0.5, "edit_threshold": 1.0, "max_post_edit_steps": 16,
        ...     "penalty_lambda": 0.0, "block_size": 32}).editing_threshold is None
        True
    """
    from dllm_edit.config import EditGenerationConfig

    return EditGenerationConfig.from_sglang(algorithm_config, **fields)
