"""`TerminalEditStreamer`: a transformers streamer that draws the canvas live in a terminal.

It receives the loop's `put` / `put_draft` / `end` calls (`dllm_edit.streaming.StreamBridge`) and
draws the completion with its masks, fresh tokens and edits: redrawn in place on a terminal,
appended where a frame would not fit, final text only on a pipe (`DISPLAYS`). The decoding loop
never imports this module; the CLI and users do.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import sys
import time
import unicodedata
from typing import Any, TextIO

import torch

#: How `TerminalEditStreamer` draws: redrawn in place, appended, or final text only.
DISPLAYS = ("live", "append", "plain")
_RESET = "\033[0m"
_RED, _YELLOW, _DIM = "\033[31m", "\033[33m", "\033[2m"
#: SGR sequences of the canvas's styles ("" = the terminal's default).
_STYLES = {
    "final": "",
    "final_edited": _RED,  # a token an edit wrote: stays red in the final frame
    "draft": _YELLOW,
    "fresh": _YELLOW + "\033[1m",  # unmasked at this step
    "draft_edited": _RED,
    "edit": _RED + "\033[1;7m",  # edited at this step: bold, reversed
    "mask": _DIM,
    "special": _DIM,
    "status": _DIM,
}


def char_width(ch: str) -> int:
    """Terminal columns of one character: 2 for wide East Asian ones, 0 for combining marks, else 1."""
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def printable(text: str) -> str:
    """`text` safe to draw: tabs as four spaces, other control characters (escapes included) as `�`."""
    text = text.replace("\t", "    ").replace("\r", "")
    return "".join(c if c == "\n" or (c >= " " and c != "\x7f") else "\ufffd" for c in text)


Segment = tuple[str, str, bool]  # (text, style, stable: it will never change on screen)
Line = list[tuple[str, str]]  # runs of (text, style)


def wrap(segments: list[Segment], width: int) -> tuple[list[Line], int]:
    """Lay `segments` out in lines of at most `width` columns (breaking at any character, at `\\n`).

    Returns:
        `(lines, stable)`: the lines, and how many of the first ones are complete and hold stable
        segments only (they will never be redrawn).

    Examples:
        >>> lines, stable = wrap([("abcde", "final", True), ("fg", "draft", False)], width=3)
        >>> [["".join(t for t, _ in line)] for line in lines], stable
        ([['abc'], ['def'], ['g']], 1)
    """
    lines: list[Line] = [[]]
    used = 0
    stable: int | None = None
    for text, style, is_stable in segments:
        if not is_stable and stable is None:
            stable = len(lines) - 1
        for ch in text:
            if ch == "\n":
                lines.append([])
                used = 0
                continue
            w = char_width(ch)
            if used + w > width and used > 0:
                lines.append([])
                used = 0
            line = lines[-1]
            if line and line[-1][1] == style:
                line[-1] = (line[-1][0] + ch, style)
            else:
                line.append((ch, style))
            used += w
    return lines, len(lines) - 1 if stable is None else stable


class TerminalEditStreamer:
    """Draws the completion as it is decoded: a live canvas where edits stay visible.

    Three ways to draw (`display`, chosen from the stream when not given):

    * `"live"` (a terminal): the canvas — the text so far, then the draft of the active block — is
      redrawn in place after every step, with a status line. Final tokens are plain, draft tokens
      yellow (bold when unmasked at that step), tokens edited at that step bold reversed red, tokens
      an edit wrote red (also in the final frame), masks dim `mask_symbol`, end-of-text and other
      special tokens dim `·`. Lines that can no longer change are written once and scroll away like
      any output, so the part redrawn is only the lines from the first draft token on; if that part
      would not fit the terminal's height, or the terminal is resized, the canvas falls back to the
      `"append"` way for the rest of the decode. The canvas starts at the beginning of the current
      line: pass text that belongs before it as `prefix`.
    * `"append"` (`TERM=dumb`): final text as it becomes final, no cursor movement.
    * `"plain"` (not a terminal, e.g. a pipe or a file): final text only, no colours, no history.

    At the end `"live"` and `"append"` print a one-line history of the decode: per forward, the
    tokens unmasked (`+n`) and each edit (`#i 'old'→'new'`, `i` the completion position, `░` a
    re-mask); runs of forwards without edits are merged (`f4–9 +6`). Only positions inside the
    returned text (up to its end-of-text token) are counted. Colours follow the terminal: off with
    `NO_COLOR` set (https://no-color.org), `TERM=dumb`, or when the stream is not a terminal.

    Args:
        tokenizer: decodes token ids (`tokenizer.decode`).
        skip_prompt: do not print the prompt.
        stream: where to write (default `sys.stdout`).
        mask_symbol: how a masked position is drawn (one character).
        step_delay: seconds to wait after drawing each step of the live canvas (a demo's pace;
            default 0). The time waited is in `slept`.
        display: `"live"`, `"append"` or `"plain"` (default: from the stream and `TERM`).
        color: draw with colours (default: from the stream, `TERM` and `NO_COLOR`).
        prefix: text drawn before the prompt (or in its place with `skip_prompt=True`).
        history: print the history line at the end (`"live"` and `"append"`).

    Raises:
        TypeError / ValueError: a `step_delay` that is not a number >= 0, an unknown `display`, a
            `mask_symbol` that is not one character.

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
        >>> out = io.StringIO()  # without colours or cursor moves: the history of the two drafts
        >>> s = TerminalEditStreamer(Tok(), stream=out, display="append", color=False)
        >>> s.put(torch.tensor([0, 1]))
        >>> s.put_draft(torch.tensor([7, 2]), masked=torch.tensor([False, True]))
        >>> s.put_draft(torch.tensor([3, 2]), edited=torch.tensor([True, False]))
        >>> s.put(torch.tensor([3, 2])); s.end()
        >>> print(out.getvalue())
        abdc
        forwards: f1 +1 · f2 +1 #0 'h'→'d'
        1 edit in the text; +n tokens unmasked, #i 'a'→'b' token i edited
        <BLANKLINE>
    """

    RED, YELLOW, DIM, RESET = _RED, _YELLOW, _DIM, _RESET

    def __init__(
        self,
        tokenizer: Any,
        skip_prompt: bool = False,
        stream: TextIO | None = None,
        mask_symbol: str = "░",
        *,
        step_delay: float = 0.0,
        display: str | None = None,
        color: bool | None = None,
        prefix: str = "",
        history: bool = True,
    ) -> None:
        if isinstance(step_delay, bool) or not isinstance(step_delay, (int, float)):
            raise TypeError(
                f"step_delay must be a number of seconds >= 0 (e.g. 0.3), got {type(step_delay).__name__} "
                f"{step_delay!r}."
            )
        if not math.isfinite(step_delay) or step_delay < 0:
            raise ValueError(
                f"step_delay must be a number of seconds >= 0 (e.g. 0.3; 0 draws as fast as it "
                f"decodes), got {step_delay!r}."
            )
        if display is not None and display not in DISPLAYS:
            raise ValueError(f"display must be one of {list(DISPLAYS)} or None (detect), got {display!r}.")
        if not isinstance(mask_symbol, str) or len(mask_symbol) != 1 or char_width(mask_symbol) != 1:
            raise ValueError(
                f"mask_symbol must be one character one column wide (e.g. '░'), got {mask_symbol!r}."
            )
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.stream = stream if stream is not None else sys.stdout
        self.mask_symbol = mask_symbol
        self.step_delay = float(step_delay)
        self.prefix = prefix
        self.history = history
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        dumb = os.environ.get("TERM", "") == "dumb"
        self.display = display or ("plain" if not is_tty else "append" if dumb else "live")
        if color is None:
            color = self.display != "plain" and is_tty and not dumb and not os.environ.get("NO_COLOR")
        self.color = bool(color)
        self.slept = 0.0  # seconds waited for step_delay
        self._special = set(getattr(tokenizer, "all_special_ids", None) or ())
        self._head: str | None = None  # prefix + prompt text, once the prompt came
        self._final: list[int] = []  # final completion tokens
        self._written = 0  # final tokens written in the "append" / "plain" way
        self._draft: list[tuple[int, str]] = []  # (token, style) of the current draft
        self._current: dict[int, int | None] = {}  # completion position -> token drawn (None: a mask)
        self._edited: set[int] = set()  # completion positions an edit wrote
        self._steps: list[tuple[list[int], list[tuple[int, int | None, int | None]]]] = []
        self._frozen = 0  # lines of the live canvas written for good
        self._drawn = 0  # lines of the live canvas on screen now (the cursor is on the last)
        self._size: tuple[int, int] | None = None  # terminal size at the first frame

    @property
    def live(self) -> bool:
        """Whether the canvas is redrawn in place."""
        return self.display == "live"

    # ---- what the loop calls -------------------------------------------------------------------

    def put(self, value: torch.Tensor) -> None:
        """Take final tokens (the first call is the prompt)."""
        ids = value.flatten().tolist()
        if self._head is None:
            self._head = self.prefix + ("" if self.skip_prompt else self._decode(ids))
            if not self.live:
                self._write(self._head)
            return
        for pos, token in enumerate(ids, start=len(self._final)):
            self._current[pos] = token
        self._final += ids
        self._draft = []
        if not self.live:
            self._write(self._final_text(self._written, len(self._final)))
            self._written = len(self._final)

    def put_draft(
        self,
        value: torch.Tensor,
        masked: torch.Tensor | None = None,
        edited: torch.Tensor | None = None,
        **_: Any,
    ) -> None:
        """Take the draft after a step (the completion from its first non-final token on)."""
        ids = value.flatten().tolist()
        masked_l = masked.flatten().tolist() if masked is not None else [False] * len(ids)
        edited_l = edited.flatten().tolist() if edited is not None else [False] * len(ids)
        unmasked: list[int] = []
        edits: list[tuple[int, int | None, int | None]] = []
        draft: list[tuple[int, str]] = []
        for pos, (token, is_mask, is_edit) in enumerate(zip(ids, masked_l, edited_l), start=len(self._final)):
            before = self._current.get(pos)
            now = None if is_mask else token
            if is_edit:
                edits.append((pos, before, now))
                if now is None:
                    self._edited.discard(pos)
                else:
                    self._edited.add(pos)
            elif now is not None and before is None:
                unmasked.append(pos)
            self._current[pos] = now
            if is_mask:
                style = "mask"
            elif is_edit:
                style = "edit"
            elif token in self._special:
                style = "special"
            elif before is None:
                style = "fresh"
            else:
                style = "draft_edited" if pos in self._edited else "draft"
            draft.append((token, style))
        self._draft = draft
        self._steps.append((unmasked, edits))
        if self.live:
            self._draw(final=False)
            if self.live and self.step_delay:
                time.sleep(self.step_delay)
                self.slept += self.step_delay

    def end(self) -> None:
        """Draw the final frame (text, edits kept red, the history) and end the line."""
        if self._head is None:
            self._head = self.prefix
        history = self.history_line() if self.history and self.display != "plain" else ""
        if self.live:
            self._draw(final=True)
            self._write(("\r\n" + history.replace("\n", "\r\n") if history else "") + "\033[?25h\r\n")
        else:
            shown = "\033[?25h" if self._size is not None else ""  # the live canvas fell back
            self._write(("\n" + history if history else "") + shown + "\n")

    # ---- the history line ----------------------------------------------------------------------

    def history_line(self) -> str:
        """Per forward, tokens unmasked (`+n`) and edits (`#i 'old'→'new'`), inside the final text."""
        length = len(self._final)
        items: list[str] = []
        run: list[tuple[int, int]] = []  # (forward, tokens unmasked) of forwards without edits
        n_edits = 0

        def close_run() -> None:
            if run:
                first, last = run[0][0], run[-1][0]
                name = f"f{first}" if first == last else f"f{first}–{last}"
                items.append(f"{name} +{sum(n for _, n in run)}")
                run.clear()

        for forward, (unmasked, edits) in enumerate(self._steps, start=1):
            count = sum(p < length for p in unmasked)
            inside = [e for e in edits if e[0] < length]
            if not inside:
                run.append((forward, count))
                continue
            close_run()
            n_edits += len(inside)
            shown = " ".join(
                f"#{p} {self._token_repr(old)}→{self._token_repr(new)}" for p, old, new in inside
            )
            unmasked_here = f" +{count}" if count else ""
            items.append(f"f{forward}{unmasked_here} {self._paint(shown, 'final_edited')}")
        close_run()
        if not items:
            return ""
        legend = (
            f"{n_edits} edit{'s' * (n_edits != 1)} in the text; +n tokens unmasked, #i 'a'→'b' token i edited"
        )
        return "forwards: " + " · ".join(items) + "\n" + self._paint(legend, "status")

    def _token_repr(self, token: int | None) -> str:
        if token is None:
            return self.mask_symbol
        return repr(printable(self.tokenizer.decode([token])))  # special tokens by name

    # ---- drawing -------------------------------------------------------------------------------

    def _decode(self, ids: list[int]) -> str:
        return printable(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _paint(self, text: str, style: str) -> str:
        code = _STYLES[style] if self.color else ""
        return f"{code}{text}{_RESET}" if code else text

    def _final_segments(self, start: int, end: int) -> list[Segment]:
        """Final tokens `[start, end)` in runs of one style (decoded together: multi-byte text whole)."""
        segments: list[Segment] = []
        pos = start
        while pos < end:
            style = "final_edited" if pos in self._edited else "final"
            stop = pos + 1
            while stop < end and ("final_edited" if stop in self._edited else "final") == style:
                stop += 1
            segments.append((self._decode(self._final[pos:stop]), style, True))
            pos = stop
        return segments

    def _final_text(self, start: int, end: int) -> str:
        return "".join(self._paint(text, style) for text, style, _ in self._final_segments(start, end))

    def _segments(self, final: bool) -> list[Segment]:
        segments: list[Segment] = [(self._head or "", "final", True)]
        segments += self._final_segments(0, len(self._final))
        if not final:
            for token, style in self._draft:
                if style == "mask":
                    text = self.mask_symbol
                elif style == "special":
                    text = "·"
                else:
                    text = printable(self.tokenizer.decode([token])).replace("\n", "⏎")
                segments.append((text, style, False))
        return segments

    def _render(self, line: Line) -> str:
        return "".join(self._paint(text, style) for text, style in line)

    def _terminal_size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            size = shutil.get_terminal_size((80, 24))
        return max(size.columns, 2), max(size.lines, 2)

    def _draw(self, final: bool) -> None:
        """Redraw the canvas in place from its first line that can still change."""
        cols, rows = self._terminal_size()
        if self._size is None:
            self._size = (cols, rows)
            self._write("\033[?25l")  # no cursor flicker while drawing; shown again by end()
        lines, stable = wrap(self._segments(final), cols - 1)  # the last column free: no pending wraps
        status = [] if final else [self._status(cols - 1)]
        fits = len(lines) - stable + len(status) <= rows - 1 and cols == self._size[0]
        if not final and not fits:
            lines, _ = wrap(self._segments(final=True), cols - 1)
            status = []
        out = "\r" + (f"\033[{self._drawn - 1}A" if self._drawn > 1 else "") + "\033[J"
        shown = lines[self._frozen :] + status
        self._write(out + "\r\n".join(self._render(line) for line in shown))
        if not final and not fits:  # the rest of the decode is appended
            self.display = "append"
            self._written = len(self._final)
            return
        self._drawn = len(shown)
        if not final:
            self._drawn -= stable - self._frozen
            self._frozen = stable

    def _status(self, width: int) -> Line:
        forwards = len(self._steps)
        edits = sum(len(e) for _, e in self._steps)
        masks = sum(style == "mask" for _, style in self._draft)
        text = f"forward {forwards} · {edits} edit{'s' * (edits != 1)} so far · {masks} masked in the draft"
        return [(text[:width], "status")]

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()
