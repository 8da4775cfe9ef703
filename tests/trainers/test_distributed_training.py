"""Two data-parallel processes (gloo on CPU) train exactly as one process with their global batch.

One process with a per-device batch of 2N and two processes with N each (DDP) must log the same
losses and end with the same weights: the corruption noise is keyed on the example
(`dllm_edit.trainers.example_noise`), the distributed sampler gives the two processes the halves of
the one-process batch, EditSFT normalises by the tokens of the global batch and EBPO by its ratio
groups, and EBPO's rewards are gathered before the advantages. The training script is
`tests/trainers/distributed_train.py`, started with `python -m torch.distributed.run`. FSDP is not tested
here: accelerate (1.15) applies an FSDP plugin only on accelerator devices and wraps the model in
DDP on CPU (see docs/how-to/scaling-out.md).
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

SCRIPT = Path(__file__).parent / "distributed_train.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(tmp_path, name, kind, batch, processes=1):
    out = tmp_path / f"{name}.pt"
    script = [str(SCRIPT), kind, "--per-device-batch", str(batch), "--out", str(out)]
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={processes}"]
        launcher += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        launcher + script, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(out)


def _assert_same_training(one, two):
    steps = [h["step"] for h in one["logs"]]
    assert steps == [h["step"] for h in two["logs"]] == [1, 2, 3]
    for a, b in zip(one["logs"], two["logs"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6), (a, b)
    assert one["state"].keys() == two["state"].keys()
    assert one["state"]
    for key, value in one["state"].items():
        torch.testing.assert_close(two["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)


@pytest.fixture(scope="module")
def sft_one_process(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("sft1"), "one", "sft", batch=8)


def test_edit_sft_two_processes_equal_one_process(tmp_path, sft_one_process):
    two = _run(tmp_path, "two", "sft", batch=4, processes=2)
    assert two["wrapper"] == "DistributedDataParallel"
    _assert_same_training(sft_one_process, two)
    assert sft_one_process["logs"][0]["drafting_nll"] == pytest.approx(
        two["logs"][0]["drafting_nll"], rel=1e-4
    )
    assert two["logs"][-1]["num_tokens"] == sft_one_process["logs"][-1]["num_tokens"]  # gathered, not local


def test_ebpo_two_processes_equal_one_process(tmp_path):
    one = _run(tmp_path, "one", "ebpo", batch=16)
    two = _run(tmp_path, "two", "ebpo", batch=8, processes=2)
    _assert_same_training(one, two)
    first = (one["logs"][0], two["logs"][0])
    for metric in ("reward", "reward_std", "completions/mean_length", "rollout/num_forwards"):
        assert first[1][metric] == pytest.approx(first[0][metric], rel=1e-5), metric  # global-batch metrics
    assert one["logs"][-1]["ratio/mean"] != 1.0  # the reused rollouts moved the ratio: the clip path ran


@pytest.mark.parametrize(
    ("name", "kind"), [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero2", "DEEPSPEED"), ("zero3", "DEEPSPEED")]
)
def test_accelerate_recipe_configs_load(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    path = Path(__file__).parents[2] / "examples" / "recipes" / "accelerate" / f"{name}.yaml"
    config = load_config_from_file(str(path))
    assert config.distributed_type.name == kind and config.mixed_precision == "bf16"
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1])
