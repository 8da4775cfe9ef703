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

from dllm_edit.config import MODES as _PRESETS

from .parsing import Parser, add_debug_argument

MODES = tuple(_PRESETS)  # every preset decodes from the command line; see `llada_on`
DEFAULT_MAX_NEW_TOKENS = 128


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `generate` and `compare` share."""
    parser.add_argument(
        "prompt",
        help="the prompt text (use quotes); <mask:N> marks a gap of N tokens to fill in (a template, "
        "where \\n and \\t are a newline and a tab)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a local model folder or a Hub id (default: the model shipped in the package)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run a checkpoint's own modelling code where dllm_edit has no native class for its family; "
        "only for sources you trust",
    )
    parser.add_argument(
        "--remote-code",
        action="store_true",
        help="load LLaDA / LLaDA-MoE / Dream / LLaDA2.x checkpoints with their own code instead of "
        "dllm_edit's native classes (implies --trust-remote-code)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens to generate (default {DEFAULT_MAX_NEW_TOKENS}, or the --config file's)",
    )
    parser.add_argument(
        "--block-length", type=int, default=None, help="tokens per block (default: the preset's, 32)"
    )
    parser.add_argument(
        "--multi-block-edit", action="store_true", help="let edits revisit the previous block"
    )
    parser.add_argument("--temperature", type=float, default=None, help="0 = greedy (default); > 0 samples")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling generator (default 0)")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:N, mps (default: cuda when available, else cpu)"
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="model dtype: auto, float32, bfloat16, float16 (default: the checkpoint's)",
    )
    parser.add_argument(
        "--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template"
    )
    add_debug_argument(parser)


def build_generate_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit generate", description="Decode a prompt with the editable decoder (M2T + T2T)."
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--mode",
        default=None,
        choices=MODES,
        help="decoding preset: speedy (S, default), quality (Q) or llada (LLaDA-1's fixed-steps rule, "
        "no editing; see docs/concepts/canvas.md)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="every decoding setting from a YAML file (an EditGenerationConfig: thresholds, schedules, "
        "strategies, unmasking); instead of --mode, the other options override it",
    )
    parser.add_argument(
        "--save-config",
        default=None,
        metavar="FILE.yaml",
        help="write the exact decoding settings used as YAML (for --config)",
    )
    parser.add_argument("--threshold", type=float, default=None, help="τ_mask, overrides the preset's")
    parser.add_argument(
        "--unmasking",
        default=None,
        metavar="NAME[:KEY=VALUE,...]",
        help="the M2T rule by its registered name, instead of the preset's threshold, e.g. eb_sampler, "
        "fast_dllm_factor:factor=2, dream:alg=entropy,steps=8 (docs/concepts/algorithms.md)",
    )
    parser.add_argument(
        "--editing-threshold",
        type=float,
        default=None,
        help="τ_edit, overrides the preset's (negative: editing off)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    parser.add_argument("--no-live", action="store_true", help="do not draw the live canvas on a terminal")
    parser.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds to wait after drawing each step of the live canvas, to follow it (default 0)",
    )
    parser.add_argument(
        "--trace", default=None, metavar="FILE.json", help="write every step of the decode to a JSON file"
    )
    parser.add_argument(
        "--trace-html",
        default=None,
        metavar="FILE.html",
        help="write a self-contained HTML page that replays the decode step by step",
    )
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="dllm-edit compare",
        description="Decode a prompt with S, Q and M2T-only, side by side.",
        unknown_hints={
            option: f"compare always decodes with S, Q and M2T-only; {option} is an option of "
            "dllm-edit generate."
            for option in ("--mode", "--config", "--threshold", "--editing-threshold")
        },
    )
    add_decoding_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    return parser


def check_decoding_args(args: argparse.Namespace) -> None:
    """The shared options' values, checked before any model is loaded."""
    args.max_new_tokens_given = getattr(args, "max_new_tokens_given", args.max_new_tokens is not None)
    infilling = getattr(args, "infill", False) or is_template(args.prompt or "")
    if args.max_new_tokens is None:
        args.max_new_tokens = 0 if getattr(args, "infill", False) else DEFAULT_MAX_NEW_TOKENS
    if infilling:  # the template's tags, checked before the model loads
        from dllm_edit.infill import parse_template

        parse_template(args.prompt or "", lambda text, add_special_tokens=False: {"input_ids": []}, 0)
    if args.max_new_tokens < (0 if infilling else 1):
        floor = "0 (a template's masks only)" if infilling else "1"
        raise ValueError(f"--max-new-tokens must be >= {floor}, got {args.max_new_tokens}.")
    if args.block_length is not None and args.block_length < 1:
        raise ValueError(f"--block-length must be >= 1, got {args.block_length}.")
    if args.temperature is not None and not args.temperature >= 0:
        raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}.")
    if not args.prompt:
        raise ValueError('the prompt is empty; give the text to continue, e.g. "sort:3141=".')


def is_template(prompt: str) -> bool:
    """Whether `prompt` holds a `<mask...>` tag: an infilling template (`<mask:N>` = N masks)."""
    return "<mask" in prompt


def flag_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields the shared flags set (only those given on the command line)."""
    fields: dict[str, Any] = {}
    if args.max_new_tokens_given:
        fields["max_new_tokens"] = args.max_new_tokens
    if args.temperature is not None:
        fields["temperature"] = args.temperature
    if args.block_length is not None:
        fields["block_length"] = args.block_length
    if args.multi_block_edit:
        fields["multi_block_edit"] = True
    return fields


def preset_config(args: argparse.Namespace, mode: str, **overrides: Any) -> Any:
    """The `mode` preset with the flags and `overrides` (validated; no model needed)."""
    from dllm_edit.config import EditGenerationConfig

    fields = {"max_new_tokens": args.max_new_tokens, **flag_fields(args), **overrides}
    return EditGenerationConfig.from_mode(mode, **fields)


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


def parse_unmasking(spec: str) -> str | dict[str, Any]:
    """`--unmasking NAME[:KEY=VALUE,...]` as the config's `unmasking` (a name, or a dict with `type`).

    Values are read as YAML scalars (`2` an int, `0.5` a float, `true`, `null`, `[5, 2.5]` a list);
    the name and the keys are checked by the config, with close matches.

    Examples:
        >>> parse_unmasking("eb_sampler")
        'eb_sampler'
        >>> parse_unmasking("dream:alg=entropy,steps=8")
        {'type': 'dream', 'alg': 'entropy', 'steps': 8}
    """
    import yaml

    name, _, rest = spec.partition(":")
    if not name.strip():
        raise ValueError(
            f"--unmasking {spec!r}: give a rule's name first, e.g. eb_sampler or eb_sampler:gamma=0.01"
        )
    if not rest.strip():
        return name.strip()
    fields: dict[str, Any] = {"type": name.strip()}
    for item in _split_top_level(rest):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(
                f"--unmasking {spec!r}: {item!r} is not KEY=VALUE; write e.g. {name.strip()}:gamma=0.01"
            )
        try:
            fields[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ValueError(
                f"--unmasking {spec!r}: the value of {key.strip()!r} is not readable: {err}"
            ) from err
    return fields


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets (`thresholds=[5, 2.5],window=2` is two items)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "[{("
        depth -= char in "]})"
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def generate_config(args: argparse.Namespace) -> Any:
    """The decoding config of `generate`: the `--config` file or the `--mode` preset, then the flags
    (validated before any model is loaded; `Session.llada_on_adapter` fits `--mode llada` to it)."""
    overrides: dict[str, Any] = {}
    if args.threshold is not None:
        overrides["threshold"] = args.threshold
    if args.editing_threshold is not None:
        overrides["editing_threshold"] = None if args.editing_threshold < 0 else args.editing_threshold
    if getattr(args, "unmasking", None) is not None:
        overrides["unmasking"] = parse_unmasking(args.unmasking)
    if args.file_config is None:
        return preset_config(args, args.mode, **overrides)
    fields = {**flag_fields(args), **overrides}
    try:
        return args.file_config.replace(**fields) if fields else args.file_config
    except (TypeError, ValueError) as err:
        raise type(err)(f"--config {args.config!r} with the options given: {err}") from err


def parse_generate(argv: Sequence[str], prog: str = "dllm-edit generate") -> argparse.Namespace:
    """Parse and check `generate`'s options; reads the `--config` file (before any model is loaded)."""
    from .config_file import check_save_path, load_config_file

    parser = build_generate_parser()
    parser.prog = prog
    args = parser.parse_args(list(argv))
    args.max_new_tokens_given = args.max_new_tokens is not None
    args.file_config = None
    if args.config is not None:
        if args.mode is not None:
            raise ValueError(
                "--mode and --config both choose the decoding settings; give one (the other options "
                "override either)."
            )
        args.file_config = load_config_file(args.config)
        if args.max_new_tokens is None:
            args.max_new_tokens = args.file_config.max_new_tokens
        args.mode = f"config {args.config}"
    elif args.mode is None:
        args.mode = "speedy"
    if args.save_config is not None:
        check_save_path(args.save_config)
    return args


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
