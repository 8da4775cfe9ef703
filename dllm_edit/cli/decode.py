"""`dllm-edit generate` and `dllm-edit compare`: decode a prompt with the editable decoder.

    dllm-edit generate "sort:8718982948=" [--model PATH_OR_ID] [--mode speedy|quality|llada] [--json]
    dllm-edit compare  "sort:8718982948=" [--model PATH_OR_ID]

Without `--model`, the model shipped in the package decodes (`dllm_edit.load_default()`).

`generate` prints the completion — on a terminal it shows the block being drafted and edited live
(edited tokens in red, freshly unmasked ones in yellow) — then every edit (the forward, the
completion position, the token before and after), then a line with forwards, tokens per forward,
edits and tokens/s; `--json` prints one JSON object instead (the last line of output, with the
edits under `"edits"`).
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

MODES = ("speedy", "quality")


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `generate` and `compare` share."""
    parser.add_argument("prompt", help="the prompt text (use quotes)")
    parser.add_argument(
        "--model",
        default=None,
        help="a local model folder or a Hub id (default: the model shipped in the package)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model's own modelling code (LLaDA2.x needs it); only for sources you trust",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate (default 128)")
    parser.add_argument(
        "--block-length", type=int, default=None, help="tokens per block (default: the preset's, 32)"
    )
    parser.add_argument(
        "--multi-block-edit", action="store_true", help="let edits revisit the previous block"
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling generator (default 0)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument(
        "--dtype", default=None, help="model dtype, e.g. bfloat16 (default: the checkpoint's)"
    )
    parser.add_argument(
        "--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template"
    )


def build_generate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dllm-edit generate", description="Decode a prompt with the editable decoder (M2T + T2T)."
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--mode",
        default="speedy",
        help="decoding preset: speedy (S, default), quality (Q) or llada (LLaDA-1's rule, for "
        "bidirectional models; see docs/concepts/canvas.md)",
    )
    parser.add_argument("--threshold", type=float, default=None, help="τ_mask, overrides the preset's")
    parser.add_argument(
        "--editing-threshold",
        type=float,
        default=None,
        help="τ_edit, overrides the preset's (negative: editing off)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    parser.add_argument("--no-live", action="store_true", help="do not draw the live canvas on a terminal")
    return parser


def build_compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dllm-edit compare", description="Decode a prompt with S, Q and M2T-only, side by side."
    )
    add_decoding_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    return parser


class Session:
    """A loaded model and tokenizer, and the encoded prompt."""

    def __init__(self, args: argparse.Namespace) -> None:
        from dllm_edit.shipped import load_default

        from .loading import load_model_and_tokenizer

        if args.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}.")
        if args.block_length is not None and args.block_length < 1:
            raise ValueError(f"--block-length must be >= 1, got {args.block_length}.")
        if args.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {args.temperature}.")
        if args.model is None:
            self.model, self.tokenizer = load_default()
        else:
            self.model, self.tokenizer = load_model_and_tokenizer(
                args.model, trust_remote_code=args.trust_remote_code, dtype=args.dtype
            )
        self.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
        input_ids = self.tokenizer(text, return_tensors="pt")["input_ids"].to(self.device)  # [1, P]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and input_ids.shape[1] + args.max_new_tokens > limit:
            raise ValueError(
                f"The prompt is {input_ids.shape[1]} tokens; with --max-new-tokens "
                f"{args.max_new_tokens} it exceeds the model's {limit} positions. Shorten the prompt "
                "or lower --max-new-tokens."
            )
        return input_ids

    def config(self, mode: str, **overrides: Any) -> Any:
        import dllm_edit

        fields: dict[str, Any] = {
            "max_new_tokens": self.args.max_new_tokens,
            "temperature": self.args.temperature,
        }
        if self.args.block_length is not None:
            fields["block_length"] = self.args.block_length
        if self.args.multi_block_edit:
            fields["multi_block_edit"] = True
        fields.update(overrides)
        return dllm_edit.EditGenerationConfig.from_mode(mode, **fields)

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
        seconds = time.perf_counter() - start
        if not isinstance(out, dllm_edit.EditGenerationOutput) or out.sequences is None:
            raise TypeError(f"generate returned {type(out).__name__} without sequences")
        if out.num_forwards is None or out.tokens_per_forward is None:
            raise TypeError("generate returned an output without num_forwards / tokens_per_forward")
        completion = out.completions(self.input_ids.shape[1])[0]  # up to and including the first EOS
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        forwards = int(out.num_forwards[0])
        tokens = len(completion)
        return {
            "text": text,
            "tokens": tokens,
            "num_forwards": forwards,
            "tokens_per_forward": float(out.tokens_per_forward[0]),
            "num_edits": int(out.num_edits[0]) if out.num_edits is not None else 0,
            "edits": self.edits(out, tokens),
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
    """One line: forwards, tokens per forward, edits, tokens per second."""
    return (
        f"{result['num_forwards']} forwards, {result['tokens_per_forward']:.2f} tokens/forward, "
        f"{result['num_edits']} edits, {result['tokens_per_second']:.1f} tokens/s"
    )


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"--mode must be one of {list(MODES)}, got {mode!r}.")


def run_generate(argv: Sequence[str]) -> int:
    args = build_generate_parser().parse_args(list(argv))
    check_mode(args.mode)
    session = Session(args)
    overrides: dict[str, Any] = {}
    if args.threshold is not None:
        overrides["threshold"] = args.threshold
    if args.editing_threshold is not None:
        overrides["editing_threshold"] = None if args.editing_threshold < 0 else args.editing_threshold
    config = session.config(args.mode, **overrides)
    live = not args.json and not args.no_live and sys.stdout.isatty()
    streamer = None
    if live:
        from dllm_edit.streaming import TerminalEditStreamer

        streamer = TerminalEditStreamer(session.tokenizer, skip_prompt=True)
        print(args.prompt, end="", flush=True)
    result = session.run(config, streamer)
    result["mode"] = args.mode
    if args.json:
        print(json.dumps(result))
        return 0
    if not live:
        print(args.prompt + result["text"])
    if result["edits"]:
        print("edits (T2T rewrites of tokens the model had written):")
        print(describe_edits(result["edits"]))
    print(f"[{args.mode}] {summary(result)}")
    return 0


def run_compare(argv: Sequence[str]) -> int:
    args = build_compare_parser().parse_args(list(argv))
    session = Session(args)
    rows = {
        "S (speedy)": session.run(session.config("speedy")),
        "Q (quality)": session.run(session.config("quality")),
        "M2T only": session.run(session.config("speedy", editing_threshold=None)),
    }
    if args.json:
        print(json.dumps(rows))
        return 0
    for name, r in rows.items():
        print(f"--- {name}: {summary(r)}")
        print(args.prompt + r["text"])
    return 0
