"""The lm-evaluation-harness model `dllm_edit`, run through lm-eval itself on local tasks (offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance

import dllm_edit
from dllm_edit.cli import main
from dllm_edit.data.synthetic import synthetic_examples
from dllm_edit.evaluation import decode_prompts, exact_match
from dllm_edit.lm_eval import DllmEditLM

ROWS = synthetic_examples("reverse_digits", 6, split="test", difficulty=1)
MAX_NEW = 8
GEN_TASK = """
task: dllm_edit_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{completion}}}}"
generation_kwargs:
  until: ["<|eos|>"]
  max_gen_toks: {max_new}
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    regexes_to_ignore: ["^\\\\s+", "\\\\s+$"]
"""
MC_TASK = """
task: dllm_edit_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{prompt}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    """A folder with the two task YAMLs and their JSONL files, written here (no download)."""
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    gen = root / "gen.jsonl"
    gen.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    mc = root / "mc.jsonl"
    with mc.open("w") as f:
        for i, r in enumerate(ROWS):
            wrong = (
                r["completion"][::-1] if r["completion"][::-1] != r["completion"] else r["completion"] + "0"
            )
            choices = [r["completion"], wrong] if i % 2 == 0 else [wrong, r["completion"]]
            f.write(json.dumps({"prompt": r["prompt"], "choices": choices, "gold": i % 2}) + "\n")
    (root / "gen.yaml").write_text(GEN_TASK.format(data=gen, max_new=MAX_NEW))
    (root / "mc.yaml").write_text(MC_TASK.format(data=mc))
    return root


def _eval_args(tasks: Path, out: Path) -> list[str]:
    return [
        "eval",
        "--tasks",
        "dllm_edit_gen,dllm_edit_mc",
        "--include_path",
        str(tasks),
        "--model_args",
        "mode=speedy,mc_num=2,seed=3",
        "--batch_size",
        "4",
        "--output_path",
        str(out),
        "--log_samples",
    ]


def _read(out: Path) -> dict:
    """The results JSON and the logged samples lm-eval wrote under `out`."""
    results = next(out.rglob("results_*.json"))
    samples = {
        p.name.split("_20")[0]: [json.loads(line) for line in p.open()] for p in out.rglob("samples_*.jsonl")
    }
    return {"results": json.loads(results.read_text()), "samples": samples}


@pytest.fixture(scope="module")
def one_process(tasks, tmp_path_factory) -> dict:
    """`dllm-edit eval` in this process."""
    out = tmp_path_factory.mktemp("one")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HUB_OFFLINE", "1")
        assert main(_eval_args(tasks, out)) == 0
    return _read(out)


def test_generation_score_equals_dllm_edit_evaluation(one_process):
    model, tokenizer = dllm_edit.load_default()
    config = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=MAX_NEW)
    texts, _, _ = decode_prompts(model, tokenizer, [r["prompt"] for r in ROWS], config, batch=4)
    ours = exact_match(texts, ROWS)
    theirs = one_process["results"]["results"]["dllm_edit_gen"]["exact_match,none"]
    assert theirs * 100 == pytest.approx(ours)
    by_doc = {s["doc_id"]: s["filtered_resps"][0] for s in one_process["samples"]["samples_dllm_edit_gen"]}
    assert [by_doc[i] for i in range(len(ROWS))] == texts


def test_results_report_tokens_per_forward_and_forwards(one_process):
    info = one_process["results"]["config"]["dllm_edit"]
    gen = info["statistics"]["generate_until"]
    assert gen["rows"] == len(ROWS) and gen["forwards"] >= 1
    assert gen["tokens_per_forward"] == pytest.approx(gen["tokens"] / gen["forwards"])
    assert info["statistics"]["loglikelihood"]["forwards"] >= 1
    assert info["generation_config"]["threshold"] == 0.5  # speedy
    acc = one_process["results"]["results"]["dllm_edit_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0


def test_two_processes_give_the_same_items_as_one(tasks, tmp_path, one_process):
    # on a machine without CUDA, accelerate's multi-process launcher starts CPU processes joined by gloo
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launcher += [
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [*launcher, "-m", "dllm_edit.cli", *_eval_args(tasks, tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    two = _read(tmp_path)
    assert two["results"]["config"]["dllm_edit"]["world_size"] == 2
    for name, rows in one_process["samples"].items():
        one = {s["doc_id"]: s["resps"] for s in rows}
        both = {s["doc_id"]: s["resps"] for s in two["samples"][name]}
        assert both == one, name
    stats = {k: v["rows"] for k, v in two["results"]["config"]["dllm_edit"]["statistics"].items()}
    assert stats["generate_until"] == len(ROWS)  # both ranks' rows, summed


def test_the_process_group_is_ended_before_exit(tmp_path):
    # `dllm-edit eval` ends the group it ran in (a gloo rank left to interpreter shutdown can abort)
    import torch.distributed as dist

    from dllm_edit.lm_eval.distributed import end_process_group

    end_process_group()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    end_process_group()
    assert not dist.is_initialized()


@pytest.fixture(scope="module")
def lm() -> DllmEditLM:
    return DllmEditLM(mode="speedy", max_new_tokens=MAX_NEW, batch_size=4, mc_num=2)


def _request(context: str, **gen_kwargs) -> Instance:
    return Instance(request_type="generate_until", doc={}, arguments=(context, gen_kwargs), idx=0)


def test_each_row_is_cut_at_its_own_stop_strings(lm):
    prompts = [r["prompt"] for r in ROWS[:3]]
    full = lm.generate_until([_request(p, until=["<|eos|>"]) for p in prompts])
    stops = [[full[0][:1]], ["<|eos|>"], [full[2][-1:], "zz"]]  # the first and last rows cut, the middle not
    cut = lm.generate_until([_request(p, until=u) for p, u in zip(prompts, stops, strict=True)])
    assert cut == ["", full[1], full[2][: full[2].index(full[2][-1:])]]


def test_loglikelihood_is_the_same_in_any_batch_and_greedy_agrees_with_the_decoder(lm):
    row = ROWS[0]
    greedy_text = lm.generate_until([_request(row["prompt"], until=["<|eos|>"])])[0]
    requests = [
        Instance(request_type="loglikelihood", doc={}, arguments=(row["prompt"], c), idx=0)
        for c in (greedy_text, row["completion"] + "9", "x")
    ]
    batch = lm.loglikelihood(requests)
    alone = [lm.loglikelihood([r])[0] for r in requests]
    assert batch == alone
    assert all(logp < 0 for logp, _ in batch)
    tokens = lm.tok_encode(row["prompt"] + greedy_text)[len(lm.tok_encode(row["prompt"])) :]
    assert batch[0][1] == (tokens[-1:] != [lm.eot_token_id])  # greedy unless the text ended at EOS early


def test_rolling_loglikelihood_and_its_limit(lm):
    text = ROWS[1]["prompt"] + ROWS[1]["completion"]
    (logp,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert logp < 0
    with pytest.raises(NotImplementedError, match="rolling windows"):
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("1" * 600,), 0)])


def test_bad_model_args_and_requests_are_refused(lm):
    with pytest.raises(TypeError, match=r"Unknown --model_args key\(s\) \['treshold'\].*'threshold'"):
        DllmEditLM(treshold=0.6)
    with pytest.raises(ValueError, match="batch_size"):
        DllmEditLM(batch_size="auto")
    with pytest.raises(ValueError, match="max_batch_size"):
        DllmEditLM(max_batch_size=64)
    with pytest.raises(ValueError, match="threshold"):
        DllmEditLM(threshold=2.0)
    with pytest.raises(ValueError, match="has no `until`"):
        lm.generate_until([_request("1+1=", max_gen_toks=4)])
    with pytest.raises(TypeError, match="Unknown generation option"):
        lm.generate_until([_request("1+1=", until=["\n"], temprature=0.5)])
    with pytest.raises(ValueError, match="chat template"):
        lm.apply_chat_template([{"role": "user", "content": "hi"}])


def test_cli_help_names_the_model_args(capsys):
    assert main(["eval", "--help"]) == 0
    assert "editing_threshold" in capsys.readouterr().out
