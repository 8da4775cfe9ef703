"""Remake the screenshots of the live canvas and of the replay page (docs/assets/).

    python docs/scripts/screenshots.py            # needs chromium, and pexpect + pyte (the dev extra)

It runs the README's main job (`dllm-edit generate "sort:8718982948=" --trace ...`) in a pseudo
terminal of 80 x 10, renders what the terminal shows — the frame after the second forward (the edit
drawn reversed red) and the final frame — as HTML with the terminal's colours, and photographs
those and the replay page (at its second step, where the edit is highlighted) with headless
chromium:

    docs/assets/live-canvas-forward2.png   docs/assets/live-canvas.png   docs/assets/replay.png
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pexpect
import pyte

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "docs" / "assets"
PROMPT = "sort:8718982948="
COLS, ROWS = 80, 10
COLOURS = {"red": "#e5534b", "brown": "#d4a72c", "default": "#e6edf3"}


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return str(shutil.which(name))
    sys.exit("needs chromium (apt-get install chromium)")


def shoot(page: Path, png: Path, width: int, height: int, fragment: str = "") -> None:
    subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            page.as_uri() + fragment,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def screen_html(screen: pyte.Screen) -> str:
    """The emulated screen as a dark terminal in HTML, with its colours and attributes."""
    rows = []
    for y in range(screen.lines):
        cells = []
        for x in range(screen.columns):
            c = screen.buffer[y][x]
            fg = COLOURS.get(c.fg, COLOURS["default"])
            style = f"color:{fg}"
            if c.reverse:
                style = f"color:#0d1117;background:{fg}"
            if c.bold:
                style += ";font-weight:700"
            cells.append(f'<span style="{style}">{html.escape(c.data)}</span>')
        rows.append("".join(cells))
    body = "\n".join(rows)
    return (
        '<!DOCTYPE html><meta charset="utf-8"><body style="margin:0;background:#0d1117">'
        "<pre style=\"margin:0;padding:14px 18px;font:16px/1.35 'DejaVu Sans Mono',monospace;"
        f'color:#e6edf3">{body}</pre>'
    )


def main() -> None:
    work = Path(tempfile.mkdtemp())
    trace = work / "main.json"
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    command = f"{sys.executable} -m dllm_edit.cli generate {PROMPT} --trace {trace} 2>/dev/null"
    child = pexpect.spawn("/bin/sh", ["-c", command], dimensions=(ROWS, COLS), env=env, timeout=300)
    raw = b""
    while True:
        try:
            raw += child.read_nonblocking(65536, timeout=300)
        except pexpect.EOF:
            break
    child.close()
    # the frame after forward 2: everything written up to the start of forward 3's redraw
    cut = raw.index(b"forward 2 \xc2\xb7")
    cut = raw.index(b"\r", cut)
    for name, data in (("live-canvas-forward2", raw[:cut]), ("live-canvas", raw)):
        screen = pyte.Screen(COLS, ROWS)
        pyte.ByteStream(screen).feed(data)
        page = work / f"{name}.html"
        page.write_text(screen_html(screen), encoding="utf-8")
        shoot(page, ASSETS / f"{name}.png", 800, 80 if name != "live-canvas" else 140)
    page = work / "replay.html"
    subprocess.run(
        [sys.executable, "-m", "dllm_edit.cli", "replay", str(trace), "--html", str(page)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shoot(page, ASSETS / "replay.png", 1100, 620, "#step=2")
    print("wrote", *(ASSETS / n for n in ("live-canvas-forward2.png", "live-canvas.png", "replay.png")))


if __name__ == "__main__":
    main()
