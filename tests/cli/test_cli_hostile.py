"""Every subcommand of `dllm-edit` driven with hostile arguments: a non-zero exit, no traceback, and a
message that names the argument, before any model is loaded or any work starts.

Hypothesis draws command lines that mix harmless options with at least one bad setting (in any
order) and calls the CLI's `main(argv)` in process; a few subprocess runs check the real exit status
and `--debug`.
"""

import contextlib
import io
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dllm_edit.cli import main

NO_DIR = "/nonexistent-dllm-edit/sub"  # a folder that does not exist
UNWRITABLE = "/proc/dllm-edit-out"  # /proc accepts no files, even for root

# (argument words, names any of which the message must contain)
DECODE_BAD = [
    (["--max-new-tokens", "0"], ["--max-new-tokens"]),
    (["--max-new-tokens", "many"], ["--max-new-tokens"]),
    (["--max-new-tokens", "-5"], ["--max-new-tokens"]),
    (["--block-length", "0"], ["--block-length"]),
    (["--block-length", "2.5"], ["--block-length"]),
    (["--temperature", "-1"], ["--temperature"]),
    (["--temperature", "nan"], ["--temperature"]),
    (["--seed", "x"], ["--seed"]),
    (["--device", "banana"], ["--device"]),
    (["--device", "cuda:99"], ["--device"]),
    (["--device", "meta"], ["--device"]),
    (["--dtype", "banana"], ["--dtype"]),
    (["--dtype", "int8"], ["--dtype"]),
    (["--model", NO_DIR], ["--model"]),
    (["--bogus"], ["--bogus"]),
    (["--mod", "quality"], ["--mod"]),
    (["--max-new", "8"], ["--max-new"]),
]
GENERATE_BAD = [
    *DECODE_BAD,
    (["--mode", "fast"], ["--mode"]),
    (["--threshold", "1.5"], ["threshold"]),
    (["--threshold", "high"], ["--threshold"]),
    (["--editing-threshold", "2"], ["editing_threshold"]),
    (["--config", f"{NO_DIR}/settings.yaml"], ["--config"]),
    (["--save-config", f"{UNWRITABLE}.yaml"], ["--save-config"]),
    (["--save-config", "settings.txt"], ["--save-config"]),
    (["--step-delay", "-1"], ["--step-delay"]),
    (["--trace", f"{NO_DIR}/trace.json"], ["--trace"]),
    (["--trace-html", UNWRITABLE], ["--trace-html"]),
]
COMPARE_BAD = [
    *DECODE_BAD,
    (["--mode", "quality"], ["--mode"]),
    (["--threshold", "0.5"], ["--threshold"]),
]
# harmless options never repeat a bad one's option with a good value (argparse keeps the last value)
HARMLESS_COMPARE = [["--json"], ["--chat"], ["--multi-block-edit"]]
HARMLESS_GENERATE = [*HARMLESS_COMPARE, ["--no-live"]]

BENCH_BAD = [
    (["--synthetic", "-1"], ["--synthetic"]),
    (["--code", "x"], ["--code"]),
    (["--thresholds", "1.5"], ["--thresholds"]),
    (["--json", f"{UNWRITABLE}.json"], ["--json"]),
    (["--json", NO_DIR], ["--json"]),
    (["--plot", "tradeoff.banana"], ["--plot"]),
    (["--plot", f"{NO_DIR}/tradeoff.png"], ["--plot"]),
    (["--model", "nameless"], ["--model"]),
    (["--ar-model", "x="], ["--ar-model"]),
    (["--strategies", "no_such_algorithm"], ["--strategies"]),
    (["--repeats", "many"], ["--repeats"]),
    (["--bogus", "1"], ["--bogus"]),
    (["--thr", "0.5"], ["--thr"]),
]
HARMLESS_BENCH = [["--quick"], ["--no-mbe"], ["--trust-remote-code"]]

EXPORT_BAD = [
    (["--mode", "llada"], ["--mode"]),
    (["--set", "treshold=0.5"], ["treshold"]),
    (["--set", "threshold"], ["--set"]),
    (["--set", "threshold=7"], ["threshold"]),
    (["--out", UNWRITABLE], ["--out"]),
    (["--max-running-requests", "0"], ["--max-running-requests"]),
    (["--tp-size", "two"], ["--tp-size"]),
    (["--bogus"], ["--bogus"]),
    (["--mod", "speedy"], ["--mod"]),
]
HARMLESS_EXPORT = [["--allow-approximate"], ["--no-trust-remote-code"], ["--tp-size", "2"]]

TRAINER_BAD = [
    (["--learning_rate", "banana"], ["--learning_rate"]),
    (["--lerning_rate", "1e-4"], ["--lerning_rate"]),
    (["--max_steps", "many"], ["--max_steps"]),
    (["--use_cpu", "banana"], ["--use_cpu"]),
    (["--output_dir", UNWRITABLE], ["output_dir"]),
    (["--config", f"{NO_DIR}/recipe.yaml"], ["--config"]),
    (["--model_name_or_path", NO_DIR, "--dataset_name", "d.jsonl"], ["No model at"]),
    (["--bogus", "1"], ["--bogus"]),
]
SFT_BAD = [*TRAINER_BAD, (["--edit_rate_max", "3"], ["edit_rate"]), (["--packing", "true"], ["packing"])]
EBPO_BAD = [
    *TRAINER_BAD,
    (["--ratio_level", "banana"], ["--ratio_level"]),
    (["--loss_type", "grpo"], ["loss_type"]),
    (["--num_generations", "3"], ["num_generations"]),
]
HARMLESS_TRAINER = [["--report_to", "none"], ["--use_cpu", "true"], ["--max_steps", "1"]]


def run_cli(argv):
    """`main(argv)`'s status and what it printed (stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue() + err.getvalue()


def assert_refused(argv, names):
    status, printed = run_cli(argv)
    assert status == 2, (argv, status, printed[-500:])
    assert "Traceback" not in printed, argv
    message = printed.strip().splitlines()[-1] if printed.strip() else ""
    assert any(name in printed for name in names), (argv, names, message)


def command_lines(bad, harmless):
    """At least one bad setting, some harmless options, in any order; the names the message may cite."""
    return st.tuples(
        st.lists(st.sampled_from(bad), min_size=1, max_size=3),
        st.lists(st.sampled_from(harmless), max_size=3),
    ).flatmap(
        lambda picked: st.permutations(picked[0] + [(words, []) for words in picked[1]]).map(
            lambda items: (
                [w for words, _ in items for w in words],
                [n for words, names in items for n in names],
            )
        )
    )


QUICK = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative outputs (settings.txt) land here
    monkeypatch.delenv("DLLM_EDIT_DEBUG", raising=False)


@QUICK
@given(command_lines(GENERATE_BAD, HARMLESS_GENERATE), st.sampled_from(["sort:3141=", "w2 w3"]))
def test_generate(case, prompt):
    words, names = case
    assert_refused(["generate", prompt, *words], names)


@QUICK
@given(command_lines(COMPARE_BAD, HARMLESS_COMPARE))
def test_compare(case):
    words, names = case
    assert_refused(["compare", "sort:3141=", *words], names)


@QUICK
@given(command_lines(BENCH_BAD, HARMLESS_BENCH))
def test_bench(case):
    words, names = case
    assert_refused(["bench", *words], names)


@QUICK
@given(command_lines(EXPORT_BAD, HARMLESS_EXPORT))
def test_export(case):
    words, names = case
    required = [
        "--model",
        "inclusionAI/LLaDA2.1-mini",
        "--architecture",
        "LLaDA2MoeModelLM",
        "--out",
        "served",
    ]
    assert_refused(["export", "sglang", *required, *words], names)


@pytest.mark.parametrize(("command", "bad"), [("sft", SFT_BAD), ("ebpo", EBPO_BAD)])
def test_trainers(command, bad):
    pytest.importorskip("trl")

    @settings(QUICK, max_examples=min(20, settings().max_examples))
    @given(command_lines(bad, HARMLESS_TRAINER))
    def check(case):
        words, names = case
        assert_refused([command, *words], names)

    check()


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["generate"], ["prompt"]),  # no prompt
        (["generate", ""], ["prompt"]),  # an empty one
        (["compare", "", "--json"], ["prompt"]),
        (["export"], ["sglang"]),  # no target
        (["export", "vllm"], ["vllm", "sglang"]),
        (["export", "sglang", "--out", "x"], ["--model"]),  # a required option left out
        (["frobnicate"], ["frobnicate"]),
        (["genrate", "x"], ["genrate", "'generate'"]),
        (["replay", f"{NO_DIR}/trace.json"], [f"{NO_DIR}/trace.json"]),
        (["sft", "--config"], ["--config"]),
        (["ebpo", "--config=" + NO_DIR], ["--config"]),
    ],
)
def test_other_mistakes(argv, names):
    if argv[0] in ("sft", "ebpo"):
        pytest.importorskip("trl")
    status, printed = run_cli(argv)
    assert status == 2 and "Traceback" not in printed
    assert any(name in printed for name in names), printed


def test_recipe_mistakes(tmp_path):
    pytest.importorskip("trl")
    typo = tmp_path / "typo.yaml"
    typo.write_text("lerning_rate: 1e-4\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_name_or_path: [unclosed\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    for recipe, names in ((typo, ["lerning_rate", "'learning_rate'"]), (broken, ["not valid YAML"])):
        assert_refused(["sft", "--config", str(recipe)], names)
    assert_refused(["ebpo", "--config", str(listed)], ["mapping"])


def test_decode_mistakes_found_with_the_model(tiny_model_dir, tmp_path):
    """Settings that only the model can judge: still one line, naming the setting."""
    import json

    mask = tmp_path / "mask.yaml"
    mask.write_text("mask_token_id: 5000\nmax_new_tokens: 4\nblock_length: 4\n")
    args = ["generate", "w2", "--model", str(tiny_model_dir), "--no-live"]
    assert_refused([*args, "--config", str(mask)], ["mask_token_id"])
    assert_refused([*args, "--block-length", "1000"], ["block_length"])
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for file in tiny_model_dir.iterdir():
        (corrupt / file.name).write_bytes(file.read_bytes())
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:300])
    assert_refused(["generate", "w2", "--model", str(corrupt)], ["--model", "corrupt"])
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((tiny_model_dir / name).read_bytes())
    assert_refused(["generate", "w2", "--model", str(no_tokenizer)], ["tokenizer"])
    (tmp_path / "bad-config").mkdir()
    (tmp_path / "bad-config" / "config.json").write_text(json.dumps({"model_type": "no-such-type"}))
    assert_refused(["generate", "w2", "--model", str(tmp_path / "bad-config")], ["--model"])


def test_eval_passes_mistakes_to_lm_eval_without_a_traceback():
    pytest.importorskip("lm_eval")
    status, printed = run_cli(["eval", "--bogus-option"])
    assert status == 2 and "Traceback" not in printed and "--bogus-option" in printed


def test_debug_shows_the_error_itself(monkeypatch):
    with pytest.raises(ValueError, match="--dtype 'banana'"):
        main(["--debug", "generate", "w2", "--dtype", "banana"])
    with pytest.raises(ValueError, match="--dtype 'banana'"):
        main(["generate", "w2", "--dtype", "banana", "--debug"])
    monkeypatch.setenv("DLLM_EDIT_DEBUG", "1")
    with pytest.raises(ValueError, match="--dtype 'banana'"):
        main(["generate", "w2", "--dtype", "banana"])
    monkeypatch.setenv("DLLM_EDIT_DEBUG", "0")
    assert run_cli(["generate", "w2", "--dtype", "banana"])[0] == 2


def test_unexpected_errors_are_one_line_with_status_1(monkeypatch):
    import dllm_edit.cli as cli

    def broken(argv):
        raise RuntimeError("something inside broke\nsecond line")

    monkeypatch.setitem(cli.COMMANDS, "generate", (broken, "x"))
    status, printed = run_cli(["generate", "w2"])
    assert status == 1 and "Traceback" not in printed
    assert printed.strip() == (
        "dllm-edit generate: error: unexpected RuntimeError: something inside broke second line (rerun with "
        "--debug for the traceback; please report it if the input is right)"
    )


def test_version_and_usage():
    status, printed = run_cli(["--version"])
    from dllm_edit import __version__

    assert status == 0 and printed.strip() == f"dllm-edit {__version__}"
    assert run_cli([])[0] == 2 and run_cli(["--help"])[0] == 0


@pytest.mark.parametrize("command", ["sft", "ebpo"])
def test_trainer_help_is_short_and_starts_with_the_recipe(command):
    pytest.importorskip("trl")
    status, short = run_cli([command, "--help"])
    assert status == 0 and short.splitlines()[0].startswith(
        f"usage: dllm-edit {command} --config RECIPE.yaml"
    )
    assert short.index("--config RECIPE.yaml   the recipe") < short.index("--model_name_or_path")
    assert len(short.splitlines()) < 80 and max(len(line) for line in short.splitlines()) <= 80
    assert "--help-all" in short.splitlines()[-2] + short.splitlines()[-1]
    status, full = run_cli([command, "--help-all"])
    assert status == 0 and len(full.splitlines()) > 3 * len(short.splitlines())
    assert "--adam_beta1" in full and "--adam_beta1" not in short


def test_every_parser_refuses_prefixes():
    """`--mode` must never be read as `--model` (argparse's prefix matching is off everywhere)."""
    from dllm_edit.cli import bench, decode, export, replay

    parsers = [decode.build_generate_parser(), decode.build_compare_parser(), bench.build_parser()]
    parsers += [export.build_parser(), replay.build_parser()]
    if "trl" in sys.modules or _has("trl"):
        from dllm_edit.cli import ebpo, sft

        parsers += [sft.build_parser(), ebpo.build_parser()]
    assert all(parser.allow_abbrev is False for parser in parsers)


def _has(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _cli(*argv, env=None):
    return subprocess.run(
        [sys.executable, "-m", "dllm_edit.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_exit_status_of_the_real_command():
    refused = _cli("generate", "w2", "--dtype", "banana")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("dllm-edit generate: error: --dtype 'banana'")
    debug = _cli("--debug", "generate", "w2", "--dtype", "banana")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("dllm-edit ")


def test_a_closed_pipe_ends_quietly():
    # `dllm-edit sft --help-all | head -1`: the reader goes away; no traceback, the shell's 141. The
    # pipe is closed before the command (seconds of imports) writes, so the write always fails.
    process = subprocess.Popen(
        [sys.executable, "-m", "dllm_edit.cli", "sft", "--help-all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()
    _, err = process.communicate(timeout=300)
    assert process.returncode == 141 and "Traceback" not in err and "error" not in err, err
