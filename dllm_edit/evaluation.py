"""The speed / quality trade-off of editable decoding on held-out data (LLaDA2.1 Tables 1/4 in small).

For each model and each decoding setting — τ_mask, editing off / Q (τ_edit 0.5) / S (τ_edit 0.0),
multi-block editing off / on — the held-out synthetic prompts are scored by exact match and the
held-out code prompts by the fraction of completions that parse; both report tokens per forward
(completion tokens / forwards) and tokens per second. Used by `dllm-edit bench` and
`benchmarks/tradeoff.py`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.data.code_corpus import parses
from dllm_edit.generation import generate
from dllm_edit.output import EditGenerationOutput

EDITING = {"off": None, "Q (0.5)": 0.5, "S (0.0)": 0.0}


@dataclass(frozen=True)
class Setting:
    """One decoding setting of the grid."""

    threshold: float
    editing: str  # a key of EDITING
    multi_block_edit: bool

    def config(self, max_new_tokens: int, block_length: int) -> EditGenerationConfig:
        return EditGenerationConfig.from_mode(
            "quality",
            threshold=self.threshold,
            editing_threshold=EDITING[self.editing],
            multi_block_edit=self.multi_block_edit,
            max_new_tokens=max_new_tokens,
            block_length=block_length,
        )


def tradeoff_settings(
    thresholds: Sequence[float] = (0.9, 0.7, 0.5, 0.3),
    editing: Sequence[str] = tuple(EDITING),
    multi_block_edit: Sequence[bool] = (False, True),
) -> list[Setting]:
    """The grid of settings (every combination).

    Raises:
        ValueError: an unknown editing name.

    Examples:
        >>> len(tradeoff_settings())
        24
    """
    unknown = [e for e in editing if e not in EDITING]
    if unknown:
        raise ValueError(f"Unknown editing settings {unknown}; choose from {list(EDITING)}.")
    return [Setting(t, e, m) for m in multi_block_edit for e in editing for t in thresholds]


@torch.no_grad()
def decode_prompts(model: Any, tokenizer: Any, prompts: list[str], config: EditGenerationConfig, batch: int):
    """Decode `prompts` in left-padded batches: (completions up to EOS, mean tokens per forward, tokens/s)."""
    texts: list[str] = []
    tpf: list[float] = []
    tokens = 0
    start = time.perf_counter()
    device = next(model.parameters()).device
    for i in range(0, len(prompts), batch):
        enc = tokenizer(prompts[i : i + batch], return_tensors="pt", padding=True, padding_side="left")
        out = generate(
            model,
            enc["input_ids"].to(device),
            attention_mask=enc["attention_mask"].to(device),
            generation_config=config,
            tokenizer=tokenizer,
            return_dict_in_generate=True,
        )
        if (
            not isinstance(out, EditGenerationOutput)
            or out.sequences is None
            or out.tokens_per_forward is None
        ):
            raise TypeError("generate did not return an EditGenerationOutput")
        texts += tokenizer.batch_decode(
            out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        tpf += out.tokens_per_forward.tolist()
        if out.num_forwards is not None:
            tokens += int((out.tokens_per_forward * out.num_forwards).sum())
    seconds = time.perf_counter() - start
    return texts, statistics.fmean(tpf), tokens / seconds if seconds > 0 else float("inf")


def evaluate_setting(
    model: Any,
    tokenizer: Any,
    setting: Setting,
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    *,
    block_length: int = 32,
    batch: int = 32,
    synthetic_tokens: int = 16,
    code_tokens: int = 64,
) -> dict[str, Any]:
    """Scores of one setting: exact match and TPF on `synthetic`, parse rate and TPF on `code`, tokens/s."""
    row: dict[str, Any] = asdict(setting)
    if synthetic:
        cfg = setting.config(synthetic_tokens, block_length)
        texts, tpf, tps = decode_prompts(model, tokenizer, [r["prompt"] for r in synthetic], cfg, batch)
        row["accuracy"] = 100 * statistics.fmean(
            float(t.strip() == r["completion"].strip()) for t, r in zip(texts, synthetic, strict=True)
        )
        row["tpf_synthetic"], row["tokens_per_s_synthetic"] = tpf, tps
    if code:
        cfg = setting.config(code_tokens, block_length)
        texts, tpf, tps = decode_prompts(model, tokenizer, [r["prompt"] for r in code], cfg, batch)
        row["parse_rate"] = 100 * statistics.fmean(
            float(parses(r["prompt"], t)) for t, r in zip(texts, code, strict=True)
        )
        row["tpf_code"], row["tokens_per_s_code"] = tpf, tps
    return row


def tradeoff(
    models: dict[str, tuple[Any, Any]],
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    settings: Sequence[Setting],
    *,
    progress: bool = True,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """`evaluate_setting` for every model and setting (a progress bar on long runs).

    Args:
        models: name → `(model, tokenizer)`.
        synthetic: held-out rows with exact answers (`prompt`, `completion`).
        code: held-out code rows (`prompt` = a `def` header).
        settings: the grid (`tradeoff_settings`).
        progress: show a tqdm progress bar.
        **kwargs: `block_length`, `batch`, `synthetic_tokens`, `code_tokens` of `evaluate_setting`.

    Returns:
        One dict per (model, setting), with a `model` key.
    """
    from tqdm.auto import tqdm

    jobs = [(name, s) for name in models for s in settings]
    rows = []
    for name, setting in tqdm(jobs, desc="trade-off", disable=not progress):
        model, tokenizer = models[name]
        rows.append({"model": name, **evaluate_setting(model, tokenizer, setting, synthetic, code, **kwargs)})
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown table of `tradeoff` rows."""
    columns = ["model", "τ_mask", "editing", "MBE", "exact match (%)", "TPF", "parses (%)", "TPF (code)"]
    lines = [
        "| " + " | ".join([*columns, "tokens/s (code)"]) + " |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mbe = "on" if r["multi_block_edit"] else "off"
        lines.append(
            f"| {r['model']} | {r['threshold']} | {r['editing']} | {mbe} | "
            f"{r.get('accuracy', float('nan')):.1f} | {r.get('tpf_synthetic', float('nan')):.2f} | "
            f"{r.get('parse_rate', float('nan')):.1f} | {r.get('tpf_code', float('nan')):.2f} | "
            f"{r.get('tokens_per_s_code', float('nan')):.0f} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Accuracy against tokens per forward, one line per (model, editing, MBE) over τ_mask.

    Raises:
        ImportError: matplotlib is not installed (the `bench` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError('Plotting needs matplotlib: pip install "dllm-edit[bench]".') from err
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    groups: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["editing"], r["multi_block_edit"]), []).append(r)
    for (model, editing, mbe), group in groups.items():
        group = sorted(group, key=lambda r: r["threshold"])
        label = f"{model}, edit {editing}{', MBE' if mbe else ''}"
        style = "--" if mbe else "-"
        if "accuracy" in group[0]:
            axes[0].plot(
                [r["tpf_synthetic"] for r in group],
                [r["accuracy"] for r in group],
                style,
                marker="o",
                label=label,
            )
        if "parse_rate" in group[0]:
            axes[1].plot(
                [r["tpf_code"] for r in group],
                [r["parse_rate"] for r in group],
                style,
                marker="o",
                label=label,
            )
    axes[0].set(xlabel="tokens per forward", ylabel="exact match (%)", title="synthetic tasks (held out)")
    axes[1].set(
        xlabel="tokens per forward", ylabel="completions that parse (%)", title="code (held-out modules)"
    )
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
