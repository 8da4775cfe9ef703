"""Every field of TRL's SFTConfig / GRPOConfig is honoured or refused (the allow-list of config_fields)."""

import dataclasses
import functools
import inspect
import re
from pathlib import Path

import pytest

pytest.importorskip("trl")
from transformers import TrainingArguments
from trl import GRPOConfig, SFTConfig

from dllm_edit.trainers import EBPOConfig, EBPOTrainer, EditSFTConfig, EditSFTTrainer, config_fields
from dllm_edit.trainers.config_fields import EBPO_HONOURED, EBPO_REFUSED, SFT_HONOURED, SFT_REFUSED

CASES = [
    (SFTConfig, EditSFTConfig, SFT_HONOURED, SFT_REFUSED),
    (GRPOConfig, EBPOConfig, EBPO_HONOURED, EBPO_REFUSED),
]


@pytest.mark.parametrize(("parent", "ours", "honoured", "refused"), CASES, ids=["sft", "ebpo"])
def test_every_parent_field_is_honoured_or_refused(parent, ours, honoured, refused):
    names = {f.name for f in dataclasses.fields(parent)}  # this run's transformers + TRL
    unclassified = sorted(names - honoured - set(refused))
    assert not unclassified, f"{parent.__name__} fields neither honoured nor refused: {unclassified}"
    assert not honoured & set(refused), sorted(honoured & set(refused))
    assert all(reason.strip() for reason in refused.values())


class _NotOff:
    """A value equal to no 'off' value of any field."""

    def __repr__(self):
        return "<not-off>"


@pytest.mark.parametrize(("parent", "ours", "honoured", "refused"), CASES, ids=["sft", "ebpo"])
def test_each_refused_field_raises_naming_it_before_anything_else(tmp_path, parent, ours, honoured, refused):
    present = [f.name for f in dataclasses.fields(parent) if f.name in refused]
    assert len(present) > 5
    for name in present:
        with pytest.raises(ValueError, match=rf"`{name}`=<not-off> is not supported .*Leave it at"):
            ours(output_dir=str(tmp_path), report_to="none", **{name: _NotOff()})


def test_the_fields_the_issue_names(tmp_path):
    def sft(**kw):
        return EditSFTConfig(output_dir=str(tmp_path), report_to="none", **kw)

    def ebpo(**kw):
        return EBPOConfig(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=8, **kw)

    for kw in ({"loss_type": "dft"}, {"use_liger_kernel": True}, {"label_smoothing_factor": 0.1}):
        with pytest.raises(ValueError, match=f"`{next(iter(kw))}`="):
            sft(**kw)
    for kw in (
        {"off_policy_mask_threshold": 0.5},
        {"loss_type": "grpo"},
        {"eval_strategy": "steps"},
        {"remove_unused_columns": True},
        {"log_completions_hub_repo": "me/logs"},
    ):
        with pytest.raises(ValueError, match=f"`{next(iter(kw))}`="):
            ebpo(**kw)
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        ebpo(multi_objective_aggregation="average")
    # values that mean "off" pass, whatever their spelling
    sft(loss_type="nll", label_names=["labels"], router_aux_loss_coef=0.01, shuffle_dataset=True)
    ebpo(router_aux_loss_coef=0.0, shuffle_dataset=False, multi_objective_aggregation="normalize_then_sum")


# ---- "honoured" must mean "read by code that runs" ------------------------------------------------------
# The classification test above only checks that every parent field is *listed*; a field listed as honoured
# was taken on trust. EBPOTrainer subclasses transformers' Trainer, not TRL's GRPOTrainer, so no GRPOConfig
# field (shuffle_dataset, log_completions, ...) is read unless our code reads it; and a TrainingArguments
# field read only in a Trainer method we override (get_train_dataloader reads dataloader_drop_last) is dead
# unless the override reads it. These tests find, for every honoured field, code that reads it and runs.


def _reads(source, name):
    return re.search(rf"\.{name}\b|[\"']{name}[\"']", source) is not None


def _function(attr):
    func = getattr(attr, "__func__", attr)  # staticmethod / classmethod
    return getattr(func, "fget", func)  # property


def _source(attr):
    try:
        return inspect.getsource(_function(attr))
    except (OSError, TypeError):
        return ""


def _runs(trainer, owner, name):
    """Whether `owner.name` (a library class's method) runs for `trainer`: nothing below it in the MRO
    overrides it, or every override calls `super().name(`."""
    for klass in trainer.__mro__:
        if name not in vars(klass):
            continue
        if klass is owner:
            return True
        if f"super().{name}(" not in _source(vars(klass)[name]):
            return False
    return False


@functools.cache
def _library_methods(trainer):
    """`(qualified name, source, runs)` of every transformers / TRL method in `trainer`'s MRO."""
    out = []
    for klass in trainer.__mro__:
        if klass.__module__.split(".")[0] not in ("transformers", "trl"):
            continue
        for name, attr in vars(klass).items():
            if inspect.isfunction(_function(attr)):
                out.append((f"{klass.__name__}.{name}", _source(attr), _runs(trainer, klass, name)))
    return tuple(out)


def _library_readers(trainer, field):
    """`(reader, runs)` for each transformers / TRL trainer method whose source reads `field`."""
    return [(name, runs) for name, source, runs in _library_methods(trainer) if _reads(source, field)]


def _our_source():
    """Our trainers' code, without the configs (validation is not honouring) and the allow-lists."""
    folder = Path(config_fields.__file__).parent
    skip = ("config_fields.py", "__init__.py")
    return "\n".join(
        p.read_text()
        for p in sorted(folder.glob("*.py"))
        if p.name not in skip and not p.name.endswith("_config.py")
    )


def unread_honoured_fields(trainer, parent, honoured, ours):
    """Honoured fields of `parent` that no running code reads: a TRL field neither our code (`ours`) nor a
    running library method reads, or a TrainingArguments field whose every library reader is overridden
    by ours without a read of its own. (A TrainingArguments field no Trainer method reads is read by
    TrainingArguments itself, the callbacks or accelerate, which this check cannot see.)"""
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    unread = []
    for f in dataclasses.fields(parent):
        if f.name not in honoured or _reads(ours, f.name):
            continue
        readers = _library_readers(trainer, f.name)
        if any(running for _, running in readers):
            continue
        if f.name not in base or readers:
            unread.append(f.name)
    return sorted(unread)


@pytest.mark.parametrize(
    ("trainer", "parent", "honoured"),
    [(EditSFTTrainer, SFTConfig, SFT_HONOURED), (EBPOTrainer, GRPOConfig, EBPO_HONOURED)],
    ids=["sft", "ebpo"],
)
def test_every_honoured_field_is_read_by_code_that_runs(trainer, parent, honoured):
    assert unread_honoured_fields(trainer, parent, honoured, _our_source()) == []


def test_the_read_check_catches_a_field_nobody_reads():
    from transformers import Trainer

    class Forgetful(Trainer):  # a GRPO-style trainer that reads none of GRPO's fields
        def get_train_dataloader(self):  # replaces the Trainer's, which read the dataloader_* fields
            return None

    unread = unread_honoured_fields(Forgetful, GRPOConfig, EBPO_HONOURED, inspect.getsource(Forgetful))
    assert {"shuffle_dataset", "log_completions", "num_generations", "chat_template_kwargs"} <= set(unread)
    assert "learning_rate" not in unread  # read by Trainer methods that still run


def test_shuffle_dataset_and_log_completions_change_a_training_run(tmp_path, capsys):
    """End to end through `train()`: the prompts reach the rollouts in dataset order only with
    shuffle_dataset=False, and log_completions prints the completions table."""
    from datasets import Dataset

    from tests.helpers import tiny_llama, tiny_tokenizer

    def prompts_seen(**kw):
        trainer = EBPOTrainer(
            tiny_llama("sdpa", seed=7),
            reward_funcs=lambda completions, **_: [0.0] * len(completions),
            args=EBPOConfig(
                output_dir=str(tmp_path / "out"),
                num_generations=2,
                per_device_train_batch_size=2,
                max_steps=3,
                max_completion_length=4,
                block_length=4,
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                use_cpu=True,
                disable_tqdm=True,
                **kw,
            ),
            train_dataset=Dataset.from_list([{"prompt": f"w{2 + i} w3"} for i in range(6)]),
            processing_class=tiny_tokenizer(),
        )
        seen = []
        rollouts = trainer.generate_rollouts
        trainer.generate_rollouts = lambda model, rows: (
            seen.extend(r["prompt"] for r in rows) or rollouts(model, rows)
        )
        trainer.train()
        return seen, capsys.readouterr().out

    ordered, printed = prompts_seen(shuffle_dataset=False, log_completions=True)
    shuffled, quiet = prompts_seen(shuffle_dataset=True, log_completions=False)
    assert ordered == ["w2 w3", "w3 w3", "w4 w3"]
    assert shuffled != ordered and len(shuffled) == 3
    assert "Step" in printed and "Step" not in quiet
