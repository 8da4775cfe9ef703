"""The speed / quality trade-off of editable decoding on held-out data (LLaDA2.1 Tables 1/4 in small).

For each model and each decoding setting — τ_mask, editing off / Q (τ_edit 0.5) / S (τ_edit 0.0)
(and, on request, S with low-confidence remasking), multi-block editing off / on — the held-out
synthetic prompts are scored by exact match and the held-out code prompts by the fraction of
completions that parse and by how long they are against the reference bodies (a parse rate alone
cannot tell a body from `return self`); both report tokens per forward (completion tokens /
forwards) and tokens per second. Used by `dllm-edit bench` and `benchmarks/tradeoff.py`.

An autoregressive model of the same size, trained on the same data, is measured the way a user
would otherwise decode it — plain `model.generate` (greedy, KV cache) — by `evaluate_autoregressive`:
one forward per token, so its tokens per forward is 1.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from dllm_edit.config import EditGenerationConfig
from dllm_edit.data.code_corpus import parses
from dllm_edit.generation import generate
from dllm_edit.output import EditGenerationOutput, cut_after_first_eos
from dllm_edit.strategies import LowConfidenceRemask

EDITING = {"off": None, "Q (0.5)": 0.5, "S (0.0)": 0.0, "S + remask (0.3)": 0.0}
DEFAULT_EDITING = ("off", "Q (0.5)", "S (0.0)")
# editing settings that add `LowConfidenceRemask` (threshold, max remask steps per block) to the strategies
REMASKING = {"S + remask (0.3)": (0.3, 8)}


@dataclass(frozen=True)
class Setting:
    """One decoding setting of the grid."""

    threshold: float
    editing: str  # a key of EDITING
    multi_block_edit: bool

    def config(self, max_new_tokens: int, block_length: int) -> EditGenerationConfig:
        config = EditGenerationConfig.from_mode(
            "quality",
            threshold=self.threshold,
            editing_threshold=EDITING[self.editing],
            multi_block_edit=self.multi_block_edit,
            max_new_tokens=max_new_tokens,
            block_length=block_length,
        )
        if self.editing not in REMASKING:
            return config
        threshold, max_steps = REMASKING[self.editing]
        remask = LowConfidenceRemask(threshold=threshold, max_steps=min(max_steps, block_length))
        return config.replace(strategies=[*config.build_strategies(), remask])  # last: it wins ties


def tradeoff_settings(
    thresholds: Sequence[float] = (0.9, 0.7, 0.5, 0.3),
    editing: Sequence[str] = DEFAULT_EDITING,
    multi_block_edit: Sequence[bool] = (False, True),
) -> list[Setting]:
    """The grid of settings (every combination). `editing` names keys of `EDITING`; the default
    leaves out `"S + remask (0.3)"` (the S preset plus `LowConfidenceRemask(0.3)`, at most
    `min(8, block_length)` remask steps per block), which `dllm-edit bench --remask` adds.

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
def decode_prompts(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    config: EditGenerationConfig,
    batch: int,
    generator: torch.Generator | None = None,
):
    """Decode `prompts` in left-padded batches: (completions up to EOS, mean tokens per forward, tokens/s).

    `generator` feeds every draw of the decodes (sampling, `llada_random`'s positions); pass a seeded
    one for scores that repeat from run to run."""
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
            generator=generator,
        )
        if (
            not isinstance(out, EditGenerationOutput)
            or out.sequences is None
            or out.tokens_per_forward is None
        ):
            raise TypeError("generate did not return an EditGenerationOutput")
        texts += tokenizer.batch_decode(out.completions(enc["input_ids"].shape[1]), skip_special_tokens=True)
        tpf += out.tokens_per_forward.tolist()
        if out.completion_lengths is not None:
            tokens += int(out.completion_lengths.sum())
    seconds = time.perf_counter() - start
    return texts, statistics.fmean(tpf), tokens / seconds if seconds > 0 else float("inf")


def exact_match(texts: Sequence[str], rows: Sequence[dict[str, str]]) -> float:
    """Percentage of `texts` equal to their row's `completion` (surrounding whitespace ignored)."""
    return 100 * statistics.fmean(
        float(t.strip() == r["completion"].strip()) for t, r in zip(texts, rows, strict=True)
    )


def parse_rate(texts: Sequence[str], rows: Sequence[dict[str, str]]) -> float:
    """Percentage of `prompt + text` that is valid Python."""
    return 100 * statistics.fmean(float(parses(r["prompt"], t)) for t, r in zip(texts, rows, strict=True))


def length_ratio(texts: Sequence[str], rows: Sequence[dict[str, str]]) -> float:
    """Median over rows of the completion's length as a percentage of the reference `completion`'s
    (characters, surrounding whitespace ignored).

    A parse rate alone cannot tell a function body from `return self`: this says how much code the
    model wrote where the reference has a body (a length, not a check of what the code does).

    Examples:
        >>> length_ratio(["return x", "pass"], [{"completion": "return x"}, {"completion": "return x+1"}])
        70.0
    """
    return statistics.median(
        100 * len(t.strip()) / max(len(r["completion"].strip()), 1) for t, r in zip(texts, rows, strict=True)
    )


def score_tasks(
    row: dict[str, Any],
    decode: Callable[[list[str], int], tuple[list[str], float, float]],
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    synthetic_tokens: int,
    code_tokens: int,
) -> dict[str, Any]:
    """Fill `row` with exact match on `synthetic` and, on `code`, the parse rate and the completions'
    median length as a percentage of the reference bodies' (`length_ratio`); each with TPF and tokens/s.

    `decode(prompts, max_new_tokens)` returns (completions, mean tokens per forward, tokens/s).
    """
    if synthetic:
        texts, tpf, tps = decode([r["prompt"] for r in synthetic], synthetic_tokens)
        row["accuracy"], row["tpf_synthetic"], row["tokens_per_s_synthetic"] = (
            exact_match(texts, synthetic),
            tpf,
            tps,
        )
    if code:
        texts, tpf, tps = decode([r["prompt"] for r in code], code_tokens)
        row["parse_rate"], row["tpf_code"], row["tokens_per_s_code"] = parse_rate(texts, code), tpf, tps
        row["code_length"] = length_ratio(texts, code)
    return row


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

    def decode(prompts: list[str], max_new_tokens: int) -> tuple[list[str], float, float]:
        return decode_prompts(model, tokenizer, prompts, setting.config(max_new_tokens, block_length), batch)

    return score_tasks(asdict(setting), decode, synthetic, code, synthetic_tokens, code_tokens)


@torch.no_grad()
def generate_autoregressive(
    model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, batch: int
) -> tuple[list[str], float]:
    """Greedy `model.generate` (transformers' own loop, KV cache) in left-padded batches.

    Returns:
        The completions up to EOS, and completion tokens per second (tokens up to and including EOS).
    """
    texts: list[str] = []
    tokens = 0
    start = time.perf_counter()
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    for i in range(0, len(prompts), batch):
        enc = tokenizer(prompts[i : i + batch], return_tensors="pt", padding=True, padding_side="left")
        out = model.generate(
            **enc.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
        )
        new = out[:, enc["input_ids"].shape[1] :]  # [B, ≤ max_new_tokens]
        # tokens written before (and including) each row's EOS; rows padded after finishing do not count
        _, lengths = cut_after_first_eos(new, torch.tensor([eos], device=new.device), pad=eos)
        tokens += int(lengths.sum())
        texts += tokenizer.batch_decode(new, skip_special_tokens=True)
    seconds = time.perf_counter() - start
    return texts, tokens / seconds if seconds > 0 else float("inf")


def evaluate_autoregressive(
    model: Any,
    tokenizer: Any,
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    *,
    batch: int = 32,
    synthetic_tokens: int = 16,
    code_tokens: int = 64,
) -> dict[str, Any]:
    """The scores of `evaluate_setting` for a causal LM decoded by plain greedy `model.generate`.

    The row has `threshold=None`, `editing="autoregressive"`, `multi_block_edit=False` and tokens per
    forward 1.0, so it sits in the same table and plot as the diffusion settings.

    Examples:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from dllm_edit.data import build_char_tokenizer
        >>> tok = build_char_tokenizer()
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)).eval()
        >>> rows = [{"prompt": "1+1=", "completion": "2"}]
        >>> row = evaluate_autoregressive(model, tok, rows, [], synthetic_tokens=4)
        >>> row["editing"], row["tpf_synthetic"], 0 <= row["accuracy"] <= 100
        ('autoregressive', 1.0, True)
    """
    row: dict[str, Any] = {"threshold": None, "editing": "autoregressive", "multi_block_edit": False}

    def decode(prompts: list[str], max_new_tokens: int) -> tuple[list[str], float, float]:
        texts, tps = generate_autoregressive(model, tokenizer, prompts, max_new_tokens, batch)
        return texts, 1.0, tps  # one forward per token

    return score_tasks(row, decode, synthetic, code, synthetic_tokens, code_tokens)


def tradeoff(
    models: dict[str, tuple[Any, Any]],
    synthetic: Sequence[dict[str, str]],
    code: Sequence[dict[str, str]],
    settings: Sequence[Setting],
    *,
    autoregressive: dict[str, tuple[Any, Any]] | None = None,
    progress: bool = True,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """`evaluate_setting` for every model and setting (a progress bar on long runs), then
    `evaluate_autoregressive` for each autoregressive baseline.

    Args:
        models: name → `(model, tokenizer)`.
        synthetic: held-out rows with exact answers (`prompt`, `completion`).
        code: held-out code rows (`prompt` = a `def` header).
        settings: the grid (`tradeoff_settings`).
        autoregressive: name → `(causal LM, tokenizer)` decoded with plain greedy `model.generate`.
        progress: show a tqdm progress bar.
        **kwargs: `block_length`, `batch`, `synthetic_tokens`, `code_tokens` of `evaluate_setting`.

    Returns:
        One dict per (model, setting), with a `model` key.
    """
    from tqdm.auto import tqdm

    autoregressive = autoregressive or {}
    _warm_up(models, autoregressive, synthetic or code, settings, kwargs)
    jobs: list[tuple[str, Setting | None]] = [(name, s) for name in models for s in settings]
    jobs += [(name, None) for name in autoregressive]
    rows = []
    for name, setting in tqdm(jobs, desc="trade-off", disable=not progress):
        if setting is None:
            model, tokenizer = autoregressive[name]
            ar_kwargs = {k: v for k, v in kwargs.items() if k != "block_length"}
            row = evaluate_autoregressive(model, tokenizer, synthetic, code, **ar_kwargs)
        else:
            model, tokenizer = models[name]
            row = evaluate_setting(model, tokenizer, setting, synthetic, code, **kwargs)
        rows.append({"model": name, **row})
    return rows


def _warm_up(
    models: dict[str, tuple[Any, Any]],
    autoregressive: dict[str, tuple[Any, Any]],
    rows: Sequence[dict[str, str]],
    settings: Sequence[Setting],
    kwargs: dict[str, Any],
) -> None:
    """Decode two prompts with every model once, untimed, so that one-time costs (first-call kernel
    selection, allocator growth) do not land in the tokens/s of whichever setting happens to run first."""
    prompts = [r["prompt"] for r in rows[:2]]
    if not prompts or not settings:
        return
    config = settings[0].config(4, kwargs.get("block_length", 32))
    for model, tokenizer in models.values():
        decode_prompts(model, tokenizer, prompts, config, batch=2)
    for model, tokenizer in autoregressive.values():
        generate_autoregressive(model, tokenizer, prompts, 4, batch=2)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A markdown table of `tradeoff` rows."""
    columns = ["model", "τ_mask", "editing", "MBE", "exact match (%)", "TPF", "tokens/s"]
    columns += ["parses (%)", "code length (% of ref.)", "TPF (code)", "tokens/s (code)"]
    lines = ["| " + " | ".join(columns) + " |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mbe = "on" if r["multi_block_edit"] else "off"
        threshold = "—" if r["threshold"] is None else r["threshold"]
        lines.append(
            f"| {r['model']} | {threshold} | {r['editing']} | {mbe} | "
            f"{r.get('accuracy', float('nan')):.1f} | {r.get('tpf_synthetic', float('nan')):.2f} | "
            f"{r.get('tokens_per_s_synthetic', float('nan')):.0f} | "
            f"{r.get('parse_rate', float('nan')):.1f} | {r.get('code_length', float('nan')):.0f} | "
            f"{r.get('tpf_code', float('nan')):.2f} | "
            f"{r.get('tokens_per_s_code', float('nan')):.0f} |"
        )
    return "\n".join(lines)


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend (the plots are written to files).

    Raises:
        ImportError: matplotlib is not installed (the `bench` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError('Plotting needs matplotlib: pip install "dllm-edit[bench]".') from err
    return plt


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Accuracy against tokens per forward, one line per (model, editing, MBE) over τ_mask.

    Raises:
        ImportError: matplotlib is not installed (the `bench` extra).
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    groups: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["editing"], r["multi_block_edit"]), []).append(r)
    # colour = editing, marker = model, dashed = multi-block editing: every line stays distinguishable
    colours = dict(zip(EDITING, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True))
    markers = "osD^vP"
    names = dict.fromkeys(r["model"] for r in rows)  # in order of appearance
    model_marker = {m: markers[i % len(markers)] for i, m in enumerate(names)}
    for (model, editing, mbe), group in groups.items():
        group = sorted(group, key=lambda r: r["threshold"] or 0.0)
        style: dict[str, Any]
        if editing == "autoregressive":  # one point at TPF 1
            style = {
                "label": f"{model} (autoregressive)",
                "marker": "*",
                "markersize": 13,
                "linestyle": "none",
                "color": "black",
            }
        else:
            label = f"{model}, edit {editing}{', MBE' if mbe else ''}"
            style = {
                "label": label,
                "marker": model_marker[model],
                "linestyle": "--" if mbe else "-",
                "color": colours.get(editing, "tab:gray"),
                "fillstyle": "none" if mbe else "full",
            }
        if "accuracy" in group[0]:
            axes[0].plot([r["tpf_synthetic"] for r in group], [r["accuracy"] for r in group], **style)
        if "parse_rate" in group[0]:
            axes[1].plot([r["tpf_code"] for r in group], [r["parse_rate"] for r in group], **style)
    axes[0].set(xlabel="tokens per forward", ylabel="exact match (%)", title="synthetic tasks (held out)")
    axes[1].set(
        xlabel="tokens per forward", ylabel="completions that parse (%)", title="code (held-out modules)"
    )
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
