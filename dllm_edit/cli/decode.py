"""`dllm-edit generate` and `dllm-edit compare`: decode a prompt with the editable decoder.

    dllm-edit generate "sort:8718982948=" [--model PATH_OR_ID] [--mode speedy|quality|llada] [--json]
    dllm-edit compare  "sort:8718982948=" [--model PATH_OR_ID]

Without `--model`, the model shipped in the package decodes (`dllm_edit.load_default()`).

`generate` prints the completion — on a terminal it shows the block being drafted and edited live
(edited tokens in red, freshly unmasked ones in yellow) — then every edit (the forward, the
completion position, the token before and after), then a line with forwards, tokens per forward,
edits and tokens/s; `--json` prints one JSON object instead (the last line of output, with the
edits under `"edits"`). `--step-delay SECONDS` paces the live canvas (a demo); `--trace FILE.json`
writes every step of the decode and `--trace-html FILE.html` a page replaying it
(`dllm-edit replay FILE.json` replays a trace later; `dllm_edit.replay`).
`compare` decodes the prompt with the S preset, the Q preset and M2T only (the S preset with editing
off) and prints them side by side with their numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from .decode_args import (
    DEFAULT_MAX_NEW_TOKENS,
    MODES,
    add_decoding_arguments,
    build_compare_parser,
    build_generate_parser,
    check_decoding_args,
    flag_fields,
    generate_config,
    is_template,
    parse_generate,
    parse_unmasking,
    preset_config,
)

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "MODES",
    "Session",
    "add_decoding_arguments",
    "build_compare_parser",
    "build_generate_parser",
    "check_decoding_args",
    "describe_edits",
    "flag_fields",
    "generate_config",
    "is_template",
    "parse_generate",
    "parse_unmasking",
    "preset_config",
    "run_compare",
    "run_generate",
    "same_text_notes",
    "summary",
    "write_traces",
]


class Session:
    """A loaded model and tokenizer, and the encoded prompt."""

    def __init__(self, args: argparse.Namespace) -> None:
        from dllm_edit.shipped import load_default

        from .checks import check_device, check_dtype
        from .loading import load_model_and_tokenizer

        check_decoding_args(args)
        dtype = check_dtype(args.dtype)
        self.device = check_device(args.device)  # before loading: a missing device fails at once
        if args.model is None:
            if args.remote_code:
                raise ValueError(
                    "--remote-code loads a checkpoint with its own code: it needs --model (the shipped "
                    "model has no code of its own)."
                )
            self.model, self.tokenizer = load_default()
            if dtype is not None:
                self.model = self.model.to(getattr(torch, dtype))
        else:
            try:
                self.model, self.tokenizer = load_model_and_tokenizer(
                    args.model,
                    trust_remote_code=args.trust_remote_code or args.remote_code,
                    dtype=dtype,
                    native=not args.remote_code,
                )
            except (FileNotFoundError, ValueError) as err:
                raise type(err)(f"--model: {err}") from err
        self.model = self.model.to(self.device).eval()
        self.args = args
        self.input_ids = self.encode(args.prompt)

    def encode(self, prompt: str) -> torch.Tensor:
        """The ids `[1, P]` of `prompt` on the model's device, in the chat template with `--chat`.

        Raises:
            ValueError: `--chat` with a tokenizer that has no chat template, or a prompt that with
                `--max-new-tokens` exceeds the model's positions.
        """
        args = self.args
        text = prompt
        if args.chat:
            if getattr(self.tokenizer, "chat_template", None) is None:
                raise ValueError("--chat needs a tokenizer with a chat template; this one has none.")
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        self.template = getattr(args, "infill", False) or is_template(text)
        if self.template:  # `<mask:N>` tags: N masks each (a template without one is refused)
            from dllm_edit.infill import parse_template
            from dllm_edit.special_tokens import resolve_special_tokens

            mask_id = resolve_special_tokens(self.model, None, self.tokenizer).mask
            text = text.replace("\\n", "\n").replace("\\t", "\t")  # as typed in a shell
            ids = parse_template(text, self.tokenizer, mask_id)
            input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # [1, P]
        else:
            # a chat template writes its own special tokens (BOS and role markers): none are added again
            encoded = self.tokenizer(text, return_tensors="pt", add_special_tokens=not args.chat)
            input_ids = encoded["input_ids"].to(self.device)  # [1, P]
        if input_ids.shape[1] == 0:
            raise ValueError(f"the prompt {prompt!r} encodes to no tokens; give some text to continue.")
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and input_ids.shape[1] + args.max_new_tokens > limit:
            raise ValueError(
                f"The prompt is {input_ids.shape[1]} tokens; with --max-new-tokens "
                f"{args.max_new_tokens} it exceeds the model's {limit} positions. Shorten the prompt "
                "or lower --max-new-tokens."
            )
        return input_ids

    def config(self, mode: str, **overrides: Any) -> Any:
        """The `mode` preset with the flags and `overrides`, as it decodes on this model."""
        config = preset_config(self.args, mode, **overrides)
        return self.llada_on_adapter(config) if mode == "llada" else config

    def llada_on_adapter(self, config: Any) -> Any:
        """`--mode llada` on a model whose adapter has blocks at absolute positions only (block-causal
        models, the shipped one): LLaDA-1's rule (fixed steps per block, the block's masks spread over
        them, most confident first) on those blocks. Bidirectional models keep LLaDA-1's blocks from
        the end of the prompt. A note on stderr says which."""
        from dllm_edit.adapters import resolve_adapter
        from dllm_edit.modes import fit_mode_to_adapter

        config, note = fit_mode_to_adapter(config, resolve_adapter(self.model, None))  # as from_mode(model=)
        if note:
            print(f"note: --mode llada: {note}", file=sys.stderr)
        return config

    def run(self, config: Any, streamer: Any = None) -> dict[str, Any]:
        """Decode once; the completion text and its numbers."""
        import dllm_edit

        start = time.perf_counter()
        out = dllm_edit.generate(
            self.model,
            self.input_ids,
            generation_config=config,
            tokenizer=self.tokenizer,
            streamer=streamer,
            generator=torch.Generator(device=self.input_ids.device).manual_seed(self.args.seed),
            return_dict_in_generate=True,
            output_trace=True,
        )
        seconds = time.perf_counter() - start - float(getattr(streamer, "slept", 0.0))  # not --step-delay
        self.last_output = out
        if not isinstance(out, dllm_edit.EditGenerationOutput) or out.sequences is None:
            raise TypeError(f"generate returned {type(out).__name__} without sequences")
        if out.num_forwards is None or out.tokens_per_forward is None:
            raise TypeError("generate returned an output without num_forwards / tokens_per_forward")
        completion = out.completions(self.input_ids.shape[1])[0]  # up to and including the first EOS
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        filled = None
        if getattr(self, "template", False):  # the template with its masks filled
            filled = self.tokenizer.decode(
                out.sequences[0, : self.input_ids.shape[1]], skip_special_tokens=True
            )
        forwards = int(out.num_forwards[0])
        tokens = len(completion)
        edits = self.edits(out, tokens)
        return {
            "text": text,
            **({"filled": filled} if filled is not None else {}),
            "tokens": tokens,
            "num_forwards": forwards,
            "tokens_per_forward": float(out.tokens_per_forward[0]),
            "num_edits": len(edits),  # inside the returned completion (up to its first EOS)
            "num_edits_total": int(out.num_edits[0]) if out.num_edits is not None else len(edits),
            "edits": edits,
            "seconds": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else float("inf"),
        }

    def edits(self, out: Any, length: int) -> list[dict[str, Any]]:
        """Every rewrite of a written completion token, in decoding order: the forward it happened in
        (1-based), the completion position, and the token before and after (read from the trace after
        decoding, on the host)."""
        width = self.input_ids.shape[1]
        found = []
        for forward, step in enumerate(out.trace or [], start=1):
            for slot in step.edit[0].nonzero().flatten().tolist():
                position = step.span_start + slot - width
                if not 0 <= position < length:
                    continue
                old, new = int(step.before[0, slot]), int(step.after[0, slot])
                found.append(
                    {
                        "forward": forward,
                        "position": position,
                        "from": self.tokenizer.decode([old]),
                        "to": self.tokenizer.decode([new]),
                    }
                )
        return found


def describe_edits(edits: list[dict[str, Any]]) -> str:
    """One line per edit, e.g. `forward 3: token 2 '5' -> '4'`."""
    return "\n".join(
        f"  forward {e['forward']}: token {e['position']} {e['from']!r} -> {e['to']!r}" for e in edits
    )


def summary(result: dict[str, Any]) -> str:
    """One line: forwards, tokens per forward, edits in the returned text, tokens per second.

    Edits count rewrites of the returned completion only (up to its first EOS); rewrites of
    positions after the EOS, which the text does not show, are named apart.
    """
    after = result.get("num_edits_total", result["num_edits"]) - result["num_edits"]
    hidden = f" (+{after} after the end of text, not counted)" if after > 0 else ""
    return (
        f"{result['num_forwards']} forwards, {result['tokens_per_forward']:.2f} tokens/forward, "
        f"{result['num_edits']} edit{'s' * (result['num_edits'] != 1)} in the text{hidden}, "
        f"{result['tokens_per_second']:.1f} tokens/s"
    )


def run_generate(argv: Sequence[str], infill: bool = False) -> int:
    """`dllm-edit generate`, or with `infill=True` `dllm-edit infill` (a template, by default
    `--max-new-tokens 0`)."""
    from .checks import check_writable_file
    from .replay import check_step_delay

    args = parse_generate(argv, prog="dllm-edit infill" if infill else "dllm-edit generate")
    args.infill = infill
    check_step_delay(args.step_delay)
    if args.step_delay > 0 and (args.json or args.no_live):
        off = "--json" if args.json else "--no-live"
        raise ValueError(f"--step-delay paces the live canvas, which {off} turns off; drop one of the two.")
    for option, path in (("--trace", args.trace), ("--trace-html", args.trace_html)):
        if path is not None:
            check_writable_file(path, option)
    check_decoding_args(args)
    config = generate_config(args)  # every setting checked before the model loads
    session = Session(args)
    if args.mode == "llada":
        config = session.llada_on_adapter(config)
    if args.save_config is not None:
        from .config_file import save_config_file

        save_config_file(config, args.save_config)
    # the live canvas draws completions: a template's filled masks are printed at the end
    live = not args.json and not args.no_live and sys.stdout.isatty() and not session.template
    streamer = None
    if live:
        from dllm_edit.terminal_streamer import TerminalEditStreamer

        streamer = TerminalEditStreamer(
            session.tokenizer, skip_prompt=True, prefix=args.prompt, step_delay=args.step_delay
        )
    result = session.run(config, streamer)
    result["mode"] = args.mode
    if args.trace is not None or args.trace_html is not None:
        write_traces(session, config, args)
    if args.json:
        print(json.dumps(result))
        return 0
    if not live:
        print(result.get("filled", args.prompt) + result["text"])
    if result["edits"] and not live:  # the live canvas's last line already lists them
        print("edits (T2T rewrites of tokens the model had written):")
        print(describe_edits(result["edits"]))
    label = args.mode if args.unmasking is None else f"{args.mode}, unmasking {args.unmasking}"
    print(f"[{label}] {summary(result)}")
    return 0


def write_traces(session: Session, config: Any, args: argparse.Namespace) -> None:
    """`--trace` / `--trace-html`: the last decode's trace as JSON and as a replay page."""
    from dllm_edit.replay import save_trace, trace_document, write_html

    document = trace_document(
        session.last_output,
        session.tokenizer,
        session.input_ids,
        prompt=args.prompt,
        config=config,
        mode=args.mode,
    )
    if args.trace is not None:
        save_trace(document, args.trace)
    if args.trace_html is not None:
        write_html(document, args.trace_html)


def same_text_notes(rows: dict[str, dict[str, Any]]) -> list[str]:
    """For each group of settings that decode to the same text, one line saying so and how their
    forwards differ; marks each row's `same_text_as` (the first setting with its text, or None)."""
    groups: dict[str, list[str]] = {}
    for name, row in rows.items():
        groups.setdefault(row["text"], []).append(name)
        row["same_text_as"] = groups[row["text"]][0] if len(groups[row["text"]]) > 1 else None
    notes = []
    for names in groups.values():
        if len(names) < 2:
            continue
        forwards = [rows[n]["num_forwards"] for n in names]
        if len(set(forwards)) == 1:
            cost = f"in the same {forwards[0]} forwards"
        else:
            fewest = names[forwards.index(min(forwards))]
            cost = "in " + ", ".join(f"{f} ({n})" for n, f in zip(names, forwards, strict=True))
            cost += f" forwards: {fewest} needs {max(forwards) - min(forwards)} fewer"
        notes.append(f"same text from {' and '.join(names)}, {cost}")
    return notes


def run_compare(argv: Sequence[str]) -> int:
    args = build_compare_parser().parse_args(list(argv))
    check_decoding_args(args)
    preset_config(args, "speedy")  # the flags checked before the model loads
    session = Session(args)
    rows = {
        "S (speedy)": session.run(session.config("speedy")),
        "Q (quality)": session.run(session.config("quality")),
        "M2T only": session.run(session.config("speedy", editing_threshold=None)),
    }
    notes = same_text_notes(rows)
    if args.json:
        print(json.dumps(rows))
        return 0
    for name, r in rows.items():
        print(f"--- {name}: {summary(r)}")
        print(args.prompt + r["text"])
    for note in notes:
        print(f"note: {note}")
    return 0
