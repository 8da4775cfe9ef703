"""Every registered unmasking algorithm on the same model and held-out tasks: `dllm-edit bench --strategies`.

Each algorithm (a registered `Strategy` with `unmasks=True`) runs over its own sweep
(`Strategy.sweep`: its threshold, γ, ... from the most careful value to the most aggressive), alone
or composed with T2T editing, and is scored as the trade-off grid scores a setting
(`dllm_edit.evaluation.score_tasks`): exact match on the synthetic tasks, parse rate on code, tokens
per forward, tokens/s, and the wall time the algorithm took. `pareto_plot` draws accuracy against
tokens per forward, one curve per algorithm.

Examples:
    >>> [s.label for s in algorithm_settings(["threshold_unmask"], editing=("off", "S"))][::4]
    ['threshold_unmask threshold=0.9', 'threshold_unmask threshold=0.9 + T2T S']
"""

from __future__ import annotations

import dataclasses
import difflib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.evaluation import EDITING, decode_prompts, pyplot, score_tasks
from dllm_edit.strategies import Strategy, available_strategies, canonical_name, get_strategy

#: Editing compositions of the comparison: T2T off, or the Q / S thresholds of the trade-off grid.
ALGORITHM_EDITING = {"off": "off", "Q": "Q (0.5)", "S": "S (0.0)"}


def unmasking_strategies() -> list[str]:
    """Names of the registered strategies that fill masks (the algorithms `--strategies all` runs)."""
    return [name for name in available_strategies() if get_strategy(name).unmasks]


def resolve_names(spec: str | Sequence[str]) -> list[str]:
    """`"all"`, a comma-separated string or a list of names -> registered unmasking strategy names.

    Raises:
        ValueError: an unknown name (with close matches), or a strategy that does not unmask.
    """
    names = [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)
    names = [n for n in names if n]
    if names == ["all"]:
        return unmasking_strategies()
    if not names:
        raise ValueError("--strategies needs at least one name, or 'all'.")
    known = unmasking_strategies()
    resolved = []
    for given in names:
        try:  # an alias (a class name, an earlier spelling) stands for its registered name
            name = canonical_name(given)
        except ValueError:
            name = given
        resolved.append(name)
        if name not in known:
            registered = available_strategies()
            if name in registered:
                raise ValueError(
                    f"--strategies: {name!r} does not unmask (it edits or remasks written tokens); "
                    f"choose among the unmasking strategies {known}, or compose editing with --editing."
                )
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {close}?" if close else ""
            raise ValueError(f"--strategies: unknown strategy {name!r}; choose among {known} or 'all'.{hint}")
    return list(dict.fromkeys(resolved))


@dataclass(frozen=True)
class AlgorithmSetting:
    """One point of an algorithm's sweep: the strategy, the swept value, and the editing composed with it."""

    algorithm: str
    field: str | None
    value: Any
    editing: str  # a key of ALGORITHM_EDITING

    @property
    def label(self) -> str:
        swept = "" if self.field is None else f" {self.field}={self.value}"
        edit = "" if self.editing == "off" else f" + T2T {self.editing}"
        return f"{self.algorithm}{swept}{edit}"

    def strategy(self, block_length: int) -> Strategy:
        cls = get_strategy(self.algorithm)
        kwargs: dict[str, Any] = {} if self.field is None else {self.field: self.value}
        if "block_length" in getattr(cls, "__dataclass_fields__", {}):  # e.g. QuotaUnmask
            kwargs.setdefault("block_length", block_length)
        return cls(**kwargs)

    def config(self, max_new_tokens: int, block_length: int) -> EditGenerationConfig:
        return EditGenerationConfig.from_mode(
            "quality",
            unmasking=self.strategy(block_length),
            editing_threshold=EDITING[ALGORITHM_EDITING[self.editing]],
            max_new_tokens=max_new_tokens,
            block_length=block_length,
        )


def algorithm_settings(
    names: Sequence[str], editing: Sequence[str] = ("off",), block_length: int = 32
) -> list[AlgorithmSetting]:
    """Every algorithm of `names` over its `Strategy.sweep`, for each editing composition.

    Every setting is built (and so validated) here, before any forward runs.

    Raises:
        ValueError: an unknown editing name, or a sweep value the strategy refuses.
    """
    unknown = [e for e in editing if e not in ALGORITHM_EDITING]
    if unknown:
        raise ValueError(f"--editing: unknown {unknown}; choose among {list(ALGORITHM_EDITING)}.")
    out = []
    for name in names:
        sweep = get_strategy(name).sweep
        points: list[tuple[str | None, Any]] = (
            [(None, None)] if sweep is None else [(sweep[0], v) for v in sweep[1]]
        )
        for edit in editing:
            for field, value in points:
                setting = AlgorithmSetting(name, field, value, edit)
                setting.config(16, block_length)  # validate now
                out.append(setting)
    return out


def compare_algorithms(
    model: Any,
    tokenizer: Any,
    settings: Sequence[AlgorithmSetting],
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    *,
    block_length: int = 32,
    batch: int = 32,
    synthetic_tokens: int = 16,
    code_tokens: int = 64,
    repeats: int = 1,
    progress: bool = True,
    skip_unsupported: bool = False,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Score every setting on the held-out rows (a progress bar over the settings).

    Args:
        repeats: decode each setting this many times; the scores are the first run's (decoding is
            deterministic when greedy), the times (`seconds`, tokens/s) the median of the runs.
        skip_unsupported: leave out (with a printed reason) an algorithm the model cannot decode
            with, e.g. one needing an adapter capability it lacks; False raises its error.
        seed: every run of every setting decodes with a generator seeded with it, so rules that
            draw (`llada_random`, sampling) score the same in every run and every bench.

    Returns:
        One dict per setting: `algorithm`, `field`, `value`, `editing`, `label`, the scores of
        `score_tasks` (`accuracy`, `tpf_synthetic`, `tokens_per_s_synthetic`, and the code ones when
        `code` is given), `seconds`, the wall time of the setting's decodes (the median of the
        runs), `seconds_min` / `seconds_max`, the fastest and slowest run, `repeats` and `seed`.
    """
    from tqdm.auto import tqdm

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"`repeats` must be an int >= 1, got {repeats!r}.")
    # one untimed decode of each algorithm: first-call costs do not land on the first setting, and a
    # rule the model's adapter cannot serve (WINO's shadow block on a block-causal model) fails here
    probe = [r["prompt"] for r in (synthetic or code)[:2]]
    refused: dict[str, str] = {}
    for setting in {s.algorithm: s for s in settings}.values():
        try:
            decode_prompts(model, tokenizer, probe, setting.config(4, block_length), batch=2)
        except ValueError as err:
            if not skip_unsupported:
                raise
            refused[setting.algorithm] = str(err).splitlines()[0]
    for name, why in refused.items():
        print(f"skipped {name}: {why}")
    settings = [s for s in settings if s.algorithm not in refused]
    device = next(model.parameters()).device
    rows = []
    for setting in tqdm(settings, desc="algorithms", disable=not progress):
        runs = []
        for _ in range(repeats):
            generator = torch.Generator(device=device).manual_seed(seed)  # the same draws every run

            def decode(
                prompts: list[str],
                max_new_tokens: int,
                setting: AlgorithmSetting = setting,
                generator: torch.Generator = generator,
            ):
                config = setting.config(max_new_tokens, block_length)
                return decode_prompts(model, tokenizer, prompts, config, batch, generator=generator)

            start = time.perf_counter()
            row: dict[str, Any] = dataclasses.asdict(setting) | {"label": setting.label}
            row = score_tasks(row, decode, synthetic, code, synthetic_tokens, code_tokens)
            row["seconds"] = time.perf_counter() - start
            runs.append(row)
        row = runs[0]
        for key in ("seconds", "tokens_per_s_synthetic", "tokens_per_s_code"):
            if key in row:
                row[key] = statistics.median(r[key] for r in runs)
        row["seconds_min"] = min(r["seconds"] for r in runs)  # the spread of the runs
        row["seconds_max"] = max(r["seconds"] for r in runs)
        row["repeats"] = repeats
        row["seed"] = seed
        rows.append(row)
    return rows


def format_algorithm_table(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown table of `compare_algorithms` rows."""
    columns = ["algorithm", "setting", "editing", "exact match (%)", "TPF", "tokens/s", "wall (s)"]
    spread = all("seconds_min" in r for r in rows) and any(r.get("repeats", 1) > 1 for r in rows)
    if spread:
        columns[-1] = "wall (s, median (min-max))"
    has_code = any("parse_rate" in r for r in rows)
    if has_code:
        columns += ["parses (%)", "TPF (code)"]
    lines = ["| " + " | ".join(columns) + " |", "|---|---|---|" + "---:|" * (len(columns) - 3)]
    nan = float("nan")
    for r in rows:
        setting = "defaults" if r["field"] is None else f"{r['field']}={r['value']}"
        cells = [
            r["algorithm"],
            setting,
            r["editing"],
            f"{r.get('accuracy', nan):.1f}",
            f"{r.get('tpf_synthetic', nan):.2f}",
            f"{r.get('tokens_per_s_synthetic', nan):.0f}",
            f"{r['seconds']:.1f}" + (f" ({r['seconds_min']:.1f}-{r['seconds_max']:.1f})" if spread else ""),
        ]
        if has_code:
            cells += [f"{r.get('parse_rate', nan):.1f}", f"{r.get('tpf_code', nan):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pareto_plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Exact match against tokens per forward, one curve per algorithm over its sweep; one panel per
    editing setting (editing off, + T2T ...), each algorithm the same colour and marker in every panel.

    Raises:
        ImportError: matplotlib is not installed (the `bench` extra).
    """
    plt = pyplot()
    scored = [r for r in rows if "accuracy" in r]
    algorithms = list(dict.fromkeys(r["algorithm"] for r in scored))
    editings = list(dict.fromkeys(r["editing"] for r in scored))
    colours = plt.get_cmap("tab10" if len(algorithms) <= 10 else "tab20")
    markers = "osD^vP<>X*hp"
    style = {
        name: dict(color=colours(i % colours.N), marker=markers[i % len(markers)])
        for i, name in enumerate(algorithms)
    }
    fig, axes = plt.subplots(
        1, len(editings), figsize=(4.6 * len(editings) + 1.8, 4.8), sharey=True, squeeze=False
    )
    for ax, editing in zip(axes[0], editings, strict=True):
        for name in algorithms:
            group = sorted(
                (r for r in scored if r["algorithm"] == name and r["editing"] == editing),
                key=lambda r: r["tpf_synthetic"],
            )
            if group:
                ax.plot(
                    [r["tpf_synthetic"] for r in group],
                    [r["accuracy"] for r in group],
                    label=name,
                    linewidth=1.4,
                    markersize=5,
                    **style[name],
                )
        ax.set(
            xlabel="tokens per forward",
            title="editing off" if editing == "off" else f"+ T2T editing {editing}",
        )
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact match (%), held-out synthetic")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 1.75 / (4.6 * len(editings) + 1.8), 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
