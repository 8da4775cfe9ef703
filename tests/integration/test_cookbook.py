"""The cookbook recipes run end to end in their CI mode (`--tiny`), and their Hub code path runs
against stand-ins for `from_pretrained` (no download, no GPU)."""

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
COOKBOOK = ROOT / "docs" / "cookbook"

# script -> its cookbook page
RECIPES = {
    "s_vs_q_modes.py": "s-vs-q-modes.md",
    "pipeline_dropin.py": "pipeline-dropin.md",
    "custom_strategy.py": "custom-strategy.md",
    "threshold_schedules.py": "threshold-schedules.md",
    "multi_block_editing.py": "multi-block-editing.md",
    "streaming.py": "streaming.md",
    "batch_decoding.py": "batch-decoding.md",
    "remasking.py": "remasking.md",
}


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from threads, and oversubscribed threads on a busy CPU cost seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_recipe(name, *args, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the recipes import examples/cookbook_models.py
    monkeypatch.setattr(sys, "argv", [name, *args])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out


def numbers(line):
    return [float(x) for x in re.findall(r"\d+\.\d+", line)]


def test_s_vs_q_modes(monkeypatch, capsys):
    """The shipped model on a handful of held-out prompts: both tasks, three settings each."""
    out = run_recipe("s_vs_q_modes.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "synthetic tasks, exact match (8 prompts):" in out and "held-out code" in out
    names = ("S (speedy)", "Q (quality)", "S without T2T")
    lines = [line for line in out.splitlines() if line.strip().startswith(names)]
    assert len(lines) == 6, out
    for line in lines:
        score = float(line.split(":")[1].split()[0])
        assert 0 <= score <= 100 and "tokens/forward" in line and "forwards/row" in line
    # editing off: no edits, in both tasks
    assert all(line.rstrip().endswith("edits 0") for line in lines if "S without T2T" in line)


def test_s_vs_q_modes_hub_path(monkeypatch, capsys):
    """`--hub` runs with `from_pretrained` replaced by a tiny model and a character tokenizer."""
    import transformers

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from cookbook_models import char_tokenizer, tiny_random_model

    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    calls = []

    def fake_tokenizer(model_id, **kwargs):
        calls.append(("tokenizer", model_id, kwargs.get("trust_remote_code")))
        return tokenizer

    def fake_model(model_id, **kwargs):
        calls.append(("model", model_id, kwargs.get("trust_remote_code")))
        return tiny_random_model(tokenizer)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake_model)
    out = run_recipe(
        "s_vs_q_modes.py", "--hub", "org/model", "--tiny", monkeypatch=monkeypatch, capsys=capsys
    )
    assert calls == [("tokenizer", "org/model", True), ("model", "org/model", True)]
    assert "speedy:" in out and "quality:" in out and "per row TPF" in out


def test_pipeline_dropin(monkeypatch, capsys):
    out = run_recipe("pipeline_dropin.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "custom_generate hook (before patching) gave the same tokens: True" in out
    assert "plain GenerationConfig(do_sample=False) gives the same tokens: True" in out
    assert "pipeline == model.generate: True" in out


def test_custom_strategy(monkeypatch, capsys):
    out = run_recipe("custom_strategy.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "budget 0.1: unmask [True, False, False, False]" in out
    assert "budget 1.0: unmask [True, True, False, False]" in out
    assert "budget 3.0: unmask [True, True, True, False]" in out
    assert "reloaded from generation_config.json: ['EntropyBoundedUnmask', 'TokenEdit']" in out
    assert "'type': 'entropy_bounded'" in out


def test_threshold_schedules(monkeypatch, capsys):
    out = run_recipe("threshold_schedules.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "cosine τ_mask at steps 0-5:   [0.9, 0.841, 0.7, 0.559, 0.5, 0.5]" in out
    assert "stepwise τ_edit at blocks 0-3: [0.9, 0.5, 0.5, 0.5]" in out
    assert "linear τ_edit at blocks 0-3: [0.5, 0.25, 0.0, 0.0]" in out
    assert sum("unmasked at steps 0-3" in line for line in out.splitlines()) == 4


def test_remasking(monkeypatch, capsys):
    out = run_recipe("remasking.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if "remasks" in line}
    assert set(lines) == {
        "S",
        "S + remask 0.3",
        "S + remask 0.6",
        "S + remask current 0.3",
        "S + remask current 0.6",
    }
    assert lines["S"].rstrip().endswith("remasks 0")

    def field(name, label):
        return float(re.search(rf"{label} (\d+(\.\d+)?)", lines[name]).group(1))

    # 8 prompts x at most 3 blocks (16 tokens after the prompt, blocks of 8) x 4 steps x 2 per step
    assert 0 < field("S + remask 0.3", "remasks") <= 8 * 3 * 4 * 2
    assert 0 < field("S + remask current 0.3", "remasks") <= 8 * 3 * 4 * 2
    assert field("S + remask 0.3", "tokens/forward") < field("S", "tokens/forward")  # redrafts cost forwards


def test_multi_block_editing(monkeypatch, capsys):
    out = run_recipe("multi_block_editing.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "MBE with nothing passing its threshold == MBE off (tokens and forwards): True" in out
    window2 = next(line for line in out.splitlines() if "MBE window 2" in line)
    assert window2.rstrip().endswith("extra query positions/forward 16")


def test_streaming(monkeypatch, capsys):
    out = run_recipe("streaming.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    terminal = next(line for line in out.splitlines() if line.startswith("TerminalEditStreamer:"))
    chunks = next(line for line in out.splitlines() if line.startswith("TextIteratorStreamer chunks:"))
    final = next(line for line in out.splitlines() if "final text" in line)
    text = re.search(r"final text '([^']*)'", final).group(1)
    # the three streams carry the same completion
    assert terminal.endswith(text) and "".join(eval(chunks.split(": ", 1)[1])) == text
    assert re.search(r"events: \d+ drafts", out)


def test_batch_decoding(monkeypatch, capsys):
    out = run_recipe("batch_decoding.py", "--tiny", monkeypatch=monkeypatch, capsys=capsys)
    assert "evaluation: 10 prompts in chunks of 4" in out
    assert "row 1 alone == row 1 in its batch (text and forwards): True" in out
    assert "same seed, same rollouts: True; another seed, other rollouts: True" in out
    per_row = next(line for line in out.splitlines() if line.strip().startswith("per-row tokens/forward:"))
    assert len(numbers(per_row)) == 8


@pytest.mark.parametrize("script,page", sorted(RECIPES.items()))
def test_page_includes_its_script(script, page):
    text = (COOKBOOK / page).read_text(encoding="utf-8")
    assert f'--8<-- "examples/{script}"' in text
    assert "## Where each hyperparameter comes from" in text
    compile((EXAMPLES / script).read_text(encoding="utf-8"), script, "exec")
