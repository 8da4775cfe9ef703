"""The model shipped in the package: loads offline, decodes, is documented, stays small."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

import dllm_edit
from dllm_edit.cli import main

#: The shipped model's recipe (examples/recipes/) and the flags its second stage ran with.
SHIPPED_RECIPES = ("default_model_medium_ar_stage.yaml", "default_model_medium_two_stage.yaml")
SHIPPED_STAGE_TWO_ARGS = "--seed 1 --output_dir runs/default-model-medium-two-stage-seed1"


def test_loads_offline_and_decodes(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = dllm_edit.load_default()
    assert model.config.model_type == "llama" and not model.training
    assert model.config.mask_token_id == tokenizer.mask_token_id  # found by generate without a tokenizer
    ids = tokenizer(["def fibonacci(n):", "mirror:4213="], return_tensors="pt", padding=True)
    out = dllm_edit.generate(
        model,
        ids["input_ids"],
        attention_mask=ids["attention_mask"],
        generation_config=dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=32),
    )
    assert out.sequences.shape == (2, ids["input_ids"].shape[1] + 32)
    assert bool((out.num_forwards > 0).all())


def test_shipped_weights_are_the_trained_ones():
    """Accuracy on a fixed held-out set, far above what random weights score (0%): the shipped model
    measured 75.0% exact match (Q preset, 2.26 tokens per forward) on these 60 prompts; the card
    reports 74.8% on 400. The small model it replaced measured 33.3% here, so this also catches a
    package that still ships the old weights."""
    from dllm_edit.data.builtin import builtin_rows
    from dllm_edit.evaluation import decode_prompts, exact_match

    model, tokenizer = dllm_edit.load_default()
    rows = [r for r in builtin_rows("dllm_edit:default_mix", "test") if r["kind"] == "synthetic"][:60]
    config = dllm_edit.EditGenerationConfig.from_mode("quality", max_new_tokens=16)
    texts, tpf, _ = decode_prompts(model, tokenizer, [r["prompt"] for r in rows], config, batch=60)
    assert exact_match(texts, rows) >= 60.0
    assert tpf > 1.5


def test_shipped_generation_config_is_read():
    # the folder's generation_config.json (plain, written by transformers) carries block_length 32 and the
    # mask id: generate with no config decodes with them
    model, _ = dllm_edit.load_default()
    config = dllm_edit.generation.model_generation_config(model)
    assert (config.block_length, config.mask_token_id) == (32, model.config.mask_token_id)


def test_files_are_small_and_carry_a_model_card():
    files = list(dllm_edit.DEFAULT_MODEL_DIR.iterdir())
    assert sum(f.stat().st_size for f in files) < 25 * 2**20
    card = (dllm_edit.DEFAULT_MODEL_DIR / "README.md").read_text()
    assert "Held-out results" in card and SHIPPED_RECIPES[1] in card
    assert any(f.suffix == ".safetensors" for f in files)
    # a class name transformers 4.57 and 5.x both know (5.x alone writes "TokenizersBackend")
    tokenizer_config = json.loads((dllm_edit.DEFAULT_MODEL_DIR / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_card_quotes_the_committed_recipe(monkeypatch):
    # the card shows both stages of the recipe as they are committed, with the commands that run them
    import runpy

    recipes = Path(__file__).parents[2] / "examples" / "recipes"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "default_model.py"
    card = (dllm_edit.DEFAULT_MODEL_DIR / "README.md").read_text()
    prose = " ".join(card.split())  # the card's prose is wrapped to 100 columns
    stage_one, stage_two = (recipes / name for name in SHIPPED_RECIPES)
    assert stage_one.read_text() in card and stage_two.read_text() in card
    assert f"--config examples/recipes/{SHIPPED_RECIPES[0]} --output_dir runs/ar-medium-1200" in prose
    assert f"dllm-edit sft --config examples/recipes/{SHIPPED_RECIPES[1]} {SHIPPED_STAGE_TWO_ARGS}" in prose
    # the install script's default recipe is the shipped one
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/...` puts it on the path
    assert runpy.run_path(str(script), run_name="not_main")["RECIPE_FILES"] == SHIPPED_RECIPES


def test_shipped_model_declares_the_adapter_it_was_trained_for():
    # trained in the block_diffusion_shifted form: decoding must read the output at j - 1, with the cache
    from dllm_edit.adapters import resolve_adapter

    model, _ = dllm_edit.load_default()
    adapter = resolve_adapter(model, None)
    assert adapter.name == "block_causal_shifted" and adapter.shifted_logits and adapter.supports_cache


MAIN_JOB_PROMPT = "sort:8718982948="  # the README's main job
#: Its one T2T edit, which repairs the draft (the `edits` field of `dllm-edit generate --json`).
MAIN_JOB_EDITS = [{"forward": 2, "position": 4, "from": "7", "to": "8"}]


def test_readme_main_job_shows_an_edit_that_repairs_the_draft(capsys):
    """The README's main job (`dllm-edit generate PROMPT`, nothing else) writes the right answer (the
    digits sorted) in more than one token per forward, with at least one visible T2T edit: the first
    forward drafts the whole answer, the second rewrites position 4 from the `7` it drafted to the
    `8` it lacks, the third verifies (3 forwards for 11 tokens)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert f'dllm-edit generate "{MAIN_JOB_PROMPT}"' in readme.split("## Use")[0]  # the setup command
    assert main(["generate", MAIN_JOB_PROMPT, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    digits = MAIN_JOB_PROMPT.removeprefix("sort:").removesuffix("=")
    assert result["text"] == "".join(sorted(digits))
    assert result["mode"] == "speedy" and result["tokens_per_forward"] > 1.0
    assert result["edits"] == MAIN_JOB_EDITS


def test_main_job_prompt_search_finds_the_readme_main_job(monkeypatch):
    """`benchmarks/main_job_prompt.py` decodes as `dllm-edit generate PROMPT` does: it finds the
    README's main job with the edit the test above pins, and passes over a prompt it gets wrong."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "main_job_prompt.py"
    search = runpy.run_path(str(script))["search"]
    digits = MAIN_JOB_PROMPT.removeprefix("sort:").removesuffix("=")
    rows = [
        {"prompt": MAIN_JOB_PROMPT, "completion": "".join(sorted(digits)), "family": "sort"},
        {"prompt": MAIN_JOB_PROMPT, "completion": "".join(sorted(digits))[::-1], "family": "sort"},
    ]
    fake = [{**r, "kind": "synthetic"} for r in rows] + [
        {"prompt": "def f(", "completion": "", "kind": "code"}
    ]
    monkeypatch.setitem(search.__globals__, "builtin_rows", lambda name, split: fake)
    found, tried = search(None, "sort", 10)
    assert tried == {"sort": 2} and len(found) == 1
    assert found[0]["repairs"] == MAIN_JOB_EDITS
    assert found[0]["tokens_per_forward"] > 1.0 and found[0]["text"] == rows[0]["completion"]
    with pytest.raises(ValueError, match="--family must be one of"):
        search(None, "sorting", 10)


def test_cli_defaults_to_the_shipped_model(capsys):
    assert main(["generate", "def add(a, b):", "--max-new-tokens", "32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["num_forwards"] >= 1 and isinstance(result["text"], str)
    assert torch.isfinite(torch.tensor(result["tokens_per_forward"]))


def test_forward_budget_accounts_for_every_forward(monkeypatch, capsys):
    """`benchmarks/forward_budget.py` sorts each forward of a traced decode into exactly one kind."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "forward_budget.py"
    namespace = runpy.run_path(str(script))
    model, tokenizer = dllm_edit.load_default()
    for preset in namespace["PRESETS"].values():
        counts = namespace["budget"](model, tokenizer, "sort:9431=", preset, 16)
        kinds = sum(counts[kind] for kind in namespace["KINDS"])
        assert kinds == counts["forwards"] >= counts["floor"] >= 2
        assert counts["verify, first"] == 1 and counts["draft, kept"] >= 1  # one block, verified once
        # a forward after the first verification is bought by an edit, so there are no more than edits
        assert counts["verify, after an edit"] <= counts["edits"]
        assert len(counts["kept_probs"]) >= 1 and all(0.0 <= p <= 1.0 for p in counts["kept_probs"])
        # the ceiling is the same row at its floor: no decode of it has more tokens per forward
        ceiling, tpf = namespace["ceiling_tpf"]([counts]), namespace["mean_tpf"]([counts])
        assert ceiling == counts["kept"] / counts["floor"] >= tpf
    argv = ["forward_budget.py", "--synthetic", "3", "--code", "1", "--code-tokens", "1", "--by-length"]
    monkeypatch.setattr("sys.argv", argv)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count("| synthetic |") == 3 and "no preset can reach more than" in out
    by_length = [line for line in out.splitlines() if line.startswith("| all |")]
    assert by_length and sum(int(line.split("|")[3]) for line in by_length) == 3  # every row counted once
    code_rows = [line for line in out.splitlines() if line.startswith("| code |")]
    # one new token allowed: every code row returns exactly one (64, the default, gives a function body)
    assert len(code_rows) == 3 and all(float(line.split("|")[8]) == 1.0 for line in code_rows)
    monkeypatch.setattr("sys.argv", ["forward_budget.py", "--code-tokens", "0"])
    with pytest.raises(SystemExit):
        runpy.run_path(str(script), run_name="__main__")
    assert "--code-tokens must be >= 1, got 0" in capsys.readouterr().err


def test_forward_cost_table(monkeypatch, capsys):
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "forward_cost.py"
    argv = ["forward_cost.py", "--repeats", "1", "--batches", "1", "--widths", "1", "4", "--prefix", "8"]
    monkeypatch.setattr("sys.argv", argv)
    runpy.run_path(str(script), run_name="__main__")
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 2 and rows[0].split("|")[4].strip() == "1.0"  # width 1 is its own unit


def test_verify_confidence_scores_every_completion_position(monkeypatch, capsys):
    """`benchmarks/verify_confidence.py` scores each completion position of the first block once."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "verify_confidence.py"
    namespace = runpy.run_path(str(script))
    model, tokenizer = dllm_edit.load_default()
    config = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=32)
    row = {"prompt": "sort:9431=", "completion": "1349"}
    traced = namespace["decode_traced"](model, tokenizer, row, config)
    scores = namespace["verify_step_scores"](traced)
    assert len(scores) == 5  # four digits and EOS, all inside the first block
    assert all(0.0 <= prob <= 1.0 for _, prob, _ in scores)
    fates = namespace["draft_fates"](traced)
    assert len(fates) == 5  # every reference position is drafted once
    final = traced.out.sequences[0, traced.width : traced.width + 5].tolist()
    assert [f for _, _, f in fates] == [a == b for a, b in zip(final, traced.target, strict=True)]
    monkeypatch.setattr("sys.argv", ["verify_confidence.py", "--prompts", "2", "--families", "sort"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "| wrong |" in out and "| right |" in out and "rewritten (%)" in out
    assert "| all but the position |" in out


def test_context_use_scores_the_answer_tokens_only():
    """`context_use`: the answer's own positions are scored (never the EOS tail), each view apart."""
    import runpy

    import torch

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "verify_confidence.py"
    namespace = runpy.run_path(str(script))
    model, tokenizer = dllm_edit.load_default()
    rows = [{"prompt": "sort:9431=", "completion": "1349"}, {"prompt": "close:([", "completion": "])"}]
    use = namespace["context_use"](model, tokenizer, rows, torch.Generator().manual_seed(0))
    assert list(use) == list(namespace["CONTEXT_VIEWS"])
    assert use["nothing"][0] == use["all but the position"][0] == 4 + 2  # digits and brackets, no EOS
    assert 0 <= use["half"][0] <= 6
    assert all(0.0 <= right <= 100.0 for count, right in use.values() if count)
    again = namespace["context_use"](model, tokenizer, rows, torch.Generator().manual_seed(0))
    assert again == use  # the half view is drawn from the generator alone


def test_traced_batches_follow_each_row_as_if_decoded_alone():
    """`decode_traced_batch`: left padding and block shifts do not move a row's drafts or texts."""
    import runpy

    from dllm_edit.evaluation import decode_prompts

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "verify_confidence.py"
    namespace = runpy.run_path(str(script))
    model, tokenizer = dllm_edit.load_default()
    config = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=32)
    digits = "8273645190" * 4  # a prompt longer than one block: its row is shifted by whole blocks
    rows = [
        {"prompt": "sort:9431=", "completion": "1349"},
        {"prompt": f"sort:{digits}=", "completion": "".join(sorted(digits))},
        {"prompt": "close:([", "completion": "])"},
    ]
    assert len({len(tokenizer(r["prompt"])["input_ids"]) for r in rows}) == 3  # padding differs per row
    batched = namespace["decode_traced_batch"](model, tokenizer, rows, config, batch=3)
    alone = [namespace["decode_traced"](model, tokenizer, row, config) for row in rows]
    assert [t.width for t in batched] == [batched[0].width] * 3 and batched[1].start > 32
    for b, a in zip(batched, alone, strict=True):
        assert namespace["draft_fates"](b) == namespace["draft_fates"](a)
        assert namespace["verify_step_scores"](b) == namespace["verify_step_scores"](a)
        assert namespace["completion_text"](b, tokenizer) == namespace["completion_text"](a, tokenizer)
    texts, _, _ = decode_prompts(model, tokenizer, [r["prompt"] for r in rows], config, 3)
    assert texts == [namespace["completion_text"](t, tokenizer) for t in batched]


def test_editing_ablation_table(monkeypatch, capsys):
    """`benchmarks/editing_ablation.py` prints one row per (model, setting); editing off never rewrites."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "editing_ablation.py"
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/...` puts it on the path
    argv = ["editing_ablation.py", "--model", f"shipped={dllm_edit.DEFAULT_MODEL_DIR}"]
    monkeypatch.setattr("sys.argv", [*argv, "--synthetic", "3", "--code", "1"])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| shipped")]
    assert [r[2].strip() for r in rows] == ["S", "S, editing off", "S + remasking"]
    assert rows[1][7].strip() in ("0.0", "nan")  # no edit can rewrite a draft with editing off
    # 3 prompts, families interleaved in the test split: one of each, each 0 or 100
    families = [part.split() for part in rows[0][10].split("·")]
    assert [f for f, _ in families] == ["brackets", "reverse_digits", "sort"]
    assert all(score in ("0", "100") for _, score in families)


def test_editing_ablation_without_functions(monkeypatch, capsys):
    """`--code 0` leaves the code columns empty instead of failing on no functions."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "editing_ablation.py"
    monkeypatch.syspath_prepend(str(script.parent))
    argv = ["editing_ablation.py", "--model", f"shipped={dllm_edit.DEFAULT_MODEL_DIR}"]
    monkeypatch.setattr("sys.argv", [*argv, "--synthetic", "2", "--code", "0"])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| shipped")]
    assert len(rows) == 3 and all(r[5].strip() == r[6].strip() == "—" for r in rows)


def test_editing_ablation_bounds(monkeypatch, capsys):
    """`--bounds` adds Q and one forward per block; one forward writes a block per forward, never edits."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "editing_ablation.py"
    monkeypatch.syspath_prepend(str(script.parent))
    argv = ["editing_ablation.py", "--model", f"shipped={dllm_edit.DEFAULT_MODEL_DIR}", "--bounds"]
    monkeypatch.setattr("sys.argv", [*argv, "--synthetic", "2", "--code", "0"])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| shipped")]
    assert [r[2].strip() for r in rows][3:] == ["Q", "one forward per block"]
    one_forward = rows[4]
    assert one_forward[7].strip() in ("0.0", "nan")  # editing off: no draft is rewritten
    # every completion token of a block comes from its first forward (the answers fit one block)
    assert float(one_forward[4]) >= float(rows[3][4])


def test_default_model_install_writes_a_card_quoting_the_recipes_it_names(monkeypatch, capsys, tmp_path):
    """`benchmarks/default_model.py CKPT --install --target DIR --recipes A B --stage-two-args ...`
    writes a model that loads, whose card quotes the two recipe files as committed and the second
    stage's command with its flags; a recipe that is not committed is refused before any loading."""
    import runpy

    from transformers import AutoModelForCausalLM, AutoTokenizer

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "default_model.py"
    recipes = script.parents[1] / "examples" / "recipes"
    monkeypatch.syspath_prepend(str(script.parent))
    namespace = runpy.run_path(str(script))
    argv = ["default_model.py", "no-such-checkpoint", "--recipes", "default_model.yaml", "nope.yaml"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit):
        namespace["main"]()
    assert "nope.yaml" in capsys.readouterr().err
    model, tokenizer = dllm_edit.load_default()
    edits = {"wrong_drafts": 10, "rewritten": 30.0, "repaired": 20.0, "broken": 1.0, "right_drafts": 90}
    rows = [("Q", 70.0, 2.4, 55.0, 0.5), ("S", 69.0, 3.0, 54.0, 0.6), ("M2T only", 63.0, 3.1, 58.0, 0.7)]
    evaluation = namespace["Evaluation"](rows, 4.5, edits, 400, 100)
    names = SHIPPED_RECIPES
    target, trained = tmp_path / "installed", tmp_path / "trained"
    model.save_pretrained(trained)  # what training wrote: the card records its file's sha256
    checkpoint = str(trained)
    namespace["install"](
        model, tokenizer, evaluation, target, checkpoint=checkpoint, recipes=names, stage_two_args="--seed 1"
    )
    card = (target / "README.md").read_text()
    assert all((recipes / name).read_text() in card for name in names)  # code blocks, unwrapped
    prose = " ".join(card.split())  # the card's prose is wrapped to 100 columns
    digest = hashlib.sha256((trained / "model.safetensors").read_bytes()).hexdigest()
    assert f"have sha256 `{digest}`" in prose
    assert f"dllm-edit sft --config examples/recipes/{names[1]} --seed 1`" in prose
    assert f"--config examples/recipes/{names[0]} --output_dir runs/ar-medium-1200" in prose
    assert "| S | 69.0 | 3.00 | 54.0 | 0.60 |" in card and "repaired 20.0%" in prose
    assert max(len(line) for line in card.split("```")[0].splitlines()) <= 100
    assert json.loads((target / "eval.json").read_text())["rows"][1][0] == "S"
    reloaded = AutoModelForCausalLM.from_pretrained(target)
    assert json.loads((target / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "PreTrainedTokenizerFast"  # loads on transformers 4.57 too
    )
    assert AutoTokenizer.from_pretrained(target).mask_token_id == tokenizer.mask_token_id
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
    assert dllm_edit.EditGenerationConfig.from_pretrained(target).block_length == 32
    # a folder that is not a model is never replaced (the install deletes what it replaces)
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "todo.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a model folder"):
        namespace["install"](model, tokenizer, evaluation, keep, checkpoint="runs/x")
    assert (keep / "todo.txt").read_text() == "mine"
    monkeypatch.setattr(
        "sys.argv", ["default_model.py", "no-such-checkpoint", "--install", "--target", str(keep)]
    )
    with pytest.raises(SystemExit):
        namespace["main"]()
    assert "not a model folder" in capsys.readouterr().err
    # the card's options without --install would be ignored: refused instead
    monkeypatch.setattr(
        "sys.argv", ["default_model.py", "no-such-checkpoint", "--stage-two-args", "--seed 1"]
    )
    with pytest.raises(SystemExit):
        namespace["main"]()
    assert "--stage-two-args only shape the installed model card" in capsys.readouterr().err
