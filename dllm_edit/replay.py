"""A decode you can look at afterwards: the trace file, its loader, and the replay page.

`trace_document` turns a traced decode (`generate(..., output_trace=True,
return_dict_in_generate=True)`) into a JSON-ready document, one row of the batch: the prompt, the
settings, the result (text, forwards, tokens per forward, edits) and every step — its forward, its
block, the completion positions it unmasked (`committed`), rewrote (`edited`) and put back to the
mask (`remasked`), each with its token, the token's text and the candidate's probability, and the
candidate probabilities of every position the step looked at. Positions a loop action filled at the
step (a finish filling the rest of the row, `eos_fill`), inside the span or after it, are
`committed` entries too, with `"filled": true` and no probability. `save_trace` / `load_trace` write
and read it (`load_trace` checks it and names what is wrong); `render_html` makes a self-contained
page (inline script and style, nothing fetched) that replays the decode step by step;
`replay_to_streamer` plays it into a streamer such as `TerminalEditStreamer`.

`dllm-edit generate PROMPT --trace t.json --trace-html t.html` writes both; `dllm-edit replay
t.json` replays the file on the terminal, `--html OUT` writes the page.

Positions are completion positions: 0 is the first generated token.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import torch

#: The `schema` field of every trace file.
SCHEMA = "dllm_edit.trace"
#: The trace format this version writes and reads (files of a newer version are refused).
SCHEMA_VERSION = 1
#: The settings recorded from the decoding config (non-JSON values as their `str`).
SETTINGS = (
    "threshold",
    "editing_threshold",
    "block_length",
    "block_start",
    "max_new_tokens",
    "max_post_steps",
    "steps",
    "multi_block_edit",
    "temperature",
)


def _prob(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _mask_id(trace: list[Any], row: int) -> int | None:
    """The mask token, read off the canvas: the token at a masked position at the top of a step."""
    for record in trace:
        masked = record.masked[row]  # [S]
        if bool(masked.any()):
            return int(record.before[row][masked][0])
    return None


def trace_document(
    output: Any,
    tokenizer: Any,
    input_ids: torch.Tensor,
    *,
    row: int = 0,
    prompt: str | None = None,
    config: Any = None,
    mode: str | None = None,
    attention_mask: torch.Tensor | None = None,
) -> dict[str, Any]:
    """The trace of one row of a traced decode, as a JSON-ready document (see the module docstring).

    Args:
        output: the `EditGenerationOutput` of `generate(..., output_trace=True,
            return_dict_in_generate=True)`.
        tokenizer: the tokenizer the prompt was encoded with (`decode`, `all_special_ids`).
        input_ids: LongTensor `[B, W]`, the (left-padded) prompt ids passed to `generate`.
        row: which row of the batch.
        prompt: the prompt text shown (default: `input_ids` decoded).
        config: the `EditGenerationConfig` decoded with; its main fields are recorded.
        mode: the preset's name, recorded with the settings.
        attention_mask: `[B, W]` when the batch was left-padded (the padding is not the prompt).

    Raises:
        ValueError: an output without a trace, sequences or counters, or a `row` out of range.

    Examples:
        >>> import torch, dllm_edit
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
        >>> class Tok:
        ...     all_special_ids = [0]
        ...     def decode(self, ids, skip_special_tokens=False):
        ...         return "".join(chr(96 + i) for i in ids if i or not skip_special_tokens)
        >>> ids = torch.tensor([[3, 4]])
        >>> cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=4, block_length=2,
        ...     mask_token_id=0, eos_token_id=None, output_trace=True)
        >>> out = dllm_edit.generate(model, ids, generation_config=cfg, return_dict_in_generate=True)
        >>> doc = trace_document(out, Tok(), ids, config=cfg, mode="speedy")
        >>> doc["schema"], doc["version"], doc["prompt"], len(doc["steps"]) == int(out.num_forwards[0])
        ('dllm_edit.trace', 1, 'cd', True)
        >>> sum(len(s["committed"]) for s in doc["steps"]) >= 4  # every position was unmasked
        True
    """
    _check_traced(output, row, input_ids.shape[0])
    width = input_ids.shape[1]
    ids = input_ids[row]  # [W]
    if attention_mask is not None:
        ids = ids[attention_mask[row].bool()]  # [P] the padding is not the prompt
    prompt_ids = ids.tolist()
    completion = output.completions(width)[row]
    generated = output.sequences.shape[1] - width
    special = sorted(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ()))
    seen: set[int] = set(prompt_ids) | set(completion)
    mask_id = _mask_id(output.trace, row)
    steps: list[dict[str, Any]] = []
    starts = getattr(output, "completion_start", None)  # [B] canvas slot of each completion
    start = int(starts[row]) if starts is not None else width
    for record in output.trace:
        if bool(record.active[row]):  # a step of this row: one of its forwards
            steps.append(_step(record, row, start, generated, mask_id, len(steps) + 1, seen))
    length = len(completion)
    in_text = sum(e["position"] < length for s in steps for e in s["edited"])
    settings = {"mode": mode}
    if config is not None:
        settings.update({name: _plain(getattr(config, name, None)) for name in SETTINGS})
    settings["max_new_tokens"] = generated
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "prompt": prompt if prompt is not None else tokenizer.decode(prompt_ids, skip_special_tokens=True),
        "prompt_ids": prompt_ids,
        "special_ids": special,
        "mask_token_id": mask_id,
        "tokens": {str(t): tokenizer.decode([t]) for t in sorted(seen)},
        "settings": settings,
        "result": {
            "text": tokenizer.decode(completion, skip_special_tokens=True),
            "ids": completion,
            "num_forwards": int(output.num_forwards[row]),
            "tokens_per_forward": round(float(output.tokens_per_forward[row]), 4),
            "num_edits": int(output.num_edits[row]) if output.num_edits is not None else in_text,
            "edits_in_text": in_text,
        },
        "steps": steps,
    }


def _check_traced(output: Any, row: int, batch: int) -> None:
    """Refuse an output without a trace, counters or sequences, or a row outside the batch."""
    if output.trace is None:
        raise ValueError("This output has no trace: decode with output_trace=True.")
    if output.sequences is None or output.num_forwards is None or output.tokens_per_forward is None:
        raise ValueError(
            "This output has no sequences / num_forwards / tokens_per_forward: decode with "
            "return_dict_in_generate=True."
        )
    if not 0 <= row < batch:
        raise ValueError(f"row must be in [0, {batch}) for a batch of {batch}, got {row}.")


def _filled_in_row(record: Any, row: int) -> bool:
    """Whether a loop action (a finish, `eos_fill`) wrote a slot of `row` at this step."""
    filled = getattr(record, "filled", None)
    return filled is not None and bool(filled[row].any())


def _step(
    record: Any, row: int, start: int, generated: int, mask_id: int | None, forward: int, seen: set[int]
) -> dict[str, Any]:
    """One step of the document: what the rules committed, edited and remasked in the span, and what
    the loop actions filled (in the span or after it; `"filled": true` on those entries). `start`:
    the canvas slot of the row's first completion token."""
    first = record.span_start - start  # completion position of the span's first slot
    before, after = record.before[row].tolist(), record.after[row].tolist()  # [S]
    probs = record.probs[row].tolist()  # [S]
    commit, edit = record.commit[row].tolist(), record.edit[row].tolist()  # [S]
    step: dict[str, Any] = {
        "forward": forward,
        "block": record.block,
        "span": [max(first, 0), min(first + len(after), generated)],
        "committed": [],
        "edited": [],
        "remasked": [],
    }
    lo = max(0, -first)  # the prompt tail shares the first block
    hi = min(len(after), generated - first)
    for slot in range(lo, hi):
        position = first + slot
        if commit[slot]:
            step["committed"].append({"position": position, "token": after[slot], "prob": _prob(probs[slot])})
            seen.add(after[slot])
        elif edit[slot]:
            change = {"position": position, "from": before[slot], "prob": _prob(probs[slot])}
            seen.add(before[slot])
            if after[slot] == mask_id:
                step["remasked"].append(change)
            else:
                step["edited"].append({**change, "to": after[slot]})
                seen.add(after[slot])
    if _filled_in_row(record, row):
        slots = record.filled[row].nonzero().flatten().tolist()  # canvas slots the actions wrote
        for slot in slots:
            position, token = slot - start, int(record.filled_tokens[row, slot])
            if 0 <= position < generated:
                step["committed"].append({"position": position, "token": token, "prob": None, "filled": True})
                seen.add(token)
    step["probs"] = [_prob(p) for p in probs[lo:hi]]
    return step


def save_trace(document: dict[str, Any], path: str | Path) -> Path:
    """Write a trace document (`trace_document`) as JSON to `path`; returns the path."""
    check_trace(document)
    path = Path(path)
    path.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read and check a trace file written by `save_trace` (`dllm-edit generate --trace`).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: a file that is not JSON, not a dllm_edit trace, of a newer format version, or
            with a field missing or of the wrong kind (the message names the field).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No trace file at {str(path)!r} (write one with dllm-edit generate PROMPT --trace FILE)."
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not a dllm_edit trace: not UTF-8 text ({err.reason}).") from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} is not a dllm_edit trace: not valid JSON ({err.msg} at line {err.lineno}, "
            f"column {err.colno})."
        ) from None
    check_trace(document, source=str(path))
    return document


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str, value: Any) -> None:
        shown = json.dumps(value)[:60] if not isinstance(value, _MISSING) else "nothing"
        raise ValueError(
            f"{self.source} is not a valid dllm_edit trace: {where} must be {expected}, got {shown}."
        )

    def field(self, obj: dict[str, Any], key: str, where: str, kind: Any, expected: str) -> Any:
        value = obj.get(key, _MISSING())
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int, float)))
        if not ok:
            self.fail(f"{where}{key}", expected, value)
        return value


class _MISSING:
    pass


def check_trace(document: Any, source: str = "the trace") -> None:
    """Check a trace document's format; raise `ValueError` naming the first field that is wrong.

    Examples:
        >>> check_trace({"schema": "dllm_edit.trace", "version": 99})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the trace was written by a newer dllm_edit (trace format 99; ...): upgrade dllm_edit ...
        >>> check_trace({"schema": "dllm_edit.trace", "version": 1, "prompt": 3})
        Traceback (most recent call last):
        ...
        ValueError: the trace is not a valid dllm_edit trace: prompt must be a string, got 3.
    """
    c = _Checker(source)
    if not isinstance(document, dict):
        c.fail("the file", "a JSON object", document)
    if document.get("schema") != SCHEMA:
        c.fail("schema", f'"{SCHEMA}"', document.get("schema", _MISSING()))
    version = c.field(document, "version", "", int, "an integer")
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{source} was written by a newer dllm_edit (trace format {version}; this one reads up to "
            f"{SCHEMA_VERSION}): upgrade dllm_edit to read it."
        )
    if version < 1:
        c.fail("version", f"an integer in [1, {SCHEMA_VERSION}]", version)
    c.field(document, "prompt", "", str, "a string")
    ids = c.field(document, "prompt_ids", "", list, "a list of token ids")
    tokens = c.field(document, "tokens", "", dict, "an object of token id -> text")
    for key, text in tokens.items():
        if not key.lstrip("-").isdigit() or not isinstance(text, str):
            c.fail(f"tokens[{key!r}]", "the text of a token id", text)
    known = {int(k) for k in tokens}

    def token(obj: dict[str, Any], key: str, where: str) -> None:
        value = c.field(obj, key, where, int, "a token id")
        if value not in known:
            c.fail(f"{where}{key}", "a token id listed in tokens", value)

    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or t not in known:
            c.fail(f"prompt_ids[{i}]", "a token id listed in tokens", t)
    c.field(document, "special_ids", "", list, "a list of token ids")
    settings = c.field(document, "settings", "", dict, "an object")
    generated = c.field(settings, "max_new_tokens", "settings.", int, "an integer >= 1")
    if generated < 1:
        c.fail("settings.max_new_tokens", "an integer >= 1", generated)
    result = c.field(document, "result", "", dict, "an object")
    c.field(result, "text", "result.", str, "a string")
    for i, t in enumerate(c.field(result, "ids", "result.", list, "a list of token ids")):
        if isinstance(t, bool) or not isinstance(t, int) or t not in known:
            c.fail(f"result.ids[{i}]", "a token id listed in tokens", t)
    forwards = c.field(result, "num_forwards", "result.", int, "an integer")
    c.field(result, "tokens_per_forward", "result.", (int, float), "a number")
    c.field(result, "num_edits", "result.", int, "an integer")
    c.field(result, "edits_in_text", "result.", int, "an integer")
    steps = c.field(document, "steps", "", list, "a list of steps")
    if len(steps) != forwards:
        c.fail("steps", f"one step per forward (result.num_forwards = {forwards})", f"{len(steps)} steps")
    for n, step in enumerate(steps):
        where = f"steps[{n}]."
        if not isinstance(step, dict):
            c.fail(f"steps[{n}]", "an object", step)
        c.field(step, "forward", where, int, "an integer")
        c.field(step, "block", where, int, "an integer")
        span = c.field(step, "span", where, list, "[first, end) completion positions")
        if len(span) != 2 or not all(isinstance(x, int) and 0 <= x <= generated for x in span):
            c.fail(f"{where}span", f"two completion positions in [0, {generated}]", span)
        probs = c.field(step, "probs", where, list, "a list of probabilities")
        if not all(p is None or (isinstance(p, (int, float)) and not isinstance(p, bool)) for p in probs):
            c.fail(f"{where}probs", "a list of probabilities", probs)
        for kind, keys in (("committed", ("token",)), ("edited", ("from", "to")), ("remasked", ("from",))):
            for j, change in enumerate(c.field(step, kind, where, list, "a list of changes")):
                at = f"{where}{kind}[{j}]."
                if not isinstance(change, dict):
                    c.fail(at[:-1], "an object", change)
                position = c.field(change, "position", at, int, "a completion position")
                if not 0 <= position < generated:
                    c.fail(f"{at}position", f"a completion position in [0, {generated})", position)
                for key in keys:
                    token(change, key, at)


class TraceTokenizer:
    """Decodes token ids with a trace's own token table (for replaying without the tokenizer).

    Examples:
        >>> tok = TraceTokenizer({"tokens": {"1": "<|eos|>", "7": "a"}, "special_ids": [1]})
        >>> tok.decode([7, 7, 1]), tok.decode([7, 1], skip_special_tokens=True)
        ('aa<|eos|>', 'a')
    """

    def __init__(self, document: dict[str, Any]) -> None:
        self.table = {int(k): v for k, v in document["tokens"].items()}
        self.all_special_ids = list(document.get("special_ids", []))

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return "".join(self.table.get(int(i), "\ufffd") for i in ids if int(i) not in special)


def replay_to_streamer(document: dict[str, Any], streamer: Any) -> None:
    """Play a trace into a streamer as the decoding loop would: the prompt, a draft after every
    step (masked and edited flags), final text when a block ends, then `end()`.

    Examples:
        >>> import io
        >>> from dllm_edit.terminal_streamer import TerminalEditStreamer
        >>> doc = {"tokens": {"1": "<|eos|>", "2": "<|mask|>", "5": "x", "6": "y"}, "special_ids": [1, 2],
        ...     "mask_token_id": 2, "prompt_ids": [5], "settings": {"max_new_tokens": 2},
        ...     "steps": [{"block": 0, "span": [0, 2], "committed": [{"position": 0, "token": 6}],
        ...                "edited": [], "remasked": []},
        ...               {"block": 0, "span": [0, 2], "committed": [{"position": 1, "token": 1}],
        ...                "edited": [{"position": 0, "from": 6, "to": 5}], "remasked": []}]}
        >>> out = io.StringIO()
        >>> replay_to_streamer(doc, TerminalEditStreamer(TraceTokenizer(doc), stream=out, display="append",
        ...     color=False))
        >>> print(out.getvalue().splitlines()[0])
        xx
    """
    mask = document.get("mask_token_id")
    mask = -1 if mask is None else int(mask)
    special = set(document.get("special_ids", []))
    generated = int(document["settings"]["max_new_tokens"])
    state: list[int | None] = [None] * generated  # completion position -> token (None: a mask)
    steps = document["steps"]
    done = 0  # completion tokens given to the streamer as final
    stopped = False

    def confirm(upto: int) -> None:
        nonlocal done, stopped
        if stopped or upto <= done:
            return
        chunk = [t if t is not None else mask for t in state[done:upto]]
        ends = [i for i, t in enumerate(chunk) if t in special and t != mask]
        if ends:
            chunk, stopped = chunk[: ends[0] + 1], True
        done = upto
        if chunk:
            streamer.put(torch.tensor(chunk))

    streamer.put(torch.tensor([document["prompt_ids"]]))
    try:
        for n, step in enumerate(steps):
            edited_at = set()
            for change in step["committed"]:
                state[change["position"]] = change["token"]
            for change in step["edited"]:
                state[change["position"]] = change["to"]
                edited_at.add(change["position"])
            for change in step["remasked"]:
                state[change["position"]] = None
                edited_at.add(change["position"])
            end = step["span"][1]
            if not stopped and end > done:
                draft = state[done:end]
                streamer.put_draft(
                    torch.tensor([mask if t is None else t for t in draft]),
                    masked=torch.tensor([t is None for t in draft]),
                    edited=torch.tensor([done + i in edited_at for i in range(len(draft))]),
                )
            following = steps[n + 1] if n + 1 < len(steps) else None
            if following is not None and following["block"] != step["block"]:
                confirm(following["span"][0])  # what the next step's span leaves behind is final
        confirm(generated)
    finally:
        streamer.end()


def render_html(document: dict[str, Any]) -> str:
    """A self-contained HTML page (inline script and style; nothing fetched) replaying the trace:
    play / pause, a step slider, edits highlighted, forwards and tokens per forward. Open it with
    `#step=N` (or `#step=last`) to show step N first.

    Examples:
        >>> page = render_html({"schema": "dllm_edit.trace", "version": 1, "prompt": "</script>"})
        >>> escaped = "<" + chr(92) + "/script>"  # the prompt cannot end the page's script
        >>> page.startswith("<!DOCTYPE html>") and escaped in page and "http" not in page.lower()
        True
    """
    template = resources.files("dllm_edit").joinpath("replay_page.html").read_text(encoding="utf-8")
    data = json.dumps(document, ensure_ascii=False)
    # inside <script>: no "</" may close it early; U+2028 / U+2029 are line ends to old JS parsers
    data = data.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return template.replace("/*__TRACE__*/null", data, 1)


def write_html(document: dict[str, Any], path: str | Path) -> Path:
    """Write `render_html(document)` to `path`; returns the path."""
    path = Path(path)
    path.write_text(render_html(document), encoding="utf-8")
    return path
