"""Streaming decoded text out of the loop, and a terminal streamer that shows edits live.

The loop talks to any transformers streamer through `StreamBridge`:

* `put(tokens)` receives the prompt first, then the completion tokens that are final, block by
  block, up to and including the first EOS (what `TextStreamer` / `TextIteratorStreamer` expect);
* `put_draft(tokens, **info)`, on streamers that have it (transformers' `TextDiffusionStreamer`,
  `TerminalEditStreamer` below), receives after every step the not-yet-final part of the
  completion (mask tokens included), with `masked=` and `edited=` BoolTensors of the same length;
* `end()` is called exactly once, also when decoding raises.

Streaming supports batch size 1, as transformers' text streamers do.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import torch

from dllm_edit.layout import CanvasLayout
from dllm_edit.special_tokens import SpecialTokens


class StreamBridge:
    """Feeds a streamer from the canvas (a no-op when `streamer` is None)."""

    def __init__(self, streamer: Any, layout: CanvasLayout, special: SpecialTokens) -> None:
        self.streamer = streamer
        self.layout = layout
        self.special = special
        self.start = int(layout.output_index[0, 0]) if streamer is not None else 0
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


class TerminalEditStreamer:
    """Prints the completion as it is decoded: final text, then the live draft with edits highlighted.

    Final tokens are printed plainly; the draft (the active block, masks shown as `mask_symbol`) is
    redrawn after every step on the same terminal line, with tokens edited at that step in red and
    freshly unmasked ones in yellow. Without a terminal (`stream.isatty()` False) only final text is
    printed.

    Args:
        tokenizer: decodes token ids (`tokenizer.decode`).
        skip_prompt: do not print the prompt.
        stream: where to write (default `sys.stdout`).
        mask_symbol: how a masked position is drawn.

    Examples:
        >>> class Tok:
        ...     def decode(self, ids, **kw):
        ...         return "".join(chr(97 + i) for i in ids)
        >>> import io, torch
        >>> out = io.StringIO()
        >>> s = TerminalEditStreamer(Tok(), skip_prompt=True, stream=out)
        >>> s.put(torch.tensor([[0, 1]])); s.put(torch.tensor([2, 3])); s.end()
        >>> out.getvalue()
        'cd\\n'
    """

    RED, YELLOW, DIM, RESET = "\033[31m", "\033[33m", "\033[2m", "\033[0m"

    def __init__(
        self, tokenizer: Any, skip_prompt: bool = False, stream: TextIO | None = None, mask_symbol: str = "░"
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.stream = stream if stream is not None else sys.stdout
        self.mask_symbol = mask_symbol
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._prompt_seen = False
        self._draft_len = 0

    def _clear_draft(self) -> None:
        if self.live and self._draft_len:
            self.stream.write("\0338\033[J")
            self._draft_len = 0

    def put(self, value: torch.Tensor) -> None:
        """Print final tokens (the first call is the prompt)."""
        ids = value.flatten().tolist()
        self._clear_draft()
        if not self._prompt_seen:
            self._prompt_seen = True
            if self.skip_prompt:
                return
        self.stream.write(self.tokenizer.decode(ids))
        self.stream.flush()

    def put_draft(
        self,
        value: torch.Tensor,
        masked: torch.Tensor | None = None,
        edited: torch.Tensor | None = None,
        **_: Any,
    ) -> None:
        """Redraw the draft: masks as `mask_symbol`, edited tokens red, other draft tokens yellow."""
        if not self.live:
            return
        ids = value.flatten().tolist()
        masked_l = masked.flatten().tolist() if masked is not None else [False] * len(ids)
        edited_l = edited.flatten().tolist() if edited is not None else [False] * len(ids)
        parts = []
        for token, is_mask, is_edit in zip(ids, masked_l, edited_l):
            if is_mask:
                parts.append(f"{self.DIM}{self.mask_symbol}{self.RESET}")
            else:
                color = self.RED if is_edit else self.YELLOW
                parts.append(f"{color}{self.tokenizer.decode([token])}{self.RESET}")
        self._clear_draft()
        self.stream.write("\0337" + "".join(parts))
        self.stream.flush()
        self._draft_len = len(ids)

    def end(self) -> None:
        """Clear the draft and finish the line."""
        self._clear_draft()
        self.stream.write("\n")
        self.stream.flush()
