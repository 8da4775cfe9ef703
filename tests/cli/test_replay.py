"""Trace files (`dllm-edit generate --trace`), their loader, and the replay page in a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import dllm_edit
from dllm_edit.cli import main
from dllm_edit.replay import (
    SCHEMA_VERSION,
    check_trace,
    load_trace,
    render_html,
    save_trace,
    trace_document,
)

ARGS = ["--max-new-tokens", "8", "--block-length", "4", "--device", "cpu"]
MAIN_JOB = "sort:8718982948="
ROOT = Path(__file__).resolve().parents[2]


def replayed(document: dict) -> list[int | None]:
    """The completion after applying every step's changes, as the page and the terminal replay do."""
    state: list[int | None] = [None] * document["settings"]["max_new_tokens"]
    for step in document["steps"]:
        for c in step["committed"]:
            state[c["position"]] = c["token"]
        for c in step["edited"]:
            assert state[c["position"]] == c["from"]  # an edit rewrites the token that is there
            state[c["position"]] = c["to"]
        for c in step["remasked"]:
            state[c["position"]] = None
    return state


@pytest.fixture(scope="module")
def main_job_trace():
    """The README's main job decoded by the shipped model (S preset), traced."""
    model, tokenizer = dllm_edit.load_default()
    ids = tokenizer(MAIN_JOB, return_tensors="pt")["input_ids"]
    config = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=128, output_trace=True)
    out = dllm_edit.generate(
        model, ids, generation_config=config, tokenizer=tokenizer, return_dict_in_generate=True
    )
    return trace_document(out, tokenizer, ids, prompt=MAIN_JOB, config=config, mode="speedy")


def test_generate_writes_a_trace_that_replays_to_the_result(tiny_model_dir, tmp_path, capsys):
    trace, page = tmp_path / "run.json", tmp_path / "run.html"
    argv = ["generate", "w2 w3 w4", "--model", str(tiny_model_dir), *ARGS, "--json"]
    assert main([*argv, "--trace", str(trace), "--trace-html", str(page)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    document = load_trace(trace)
    assert document["version"] == SCHEMA_VERSION and document["prompt"] == "w2 w3 w4"
    assert len(document["steps"]) == result["num_forwards"] == document["result"]["num_forwards"]
    assert [s["forward"] for s in document["steps"]] == list(range(1, result["num_forwards"] + 1))
    # applying every step's changes gives the returned completion
    ids = document["result"]["ids"]
    assert replayed(document)[: len(ids)] == ids
    assert document["result"]["text"] == result["text"]
    # the edits inside the text are the ones generate lists, at the same forward and position
    edits = [
        {"forward": s["forward"], "position": e["position"], "from": document["tokens"][str(e["from"])]}
        for s in document["steps"]
        for e in s["edited"]
        if e["position"] < len(ids)
    ]
    assert edits == [{k: e[k] for k in ("forward", "position", "from")} for e in result["edits"]]
    assert document["result"]["edits_in_text"] == len(result["edits"])
    assert all(0 <= p <= 1 for s in document["steps"] for p in s["probs"] if p is not None)
    assert page.read_text().startswith("<!DOCTYPE html>")
    # and `dllm-edit replay` writes the same page from the file
    again = tmp_path / "again.html"
    assert main(["replay", str(trace), "--html", str(again)]) == 0
    assert again.read_text() == page.read_text()


def test_replay_on_a_pipe_prints_the_text_and_the_history(main_job_trace, tmp_path, capsys):
    path = save_trace(main_job_trace, tmp_path / "main.json")
    assert main(["replay", str(path), "--step-delay", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == MAIN_JOB + "1247888899"
    assert lines[1] == "forwards: f1 +11 · f2 #4 '7'→'8' · f3 +0"
    # the final frame the how-to page shows is this one
    page = (ROOT / "docs" / "how-to" / "replay.md").read_text()
    shown = next(b for b in re.findall(r"```text\n(.*?)```", page, re.S) if b.startswith(MAIN_JOB))
    assert shown.splitlines()[:3] == lines[:3]


def test_how_to_python_example_runs(tmp_path, monkeypatch):
    page = (ROOT / "docs" / "how-to" / "replay.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "trace_document" in b)
    monkeypatch.chdir(tmp_path)
    exec(block, {})
    document = load_trace(tmp_path / "run.json")
    assert document["result"]["text"] == "1247888899" and (tmp_path / "run.html").exists()


def test_remasks_are_recorded_apart_from_edits():
    from dllm_edit.strategies import LowConfidenceRemask

    model, tokenizer = dllm_edit.load_default()
    ids = tokenizer("def add(a, b):", return_tensors="pt")["input_ids"]
    speedy = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, output_trace=True)
    config = speedy.replace(strategies=[*speedy.build_strategies(), LowConfidenceRemask(0.3)])
    out = dllm_edit.generate(
        model, ids, generation_config=config, tokenizer=tokenizer, return_dict_in_generate=True
    )
    document = trace_document(out, tokenizer, ids, config=config)
    check_trace(document)
    remasks = [c for s in document["steps"] for c in s["remasked"]]
    assert remasks, "this decode is expected to re-mask (LowConfidenceRemask 0.3)"
    assert all("to" not in c for c in remasks)
    kept = document["result"]["ids"]
    assert replayed(document)[: len(kept)] == kept


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "other", "version": 1}', 'schema must be "dllm_edit.trace"'),
        ('{"schema": "dllm_edit.trace", "version": 7}', "newer dllm_edit"),
        ("[1, 2]", "the file must be a JSON object"),
    ],
)
def test_loader_names_what_is_wrong(tmp_path, content, message, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_trace(path)
    assert main(["replay", str(path)]) == 2  # one line, no traceback
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_loader_checks_steps_and_tokens(main_job_trace, tmp_path):
    bad = json.loads(json.dumps(main_job_trace))
    bad["steps"][1]["edited"][0]["position"] = 500
    with pytest.raises(ValueError, match=r"steps\[1\]\.edited\[0\]\.position must be a completion position"):
        check_trace(bad)
    bad = json.loads(json.dumps(main_job_trace))
    bad["steps"][0]["committed"][0]["token"] = 99999
    with pytest.raises(ValueError, match=r"steps\[0\]\.committed\[0\]\.token must be a token id listed"):
        check_trace(bad)
    bad = json.loads(json.dumps(main_job_trace))
    del bad["steps"][2]
    with pytest.raises(ValueError, match="one step per forward"):
        check_trace(bad)
    with pytest.raises(FileNotFoundError, match="No trace file"):
        load_trace(tmp_path / "missing.json")


def test_output_paths_are_checked_before_decoding(tmp_path, capsys):
    start = time.perf_counter()
    assert main(["generate", MAIN_JOB, "--trace", str(tmp_path / "no" / "t.json")]) == 2
    assert "--trace" in capsys.readouterr().err
    assert main(["generate", MAIN_JOB, "--trace-html", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "x.json"), "--html", str(tmp_path / "no" / "p.html")]) == 2
    assert time.perf_counter() - start < 5  # refused before any model is loaded


def test_page_is_self_contained(main_job_trace):
    page = render_html(main_job_trace)
    for fetches in ("http://", "https://", '<link rel="stylesheet"', "src="):
        assert fetches not in page
    assert json.dumps(main_job_trace["result"]["text"]) in page


# ---- the page in a real headless browser -------------------------------------------------------


def find_browser() -> str:
    for name in (os.environ.get("DLLM_EDIT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    pytest.skip(
        "no headless browser for the replay page test: install Debian's chromium "
        "(apt-get install chromium) or set DLLM_EDIT_CHROMIUM to a Chromium binary"
    )


class DevTools:
    """A minimal Chrome DevTools Protocol client: commands, and the events seen so far."""

    def __init__(self, url: str) -> None:
        websocket = pytest.importorskip(
            "websocket", reason="the DevTools client: pip install websocket-client"
        )
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def open(self, url: str, timeout: float = 30) -> None:
        """Load `url` and wait until its script has run (`window.replay` is set)."""
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        check = f"document.URL === {json.dumps(url)} && window.replay !== undefined"
        while True:
            try:
                if self.evaluate(check):
                    return
            except (AssertionError, RuntimeError):  # the old document went away mid-call
                pass
            assert time.monotonic() < deadline, f"{url} did not load within {timeout} s"
            time.sleep(0.05)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def errors(self) -> list[dict]:
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            thrown = method == "Runtime.exceptionThrown"
            console = method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert")
            logged = method == "Log.entryAdded" and params["entry"]["level"] == "error"
            if thrown or console or logged:
                found.append(params)
        return found


@pytest.fixture
def browser(tmp_path):
    binary = find_browser()
    profile = tmp_path / "profile"
    process = subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            assert process.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.1)
        port = port_file.read_text().splitlines()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        client = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            client.send(f"{domain}.enable")
        yield client
        client.ws.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def test_replay_page_in_a_headless_browser(browser, main_job_trace, tmp_path):
    page = tmp_path / "replay.html"
    page.write_text(render_html(main_job_trace), encoding="utf-8")
    browser.open(page.as_uri())
    steps = len(main_job_trace["steps"])
    final = MAIN_JOB + main_job_trace["result"]["text"]
    text = "document.getElementById('text').textContent"
    # it opens before the first forward: the prompt, then masks
    assert browser.evaluate(text).startswith(MAIN_JOB + "░")
    # the slider's last step shows the final text
    browser.evaluate(
        f"(() => {{ const s = document.getElementById('slider'); s.value = '{steps}';"
        " s.dispatchEvent(new Event('input')); })()"
    )
    assert browser.evaluate(text) == final
    assert (
        browser.evaluate("document.getElementById('stepinfo').textContent")
        == f"after forward {steps} of {steps}"
    )
    assert "3.67 tokens per forward" in browser.evaluate("document.getElementById('stats').textContent")
    # the second forward's edit is highlighted, and stays marked afterwards
    browser.evaluate("replay.show(2)")
    assert browser.evaluate(
        "[...document.querySelectorAll('#canvas .cell.edit')].map(c => c.textContent)"
    ) == ["8"]
    assert 'edit #4 "7"→"8"' in browser.evaluate("document.getElementById('changes').textContent")
    browser.evaluate("replay.show(3)")
    assert browser.evaluate("document.querySelectorAll('#canvas .cell.edited').length") == 1
    # play from the start runs to the end by itself
    browser.evaluate(
        "(() => { document.getElementById('speed').value = '120'; replay.show(0);"
        " document.getElementById('play').click(); })()"
    )
    deadline = time.monotonic() + 20
    while browser.evaluate("document.body.dataset.final") != "true":
        assert time.monotonic() < deadline, "play did not reach the last step"
        time.sleep(0.1)
    assert browser.evaluate(text) == final
    assert browser.evaluate("document.getElementById('play').textContent") == "▶ Play"  # paused at the end
    # opened at #step=last it shows the final text at once
    browser.open(page.as_uri() + "?again#step=last")  # another URL: a new document
    assert browser.evaluate("replay.step") == steps
    assert browser.evaluate(text) == final
    assert browser.errors() == []  # no console error, no uncaught exception
