"""Every example in the docs that shows what the shipped model decodes is what it really decodes.

The examples are read from the files themselves (README, docs, docstrings), decoded with the model
shipped in the package as the text says (preset, length), and compared with what the text shows:
answers, first drafts, edits, and the step-by-step diagrams of Concepts → Decoding. A sentence that
changes its example changes what is checked; one that shows a wrong answer fails here.

How often the shipped model is right on each task (the numbers quoted next to the examples), with
the project's evaluation (`dllm_edit.evaluation.decode_prompts` / `exact_match`, as
`benchmarks/default_model.py` scores the card), the first 100 held-out prompts of each family of
`dllm_edit:default_mix` (test split), `max_new_tokens=16`, on a 2-core CPU:

| family | S preset | Q preset |
|---|---:|---:|
| `sort` | 68% | 73% |
| `reverse_digits` (`mirror:`) | 98% | 98% |
| `brackets` (`close:`) | 57% | 57% |
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
from pathlib import Path

import pytest

import dllm_edit
from dllm_edit.data.builtin import MIX_FAMILIES

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {"(": ")", "[": "]", "{": "}"}
FAMILY_OF = {"sort": "sort", "mirror": "reverse_digits", "close": "brackets"}


def read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


def right_answer(prompt: str) -> str:
    """The one right completion of a synthetic prompt (the rules of dllm_edit/data/synthetic.py)."""
    task, _, body = prompt.partition(":")
    if task == "sort":
        return "".join(sorted(body.removesuffix("=")))
    if task == "mirror":
        return body.removesuffix("=")[::-1]
    if task == "close":
        return "".join(PAIRS[c] for c in reversed(body))
    raise ValueError(f"not a synthetic prompt of the shipped model: {prompt!r}")


@pytest.fixture(scope="module")
def shipped():
    return dllm_edit.load_default()


def decode(shipped, prompt: str, mode: str = "speedy", max_new_tokens: int = 128):
    """Decode like `dllm-edit generate PROMPT --mode MODE`: the text, the output, the prompt width."""
    model, tokenizer = shipped
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]  # [1, P]
    config = dllm_edit.EditGenerationConfig.from_mode(mode, max_new_tokens=max_new_tokens, output_trace=True)
    out = dllm_edit.generate(
        model, ids, generation_config=config, tokenizer=tokenizer, return_dict_in_generate=True
    )
    completion = out.completions(ids.shape[1])[0]
    return tokenizer.decode(completion, skip_special_tokens=True), out, ids.shape[1]


def first_draft(shipped, out, width: int, length: int) -> str:
    """The completion's first `length` tokens after the first forward (masks as `_`)."""
    _, tokenizer = shipped
    record = out.trace[0]
    tokens = record.after[0, width - record.span_start : width - record.span_start + length].tolist()
    mask = tokenizer.mask_token_id
    return "".join("_" if t == mask else tokenizer.decode([t], skip_special_tokens=True) for t in tokens)


def edits_in_text(shipped, out, width: int, length: int) -> list[tuple[int, int, str, str]]:
    """(forward, position, before, after) of every edit inside the returned completion."""
    _, tokenizer = shipped
    found = []
    for forward, record in enumerate(out.trace, start=1):
        for slot in record.edit[0].nonzero().flatten().tolist():
            position = record.span_start + slot - width
            if 0 <= position < length:
                before, after = (int(record.before[0, slot]), int(record.after[0, slot]))
                found.append((forward, position, tokenizer.decode([before]), tokenizer.decode([after])))
    return found


# ---- the task table and the prompts named in the docs -----------------------------------------


def table_rows() -> list[tuple[str, str, str]]:
    """(family, prompt, completion) of the task table in dllm_edit/data/synthetic.py's docstring."""
    rows = re.findall(
        r'^\| `(\w+)`\s*\| `"([^"]+)"`\s*\| `"([^"]*)"`\s*\|', read("dllm_edit/data/synthetic.py"), re.M
    )
    assert len(rows) >= 5, "the task table of dllm_edit/data/synthetic.py moved: update this test"
    return rows


def test_task_table_shows_right_answers_the_shipped_model_decodes(shipped):
    trained = [(f, p, c) for f, p, c in table_rows() if f in MIX_FAMILIES]
    assert {f for f, _, _ in trained} == set(MIX_FAMILIES)  # an example for every task it knows
    for family, prompt, completion in table_rows():
        if family == "addition":
            assert str(eval(prompt.removesuffix("="))) == completion
        elif family == "reverse":
            assert prompt.removeprefix("rev:").removesuffix("=")[::-1] == completion
        else:
            assert right_answer(prompt) == completion, prompt
    for _, prompt, completion in trained:
        for mode in ("speedy", "quality"):
            assert decode(shipped, prompt, mode)[0] == completion, (prompt, mode)


def test_prompts_named_in_the_s_vs_q_recipe_decode_right(shipped):
    sentence = " ".join(read("docs/cookbook/s-vs-q-modes.md").split())
    prompts = re.findall(r"`((?:sort|mirror):\d+=|close:[\[\](){}]+)`", sentence)
    assert len(prompts) >= 3, "the S vs Q recipe names no synthetic prompt any more: update this test"
    for prompt in prompts:
        for mode in ("speedy", "quality"):
            assert decode(shipped, prompt, mode)[0] == right_answer(prompt), (prompt, mode)


# ---- the README and Getting started ------------------------------------------------------------


def test_readme_main_job_prints_what_it_says(shipped):
    readme = read("README.md")
    prompt = re.search(r'dllm-edit generate "([^"]+)"', readme).group(1)
    shown = re.search(r"It prints `([^`]+)`", readme).group(1)
    text, out, width = decode(shipped, prompt)  # the command's defaults: S preset, 128 new tokens
    assert prompt + text == shown
    assert text == right_answer(prompt)
    length = len(out.completions(width)[0])
    prose = " ".join(readme.split())
    drafts = re.findall(r"first forward drafts the whole answer(?: in parallel)?, `(\d+)`", prose)
    getting_started = " ".join(read("docs/getting-started.md").split())
    drafts += re.findall(r"first forward drafts the whole answer(?: in parallel)?, `(\d+)`", getting_started)
    assert drafts, "the README no longer shows the first draft: update this test"
    assert all(d == first_draft(shipped, out, width, len(text)) for d in drafts)
    listed = re.search(r"lists as `forward (\d+): token (\d+) '(.)' -> '(.)'`", prose)
    if listed:
        forward, position, before, after = listed.groups()
        assert edits_in_text(shipped, out, width, length) == [(int(forward), int(position), before, after)]
    forwards = re.search(r"in (\d+) forwards, ([\d.]+) tokens per forward", prose)
    if forwards:
        assert int(out.num_forwards[0]) == int(forwards.group(1))
        assert f"{float(out.tokens_per_forward[0]):.2f}" == forwards.group(2)


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def test_readme_python_examples_print_what_their_comments_show(shipped):
    blocks = python_blocks(read("README.md"))
    decode_block = next((b for b in blocks if "load_default()" in b and "dllm_edit.generate(" in b), None)
    assert decode_block is not None, "the README's Python decoding example moved: update this test"
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(decode_block, namespace)
    shown = re.search(r"skip_special_tokens=True\)\)\s*# (\S+)", decode_block)
    if shown:
        assert printed.getvalue().splitlines()[0] == shown.group(1)
    pipe_block = next((b for b in blocks if "pipeline(" in b and "generated_text" in b), None)
    if pipe_block is not None:
        call, comment = re.search(r"^(pipe\(.*\))\n# (\[.*\])$", pipe_block, re.M).groups()
        exec(pipe_block.replace(call, "result = " + call), namespace)
        assert namespace["result"] == eval(comment)


# ---- Concepts → Decoding: the step-by-step diagrams ------------------------------------------


def abbreviate(line: str) -> str:
    """Write a run of 3 or more equal cells at the end of a diagram line as `first … last`."""
    head, _, cells = line.partition(": ")
    parts = cells.split(" ")
    run = 1
    while run < len(parts) and parts[-run - 1] == parts[-1]:
        run += 1
    if run >= 3:
        parts = [*parts[: len(parts) - run + 1], "…", parts[-1]]
    return f"{head}: {' '.join(parts)}"


def test_decoding_diagrams_are_the_shipped_models_steps(shipped):
    _, tokenizer = shipped
    page = read("docs/concepts/decoding.md")
    blocks = [b for b in re.findall(r"```text\n(.*?)```", page, re.S) if b.startswith("block 0, step  0: ")]
    assert len(blocks) >= 2, "the diagrams of Concepts → Decoding moved: update this test"
    diagram = runpy.run_path(str(ROOT / "examples" / "trace_diagram.py"))["diagram"]
    length = int(re.search(r"trace_diagram\.py \"[^\"]+\" --max-new-tokens (\d+)", page).group(1))
    for block in blocks:
        lines = block.strip().splitlines()
        # the prompt is the cells before the first `[`: "sort : 8 7 1 ... =" -> "sort:871...="
        prompt = "".join(lines[0].partition(": ")[2].split(" [")[0].split(" "))
        _, out, _ = decode(shipped, prompt, max_new_tokens=length)
        drawn = diagram(tokenizer, out.trace, 32)
        assert [abbreviate(line) for line in drawn] == lines, prompt


# ---- drafts and edits quoted in prose -----------------------------------------------------------


def test_drafts_and_edits_quoted_in_prose(shipped):
    checked = 0
    for relative in ("docs/concepts/training.md", "dllm_edit/trainers/corruption.py"):
        prose = " ".join(read(relative).split())
        for prompt, draft in re.findall(r"`(sort:\d+=)` drafted as `(\d+)`", prose):
            text, out, width = decode(shipped, prompt)
            assert first_draft(shipped, out, width, len(draft)) == draft, (relative, prompt)
            assert text == right_answer(prompt)  # and the edits repair it
            checked += 1
    prose = " ".join(read("docs/benchmarks.md").split())
    for prompt, quoted, total in re.findall(r"\(`(sort:\d+=)`: `([^`]+)` among (\d+) edits", prose):
        text, out, width = decode(shipped, prompt)
        edits = edits_in_text(shipped, out, width, len(out.completions(width)[0]))
        listed = {(f"f{f} #{p} '{b}'->'{a}'") for f, p, b, a in edits}
        assert set(quoted.split(", ")) <= listed and len(edits) == int(total), prompt
        assert text == right_answer(prompt)
        checked += 1
    assert checked >= 2
