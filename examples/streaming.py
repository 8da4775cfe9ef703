"""Cookbook: stream edits to a terminal, or to a web UI through a generator fed from a thread.

Three ways out of the decoding loop, all batch size 1 (as transformers' text streamers):

1. `dllm_edit.TerminalEditStreamer`: on a terminal the live draft is redrawn after every step
   (masks dim, new tokens yellow, edits red) and final text is printed block by block; without a
   terminal (a pipe, CI) only the final text is printed. On a terminal, transformers'
   `TextDiffusionStreamer` is run too.
2. `TextIteratorStreamer` fed from a thread: a generator of text chunks (final text only).
3. A small queue streamer that also receives every draft (`put_draft`): a generator of JSON-ready
   events — final text, drafts with their masked / edited positions — for a web UI.

Offline on the CPU, with a small model trained for a few seconds (`--tiny`: a tiny random model, CI).

    python examples/streaming.py          # ~30 s on a 2-core CPU (training included)
    python examples/streaming.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from cookbook_models import BLOCK_LENGTH, char_tokenizer, held_out, small_model
from transformers import TextDiffusionStreamer, TextIteratorStreamer

import dllm_edit


def run_in_thread(decode: Callable[[], Any], chunks: Iterator[Any]) -> Iterator[Any]:
    """Run `decode()` in a thread while yielding from `chunks`; re-raise its error, if any, at the end."""
    error: list[BaseException] = []

    def target() -> None:
        try:
            decode()
        except BaseException as exc:  # the streamer is ended by dllm_edit, so `chunks` stops too
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    yield from chunks
    thread.join()
    if error:
        raise error[0]


def stream_text(
    model: Any, tokenizer: Any, prompt: str, cfg: dllm_edit.EditGenerationConfig
) -> Iterator[str]:
    """Final text chunks, block by block, from transformers' `TextIteratorStreamer`."""
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=60)
    ids = tokenizer([prompt], return_tensors="pt")["input_ids"]
    decode = partial(
        dllm_edit.generate, model, ids, generation_config=cfg, tokenizer=tokenizer, streamer=streamer
    )
    return run_in_thread(decode, iter(streamer))


class EventStreamer:
    """A streamer that turns final tokens and drafts into events on a queue (`None` ends the stream).

    dllm_edit calls `put` with the prompt, then with final tokens block by block; `put_draft` after
    every step with the unconfirmed tokens (masks included) and `masked` / `edited` flags; `end` once.
    """

    def __init__(self, tokenizer: Any, mask_symbol: str = "_") -> None:
        self.tokenizer = tokenizer
        self.mask_symbol = mask_symbol
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # the first call is the prompt
            self._prompt_seen = True
            return
        text = self.tokenizer.decode(value.flatten().tolist(), skip_special_tokens=True)
        self.events.put({"type": "final", "text": text})

    def put_draft(self, value: Any, masked: Any = None, edited: Any = None, **_: Any) -> None:
        ids, masks = value.flatten().tolist(), masked.flatten().tolist()
        pieces = [self.mask_symbol if m else self.tokenizer.decode([t]) for t, m in zip(ids, masks)]
        edits = [i for i, e in enumerate(edited.flatten().tolist()) if e]
        self.events.put({"type": "draft", "text": "".join(pieces), "edited": edits})

    def end(self) -> None:
        self.events.put(None)


def stream_events(
    model: Any, tokenizer: Any, prompt: str, cfg: dllm_edit.EditGenerationConfig
) -> Iterator[dict[str, Any]]:
    """Events for a web UI: `{"type": "draft", "text", "edited"}` after every step and
    `{"type": "final", "text"}` per finished block. Serve them as server-sent events or JSON lines;
    in a web framework, e.g.: `StreamingResponse((json.dumps(e) + "\\n" for e in
    stream_events(...)), media_type="application/x-ndjson")`.
    """
    streamer = EventStreamer(tokenizer)
    ids = tokenizer([prompt], return_tensors="pt")["input_ids"]
    decode = partial(
        dllm_edit.generate, model, ids, generation_config=cfg, tokenizer=tokenizer, streamer=streamer
    )
    return run_in_thread(decode, iter(streamer.events.get, None))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    args = parser.parse_args()

    tokenizer = char_tokenizer()
    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    prompt = held_out(1)[0]["prompt"]
    cfg = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK_LENGTH)

    ids = tokenizer([prompt], return_tensors="pt")["input_ids"]  # [1, P]: streaming is batch size 1

    # 1. a terminal
    # the canvas redraws its lines in place: text before it on its first line goes in `prefix`
    streamer = dllm_edit.TerminalEditStreamer(
        tokenizer, skip_prompt=True, prefix=f"TerminalEditStreamer: {prompt}"
    )
    out = dllm_edit.generate(model, ids, generation_config=cfg, tokenizer=tokenizer, streamer=streamer)
    if sys.stdout.isatty():  # drafts are drawn with terminal escape codes
        print("TextDiffusionStreamer:", flush=True)
        diffusion = TextDiffusionStreamer(tokenizer, skip_special_tokens=True, sleep_time=0.05)
        dllm_edit.generate(model, ids, generation_config=cfg, tokenizer=tokenizer, streamer=diffusion)

    # 2. text chunks from a thread
    chunks = list(stream_text(model, tokenizer, prompt, cfg))
    print(f"TextIteratorStreamer chunks: {chunks}")

    # 3. draft + final events from a thread
    events = list(stream_events(model, tokenizer, prompt, cfg))
    drafts = [e for e in events if e["type"] == "draft"]
    finals = [e for e in events if e["type"] == "final"]
    edits = sum(len(e["edited"]) for e in drafts)
    print(f"events: {len(drafts)} drafts ({edits} edited positions), {len(finals)} final chunks")
    for event in drafts[:3]:
        print(f"  draft {event['text']!r} edited at {event['edited']}")
    print(f"  final text {''.join(e['text'] for e in finals)!r}; forwards {out.num_forwards.item()}")


if __name__ == "__main__":
    main()
