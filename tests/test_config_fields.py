"""Every field of TRL's SFTConfig / GRPOConfig is honoured or refused (the allow-list of config_fields)."""

import dataclasses

import pytest

pytest.importorskip("trl")
from trl import GRPOConfig, SFTConfig

from dllm_edit.trainers import EBPOConfig, EditSFTConfig
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
