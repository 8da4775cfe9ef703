"""`dllm-edit sft --config recipe.yaml` on a tiny local model and a local JSONL file."""

import json
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("trl")

from dllm_edit.cli import main

RECIPE = Path(__file__).parents[2] / "examples" / "recipes" / "edit_sft_lora.yaml"


def test_recipe_trains_a_lora_adapter(tmp_path, tiny_model_dir):
    data = tmp_path / "train.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": "w2 w3 w4", "completion": " w4 w3 w2"}) for _ in range(8))
    )
    out = tmp_path / "out"
    status = main(
        [
            "sft",
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            str(tiny_model_dir),
            "--dataset_name",
            str(data),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "4",
            "--gradient_accumulation_steps",
            "1",
            "--block_length",
            "4",
            "--max_length",
            "32",
            "--lora_target_modules",
            "q_proj",
            "v_proj",
            "--gradient_checkpointing",
            "false",
            "--use_cpu",
            "true",
            "--disable_tqdm",
            "true",
        ]
    )
    assert status == 0
    assert (out / "adapter_config.json").is_file() and (out / "tokenizer_config.json").is_file()


def test_user_mistakes_are_one_line_errors(tmp_path, tiny_model_dir, capsys):
    assert (
        main(
            [
                "sft",
                "--model_name_or_path",
                str(tmp_path / "missing"),
                "--dataset_name",
                "d.jsonl",
                "--output_dir",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "No model at" in capsys.readouterr().err
    assert (
        main(
            [
                "sft",
                "--model_name_or_path",
                str(tiny_model_dir),
                "--dataset_name",
                str(tmp_path / "d.jsonl"),
                "--output_dir",
                str(tmp_path),
                "--use_cpu",
                "true",
            ]
        )
        == 2
    )
    assert "No dataset at" in capsys.readouterr().err
    assert main(["sft", "--output_dir", str(tmp_path), "--edit_rate_max", "3"]) == 2
    assert "edit_rate" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_ebpo_recipe_runs(tmp_path, tiny_model_dir):
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"w{2 + i} w3", "answer": "w4"}) for i in range(4)))
    out = tmp_path / "ebpo"
    status = main(
        [
            "ebpo",
            "--config",
            str(RECIPE.parent / "ebpo_lora.yaml"),
            "--model_name_or_path",
            str(tiny_model_dir),
            "--dataset_name",
            str(data),
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            "4",
            "--gradient_accumulation_steps",
            "1",
            "--max_completion_length",
            "8",
            "--block_length",
            "4",
            "--lora_target_modules",
            "q_proj",
            "v_proj",
            "--gradient_checkpointing",
            "false",
            "--use_cpu",
            "true",
            "--disable_tqdm",
            "true",
        ]
    )
    assert status == 0 and (out / "adapter_config.json").is_file()


def test_pinned_memory_is_off_without_an_accelerator(tmp_path, tiny_model_dir):
    # TrainingArguments pins by default; without an accelerator torch pins nothing and warns on every
    # DataLoader, so the CLI turns it off there (it stays on where it works)
    from dllm_edit.cli.recipe import _has_accelerator, load_recipe
    from dllm_edit.cli.sft import build_parser

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "w2", "completion": " w3"}))
    argv = ["--config", str(RECIPE), "--model_name_or_path", str(tiny_model_dir), "--dataset_name", str(data)]
    loaded = load_recipe(build_parser(), [*argv, "--output_dir", str(tmp_path / "out")], "a file")
    assert loaded.training_args.dataloader_pin_memory is _has_accelerator()


@pytest.mark.parametrize(
    "name",
    [
        "default_model_medium_two_stage",
        "default_model",
        "default_model_from_scratch",
        "default_model_m2t",
        "default_model_on_policy",
        "default_model_no_on_policy",
    ],
)
def test_shipped_model_recipes_parse(name, tmp_path):
    # the long recipes are not run in CI: their every field must still parse and validate
    from dllm_edit.cli.sft import build_parser

    recipe = RECIPE.parent / f"{name}.yaml"
    _, config, model = build_parser().parse_args_and_config(
        args=["--config", str(recipe), "--output_dir", str(tmp_path)]
    )
    # stage 2 of the shipped (medium) or the small recipe: the conversion of its AR stage
    two_stage = {
        "default_model_medium_two_stage": "runs/ar-medium-1200",
        "default_model": "runs/ar-small-1200",
    }
    if name in two_stage:
        assert model.model_name_or_path == two_stage[name]
        assert config.diffusion_attention == "block_diffusion_shifted"
    else:
        assert model.model_name_or_path == "dllm_edit:init/small"
    assert config.block_length == 32 and config.max_length % config.block_length == 0
    if name == "default_model_on_policy":  # the measured on-policy retrain of the shipped model
        assert config.on_policy_rate > 0 and config.on_policy_confidence == 0.0
    if name == "default_model_no_on_policy":  # same compute: the draft forwards' cost in extra steps
        shipped = build_parser().parse_args_and_config(
            args=[
                "--config",
                str(RECIPE.parent / "default_model_on_policy.yaml"),
                "--output_dir",
                str(tmp_path),
            ]
        )[1]
        drafted = shipped.max_steps - shipped.on_policy_warmup_steps
        assert config.max_steps == shipped.max_steps + round(drafted * shipped.on_policy_rate / 3)
        assert config.edit_loss_weight == shipped.edit_loss_weight


def test_resume_from_checkpoint_true_means_the_newest_checkpoint(tmp_path):
    from dllm_edit.cli.recipe import resolve_resume

    out = tmp_path / "out"
    for empty in (None, False, "", "false", "None", "no"):
        assert resolve_resume(empty, str(out)) is None
    with pytest.raises(ValueError, match=r"resume_from_checkpoint=.*has none"):
        resolve_resume("true", str(out))  # no output_dir yet
    for step in (2, 10, 9):
        (out / f"checkpoint-{step}").mkdir(parents=True)
    newest = str(out / "checkpoint-10")  # by step, not by name: checkpoint-9 sorts after it
    assert [resolve_resume(v, str(out)) for v in ("true", "True", "last", True, "1")] == [newest] * 5
    assert resolve_resume(str(out / "checkpoint-2"), str(out)) == str(out / "checkpoint-2")
    with pytest.raises(ValueError, match="is not a folder"):
        resolve_resume(str(out / "checkpoint-3"), str(out))


def test_a_recipe_resumes_with_true(tmp_path, tiny_model_dir, capsys):
    # the recipes document `--resume_from_checkpoint true`: it must find the newest checkpoint
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": "w2 w3", "completion": " w3 w2"}) for _ in range(8)))
    out = tmp_path / "out"
    argv = [
        "sft",
        "--model_name_or_path",
        str(tiny_model_dir),
        "--dataset_name",
        str(data),
        "--output_dir",
        str(out),
        "--per_device_train_batch_size",
        "4",
        "--block_length",
        "4",
        "--max_length",
        "16",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
        "--use_cpu",
        "true",
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
    ]
    # asking to resume an empty output_dir fails before the model is even looked for
    missing_model = [*argv, "--max_steps", "2", "--resume_from_checkpoint", "true"]
    missing_model[2] = str(tmp_path / "no-model")
    assert main(missing_model) == 2
    assert "has none" in capsys.readouterr().err
    assert main([*argv, "--max_steps", "2"]) == 0
    first = (out / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns
    assert main([*argv, "--max_steps", "3", "--resume_from_checkpoint", "true"]) == 0
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    # resumed at step 2: a fresh start would have written checkpoint-1 again
    assert (out / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns == first


@pytest.mark.parametrize(
    ("stage_one_name", "stage_two_name", "start"),
    [
        # the shipped model's recipe, and the small model's it replaced
        ("default_model_medium_ar_stage", "default_model_medium_two_stage", "dllm_edit:init/medium"),
        ("default_model_ar_stage", "default_model", "dllm_edit:init/small"),
    ],
)
def test_a_two_stage_recipes_ar_stage_is_the_checkpoint_stage_two_starts_from(
    stage_one_name, stage_two_name, start, tmp_path
):
    """Stage 1 (`benchmarks/ar_baseline.py --config STAGE_ONE.yaml`): every field of the file reaches
    TRL's SFTConfig, and its documented output folder is stage 2's starting model."""
    import runpy

    script = Path(__file__).parents[2] / "benchmarks" / "ar_baseline.py"
    load_config = runpy.run_path(str(script))["load_config"]
    stage_one = RECIPE.parent / f"{stage_one_name}.yaml"
    stage_two_file = RECIPE.parent / f"{stage_two_name}.yaml"
    fields = yaml.safe_load(stage_one.read_text())
    _, recipe, config = load_config(["--config", str(stage_one), "--output_dir", str(tmp_path)])
    assert recipe["model_name_or_path"] == start
    for name, value in fields.items():  # nothing in the file is ignored
        if name in ("model_name_or_path", "dataset_name", "dataset_train_split"):
            continue
        expected = [] if (name, value) == ("report_to", "none") else value  # TrainingArguments' spelling
        if name == "activation_checkpointing" and not hasattr(config, name):  # TRL's SFTConfig on 4.x
            name = "gradient_checkpointing"
        assert getattr(config, name) == expected, name
    assert (config.max_steps, config.seed, config.completion_only_loss) == (1200, 0, True)
    stage_two = yaml.safe_load(stage_two_file.read_text())
    stage_one_output = stage_two["model_name_or_path"]
    command = f"--config examples/recipes/{stage_one_name}.yaml --output_dir {stage_one_output}"
    assert command in stage_one.read_text()
    with pytest.raises(ValueError, match="odd count"):
        load_config(["--config", str(stage_one), "--max_steps"])


def test_the_ar_stage_trains_in_resumable_chunks(tmp_path, tiny_model_dir):
    """`benchmarks/ar_baseline.py ... --resume_from_checkpoint true` continues from the newest
    checkpoint and writes the weights of a run that went in one go; asking to resume a folder with
    no checkpoint fails before anything is loaded."""
    import runpy
    import shutil

    from safetensors.torch import load_file

    script = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "ar_baseline.py"))
    data = tmp_path / "train.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"w{2 + i % 3} w3", "completion": " w3 w2"}) for i in range(12))
    )
    recipe = tmp_path / "ar_stage.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": str(tiny_model_dir),
                "dataset_name": str(data),
                "max_length": 16,
                "learning_rate": 1e-2,
                "lr_scheduler_type": "cosine",
                "per_device_train_batch_size": 4,
                "max_steps": 3,
                "save_strategy": "steps",
                "save_steps": 1,
                "seed": 0,
                "report_to": "none",
            }
        )
    )
    flags = ["--use_cpu", "true", "--disable_tqdm", "true"]
    in_one_go, resumed = tmp_path / "one-go", tmp_path / "resumed"
    with pytest.raises(ValueError, match="has none"):
        script["load_config"](
            [
                "--config",
                str(recipe),
                "--output_dir",
                str(resumed),
                *flags,
                "--resume_from_checkpoint",
                "true",
            ]
        )
    assert script["main"](["--config", str(recipe), "--output_dir", str(in_one_go), *flags]) == 0
    # an interrupted run: only its first checkpoint was written
    shutil.copytree(in_one_go / "checkpoint-1", resumed / "checkpoint-1")
    argv = ["--config", str(recipe), "--output_dir", str(resumed), *flags, "--resume_from_checkpoint", "true"]
    assert script["load_config"](argv)[2].resume_from_checkpoint == str(resumed / "checkpoint-1")
    copied = (resumed / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns
    assert script["main"](argv) == 0
    # resumed at step 2: a fresh start would have written checkpoint-1 again
    assert (resumed / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns == copied
    first, second = (load_file(str(d / "model.safetensors")) for d in (in_one_go, resumed))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    before = load_file(str(in_one_go / "checkpoint-1" / "model.safetensors"))
    assert not all(torch.equal(before[k], first[k]) for k in first)  # the resumed steps did train


@pytest.mark.parametrize(
    "recipe",
    sorted(
        p
        for p in (Path(__file__).parents[2] / "examples" / "recipes").glob("*.yaml")
        if "ar_stage" not in p.name
    ),
    ids=lambda path: path.name,
)
def test_every_committed_recipe_parses_into_its_config(recipe):
    """Each recipe under examples/recipes/ is a valid config of its command: no unknown or refused
    field, no value out of range (the configs' `__post_init__` checks), nothing loaded or trained.
    The AR stage (read by benchmarks/ar_baseline.py) has its own test above."""
    from dllm_edit.cli import ebpo, sft

    command = ebpo if recipe.name.startswith("ebpo") else sft
    _, config, model_args = command.build_parser().parse_args_and_config(args=["--config", str(recipe)])
    assert model_args.model_name_or_path and config.output_dir
    if command is sft:  # the recipes fix the block length; EBPO reads it from the model when unset
        assert config.max_length % config.block_length == 0
