"""transformers 5.25's names, cleanly: no deprecation warning comes from dllm_edit on the newest
release (configs, native models with a cache, cached decoding, activation checkpointing), and the
new names work on transformers 4.57 too."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("trl")

import dllm_edit
from dllm_edit.trainers import EBPOConfig, EditSFTConfig
from dllm_edit.trainers.checkpointing_names import TRANSFORMERS_HAS_NEW_NAMES
from tests.helpers import MASK
from tests.models.test_caches import native
from tests.models.test_loading import FAMILIES

DEPRECATIONS = (DeprecationWarning, FutureWarning, PendingDeprecationWarning)

# the cached adapters each family takes (its detected adapter first)
CACHED_ADAPTERS = {
    "llada": ["bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"],
    "lladamoe": ["bidirectional", "bidirectional_approx_cache", "bidirectional_dual_cache"],
    "Dream": ["shifted", "block_causal_shifted"],
    "llada2_moe": ["block_causal"],
}


def deprecations(record: list[warnings.WarningMessage]) -> list[str]:
    return [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in record
        if issubclass(w.category, DEPRECATIONS)
    ]


@pytest.mark.parametrize("config_class", [EditSFTConfig, EBPOConfig])
@pytest.mark.parametrize(
    "given", [{}, {"activation_checkpointing": False}, {"activation_checkpointing": True}]
)
def test_trainer_configs_take_the_new_name_without_a_warning(config_class, given, tmp_path):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        config = config_class(output_dir=str(tmp_path), use_cpu=True, **given)
    assert not deprecations(record)
    expected = given.get("activation_checkpointing", True)  # TRL's default: on
    assert config.activation_checkpointing is expected and config.gradient_checkpointing is expected


@pytest.mark.parametrize("config_class", [EditSFTConfig, EBPOConfig])
def test_the_new_kwargs_name_reaches_the_trainer_on_every_release(config_class, tmp_path):
    kwargs = {"use_reentrant": False}
    config = config_class(output_dir=str(tmp_path), use_cpu=True, activation_checkpointing_kwargs=kwargs)
    assert config.activation_checkpointing_kwargs == kwargs and config.gradient_checkpointing_kwargs == kwargs


@pytest.mark.skipif(
    not TRANSFORMERS_HAS_NEW_NAMES, reason="transformers 4.x has no `activation_checkpointing`"
)
def test_the_old_name_is_the_caller_s_and_still_honoured(tmp_path):
    with pytest.warns(FutureWarning, match="gradient_checkpointing"):  # transformers' own warning
        config = EditSFTConfig(output_dir=str(tmp_path), use_cpu=True, gradient_checkpointing=False)
    assert config.activation_checkpointing is False


@pytest.mark.parametrize("family", list(FAMILIES))
def test_native_models_and_cached_decoding_warn_nothing(family):
    model = native(family)
    ids = torch.tensor([[5, 9, 3, 7]])  # [B, P]
    config = dllm_edit.EditGenerationConfig(
        max_new_tokens=4, block_length=4, mask_token_id=MASK, threshold=0.5
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for adapter in CACHED_ADAPTERS[family]:
            dllm_edit.generate(model, ids, generation_config=config, adapter=adapter)
        model.train()
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        model(ids).logits.sum().backward()
    assert not deprecations(record)


@pytest.mark.parametrize("given", [[], ["--activation_checkpointing", "false"]])
def test_the_ar_baseline_s_trl_config_warns_nothing(given, tmp_path):
    """`benchmarks/ar_baseline.py` builds TRL's own `SFTConfig` (whose old-name default, True, warns
    on 5.25): it gives the new name instead, and the value still reaches both names."""
    import json
    import runpy
    from pathlib import Path

    import yaml

    script = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "ar_baseline.py"))
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "a", "completion": " b"}))
    recipe = tmp_path / "ar.yaml"
    recipe.write_text(yaml.safe_dump({"model_name_or_path": "unused", "dataset_name": str(data)}))
    argv = ["--config", str(recipe), "--output_dir", str(tmp_path / "out"), "--use_cpu", "true", *given]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _, _, config = script["load_config"](argv)
    assert not deprecations(record)
    expected = not given  # TRL's default (on) unless the flag turned it off
    assert config.gradient_checkpointing is expected  # the name TRL's config has on 4.x too
    if TRANSFORMERS_HAS_NEW_NAMES:
        assert config.activation_checkpointing is expected
