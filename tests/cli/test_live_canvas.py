"""The live canvas of `dllm-edit generate` (`TerminalEditStreamer`): one clean frame, edits kept visible.

The command line runs in a real pseudo terminal (pexpect) whose output a terminal emulator (pyte)
turns into the screen a person would see, scrollback included; the streamer's own rules (short
terminals, scrolling, no colours, the history line, the step delay) are pinned in-process on a fake
terminal fed to the same emulator.
"""

from __future__ import annotations

import io
import os
import re
import sys
import time

import pytest
import torch

from dllm_edit.cli import main
from dllm_edit.streaming import TerminalEditStreamer

pyte = pytest.importorskip("pyte", reason="the terminal emulator of these tests: pip install -e '.[dev]'")

MAIN_JOB = "sort:8718982948="
ANSWER = "1247888899"  # the shipped model's answer; its second forward edits token 4, '7' -> '8'


def screen_lines(screen, cols: int) -> list[str]:
    """Every line of the emulated terminal, scrollback first, right spaces stripped."""
    top = ["".join(line[x].data for x in range(cols)).rstrip() for line in screen.history.top]
    return top + [line.rstrip() for line in screen.display]


# ---- the command line in a real pseudo terminal ------------------------------------------------


def run_in_terminal(command: str, cols: int, rows: int, **env: str) -> tuple[list[str], object, bytes]:
    """Run `command` (a shell line) in a pseudo terminal of `cols` x `rows`; the lines on screen
    (scrollback included), the screen, and the raw bytes written."""
    pexpect = pytest.importorskip("pexpect", reason="pseudo terminals: pip install -e '.[dev]'")
    if os.name != "posix":
        pytest.skip("pseudo terminals need a POSIX system")
    environment = {**os.environ, "TERM": "xterm-256color", **env}
    environment.pop("COLUMNS", None)
    environment.pop("LINES", None)
    if "NO_COLOR" not in env:
        environment.pop("NO_COLOR", None)
    screen = pyte.HistoryScreen(cols, rows, history=5000, ratio=0.001)
    feed = pyte.ByteStream(screen)
    child = pexpect.spawn("/bin/sh", ["-c", command], dimensions=(rows, cols), env=environment, timeout=240)
    raw = b""
    while True:
        try:
            chunk = child.read_nonblocking(65536, timeout=240)
        except pexpect.EOF:
            break
        raw += chunk
        feed.feed(chunk)
    child.close()
    assert child.exitstatus == 0, raw.decode(errors="replace")[-2000:]
    return screen_lines(screen, cols), screen, raw


@pytest.mark.parametrize("cols,rows", [(80, 24), (200, 50)])
def test_generate_draws_one_clean_frame_in_a_real_terminal(cols, rows):
    # 40 lines of earlier output first: the screen has scrolled before the canvas starts
    cli = f"{sys.executable} -m dllm_edit.cli generate {MAIN_JOB} --step-delay 0.05 2>/dev/null"
    lines, screen, raw = run_in_terminal(f"seq 1 40; {cli}", cols, rows)
    start = lines.index("40")
    assert lines[:start] == [str(i) for i in range(1, 40)]  # the earlier output is untouched
    after = [line for line in lines[start + 1 :] if line]
    # one frame: the text once, then the history line, its legend, the summary; no draft left over
    assert after[0] == MAIN_JOB + ANSWER
    assert after[1] == "forwards: f1 +11 · f2 #4 '7'→'8' · f3 +0"
    assert after[2].startswith("1 edit in the text")
    assert after[3].startswith("[speedy] 3 forwards, 3.67 tokens/forward")
    assert len(after) == 4
    assert sum(MAIN_JOB in line for line in lines) == 1 and not any("░" in line for line in lines)
    # it was drawn live: three frames with their status line, redrawn in place, cursor hidden and shown
    assert raw.count(b"forward 3 \xc2\xb7") == 1 and b"\x1b[J" in raw
    assert raw.count(b"\x1b[?25l") == 1 and raw.count(b"\x1b[?25h") == 1
    # the final frame keeps its colours: the token the edit wrote is red, the others are not
    row = next(y for y in range(rows) if screen.display[y].startswith(MAIN_JOB))
    colors = [screen.buffer[row][len(MAIN_JOB) + i].fg for i in range(len(ANSWER))]
    assert colors == ["default"] * 4 + ["red"] + ["default"] * 5


# ---- the streamer on a fake terminal -----------------------------------------------------------


class CharTokenizer:
    """Token i is the letter chr(97 + i); 25 is the end of text (special)."""

    all_special_ids = (25,)

    def decode(self, ids, skip_special_tokens: bool = False, **_) -> str:
        return "".join(
            "<eos>" if i == 25 else chr(97 + i) for i in ids if not (skip_special_tokens and i == 25)
        )


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def ids(text: str) -> torch.Tensor:
    return torch.tensor([25 if c == "$" else ord(c) - 97 for c in text])


def flags(text: str) -> torch.Tensor:
    return torch.tensor([c == "x" for c in text])


#: One decode as the loop streams it: (draft, masked, edited) after each step, final text per block.
#: Two blocks of 6; block 0 edits its position 2 ('q' -> 'c'); block 1 ends with the end of text,
#: then an edit after it ('z' -> 'y' at position 11), which is outside the returned text.
SCRIPT = [
    ("draft", "abq_e_", "___x_x", "______"),
    ("draft", "abqdef", "______", "______"),
    ("draft", "abcdef", "______", "__x___"),
    ("draft", "abcdef", "______", "______"),
    ("final", "abcdef"),
    ("draft", "gh$_$z", "___x__", "______"),
    ("draft", "gh$$$y", "______", "_____x"),
    ("draft", "gh$$$y", "______", "______"),
    ("final", "gh$"),
]


def play(streamer: TerminalEditStreamer, script=SCRIPT) -> None:
    streamer.put(ids("pr").unsqueeze(0))
    for event in script:
        if event[0] == "draft":
            draft, masked, edited = event[1:]
            streamer.put_draft(ids(draft.replace("_", "a")), masked=flags(masked), edited=flags(edited))
        else:
            streamer.put(ids(event[1]))
    streamer.end()


def emulate(raw: str, cols: int, rows: int, before: str = ""):
    screen = pyte.HistoryScreen(cols, rows, history=1000, ratio=0.001)
    screen.set_mode(pyte.modes.LNM)  # "\n" returns to the first column, as a terminal's ONLCR does
    pyte.Stream(screen).feed(before + raw)
    return screen


def terminal_run(monkeypatch, cols: int, rows: int, before: str = "", script=SCRIPT, **kwargs):
    monkeypatch.setenv("COLUMNS", str(cols))
    monkeypatch.setenv("LINES", str(rows))
    monkeypatch.setenv("TERM", kwargs.pop("term", "xterm"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = FakeTerminal()
    streamer = TerminalEditStreamer(CharTokenizer(), stream=out, **kwargs)
    play(streamer, script)
    screen = emulate(out.getvalue(), cols, rows, before)
    return out.getvalue(), screen, screen_lines(screen, cols)


def test_final_frame_and_history(monkeypatch):
    raw, screen, lines = terminal_run(monkeypatch, 80, 10, prefix=">> ")
    text = [line for line in lines if line]
    assert text[0] == ">> prabcdefgh"  # the text once, up to the end of text
    # per forward: tokens unmasked, edits (runs without edits merged); the edit after the end of
    # text is not counted
    assert text[1] == "forwards: f1–2 +6 · f3 #2 'q'→'c' · f4–7 +3"
    assert text[2].startswith("1 edit in the text")
    assert len(text) == 3
    edited = [screen.buffer[0][x].fg for x in range(len(">> prabcdefgh"))]
    assert edited == ["default"] * 7 + ["red"] + ["default"] * 5  # 'c', written by the edit, stays red
    assert "\033[1;7m" in raw and "░" in raw  # the edit was drawn reversed, masks were drawn


def test_draft_shows_masks_fresh_tokens_and_edits(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "10")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTerminal()
    streamer = TerminalEditStreamer(CharTokenizer(), stream=out)
    streamer.put(ids("pr").unsqueeze(0))
    for draft, masked, edited in [s[1:] for s in SCRIPT[:3]]:
        streamer.put_draft(ids(draft.replace("_", "a")), masked=flags(masked), edited=flags(edited))
    screen = emulate(out.getvalue(), 80, 10)
    assert screen.display[0].rstrip() == "prabcdef"
    assert screen.display[1].startswith("forward 3 · 1 edit so far · 0 masked in the draft")
    cell = screen.buffer[0][4]  # 'c', edited at this step: reversed red
    assert (cell.data, cell.fg, cell.reverse) == ("c", "red", True)
    assert [screen.buffer[0][x].fg for x in (2, 3, 5)] == ["brown"] * 3  # other draft tokens yellow
    streamer.end()


def test_a_frame_taller_than_the_terminal_falls_back_to_appending(monkeypatch):
    # 6 columns, 3 rows: the draft of block 0 needs 3 lines plus the status: it cannot be redrawn
    _, _, lines = terminal_run(monkeypatch, 6, 3, history=False)
    text = "".join(line for line in lines if line)
    assert text == "prabcdefgh"  # every token once, in order: nothing drawn twice
    assert "░" not in text


def test_frames_redraw_cleanly_when_the_screen_scrolls(monkeypatch):
    # the canvas starts on the last row of a full screen, and grows from one line to three
    before = "".join(f"line {i}\n" for i in range(9))
    raw, _, lines = terminal_run(monkeypatch, 8, 6, before=before, prefix="> ", history=False)
    assert lines[:9] == [f"line {i}" for i in range(9)]  # scrolled away, intact
    assert [line for line in lines[9:] if line] == ["> prabc", "defgh"]
    assert "\0338" not in raw and "\0337" not in raw  # no saved cursor: it does not survive a scroll


def test_no_color_term_dumb_and_pipes(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTerminal()
    play(TerminalEditStreamer(CharTokenizer(), stream=out))
    raw = out.getvalue()
    assert "\033[J" in raw and not re.search("\033\\[[0-9;]*m", raw)  # redrawn, never coloured
    assert emulate(raw, 80, 10).display[0].rstrip() == "prabcdefgh"

    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    out = FakeTerminal()
    play(TerminalEditStreamer(CharTokenizer(), stream=out))
    assert "\033" not in out.getvalue()  # no escape sequence at all: appended plain text
    assert out.getvalue().splitlines()[:2] == [
        "prabcdefgh",
        "forwards: f1–2 +6 · f3 #2 'q'→'c' · f4–7 +3",
    ]

    monkeypatch.setenv("TERM", "xterm")
    pipe = io.StringIO()
    play(TerminalEditStreamer(CharTokenizer(), stream=pipe))
    assert pipe.getvalue() == "prabcdefgh\n"  # not a terminal: the final text only


def test_step_delay_paces_the_frames_and_is_validated(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = FakeTerminal()
    streamer = TerminalEditStreamer(CharTokenizer(), stream=out, step_delay=0.02)
    start = time.perf_counter()
    play(streamer)
    drafts = sum(event[0] == "draft" for event in SCRIPT)
    assert streamer.slept == pytest.approx(0.02 * drafts)
    assert time.perf_counter() - start >= 0.02 * drafts
    with pytest.raises(ValueError, match=r"step_delay must be a number of seconds >= 0.*got -1"):
        TerminalEditStreamer(CharTokenizer(), step_delay=-1)
    with pytest.raises(ValueError, match="got nan"):
        TerminalEditStreamer(CharTokenizer(), step_delay=float("nan"))
    with pytest.raises(TypeError, match=r"step_delay must be a number of seconds.*got str '0\.1'"):
        TerminalEditStreamer(CharTokenizer(), step_delay="0.1")
    with pytest.raises(ValueError, match="display must be one of"):
        TerminalEditStreamer(CharTokenizer(), display="fancy")


def test_cli_refuses_a_bad_step_delay_before_loading(capsys):
    start = time.perf_counter()
    assert main(["generate", MAIN_JOB, "--step-delay", "-0.5"]) == 2
    assert "--step-delay must be a number of seconds >= 0" in capsys.readouterr().err
    assert main(["generate", MAIN_JOB, "--step-delay", "0.3", "--json"]) == 2
    assert "--step-delay paces the live canvas, which --json turns off" in capsys.readouterr().err
    assert time.perf_counter() - start < 5  # refused before the model is loaded
