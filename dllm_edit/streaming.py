"""Streaming decoded text out of the loop: the bridge between the loop and any transformers streamer.

The loop talks to any transformers streamer through `StreamBridge`:

* `put(tokens)` receives the prompt first, then the completion tokens that are final, block by
  block, up to and including the first EOS (what `TextStreamer` / `TextIteratorStreamer` expect);
* `put_draft(tokens, **info)`, on streamers that have it (transformers' `TextDiffusionStreamer`,
  `dllm_edit.terminal_streamer.TerminalEditStreamer`), receives after every step the not-yet-final part of the
  completion (mask tokens included), with `masked=` and `edited=` BoolTensors of the same length;
* `end()` is called exactly once, also when decoding raises.

Streaming supports batch size 1, as transformers' text streamers do.
"""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.layout import CanvasLayout
from dllm_edit.special_tokens import SpecialTokens


class StreamBridge:
    """Feeds a streamer from the canvas (a no-op when `streamer` is None)."""

    def __init__(self, streamer: Any, layout: CanvasLayout, special: SpecialTokens) -> None:
        self.streamer = streamer
        self.layout = layout
        self.special = special
        self.start = int(layout.offsets[0] + layout.prompt_lengths[0]) if streamer is not None else 0
        self.done = 0  # completion tokens already confirmed
        self.stopped = False  # an EOS was confirmed: nothing more to stream
        self.drafts = streamer is not None and callable(getattr(streamer, "put_draft", None))
        self.ended = False

    def prompt(self, input_ids: torch.Tensor) -> None:
        if self.streamer is not None:
            self.streamer.put(input_ids.cpu())

    def step(self, canvas: torch.Tensor, span: slice, edit: torch.Tensor) -> None:
        """After a step: the draft from the first unconfirmed token to the end of the span."""
        if not self.drafts or self.stopped:
            return
        first = self.start + self.done
        last = min(span.stop, self.start + self.layout.max_new_tokens)
        if last <= first:
            return
        draft = canvas[0, first:last]  # [n]
        edited = torch.zeros(canvas.shape[1], dtype=torch.bool, device=canvas.device)  # [T]
        edited[span] = edit[0]
        self.streamer.put_draft(
            draft.cpu(), masked=(draft == self.special.mask).cpu(), edited=edited[first:last].cpu()
        )

    def confirm(self, canvas: torch.Tensor, end: int) -> None:
        """Give the streamer the completion tokens that are final up to canvas slot `end`."""
        if self.streamer is None or self.stopped:
            return
        upto = min(max(end - self.start, 0), self.layout.max_new_tokens)
        if upto <= self.done:
            return
        chunk = canvas[0, self.start + self.done : self.start + upto]  # [n]
        if self.special.eos:
            hits = torch.isin(chunk, self.special.eos_tensor(canvas.device)).nonzero()
            if hits.numel():
                chunk = chunk[: int(hits[0, 0]) + 1]
                self.stopped = True
        self.done = upto
        if chunk.numel():
            self.streamer.put(chunk.cpu())

    def close(self) -> None:
        if self.streamer is not None and not self.ended:
            self.ended = True
            self.streamer.end()


_TERMINAL_NAMES = ("DISPLAYS", "TerminalEditStreamer", "char_width", "printable", "wrap")


def __getattr__(name: str) -> Any:
    """`dllm_edit.streaming.TerminalEditStreamer` (and its helpers), kept for earlier imports: the
    terminal UI lives in `dllm_edit.terminal_streamer`, which the decoding loop never imports."""
    if name in _TERMINAL_NAMES:
        from dllm_edit import terminal_streamer

        return getattr(terminal_streamer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
