"""Both trainers on every native family: EditSFTTrainer on all weights and EBPOTrainer with LoRA on
the family's own projection names, the training form picked from the model (`diffusion_attention`
"auto": bidirectional for LLaDA / LLaDA-MoE, shifted for Dream, block diffusion for LLaDA2.x)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")
from datasets import Dataset
from peft import LoraConfig

from dllm_edit.trainers import EBPOTrainer, EditSFTTrainer
from tests.helpers import MASK, tiny_tokenizer
from tests.helpers.training import reversal_rows, sft_config
from tests.models.test_loading import FAMILIES
from tests.trainers.test_ebpo import ebpo_config, even_words, prompts

#: The attention projections each family names (PEFT's `target_modules`).
LORA_TARGETS = {
    "llada": ["q_proj", "v_proj"],
    "lladamoe": ["q_proj", "v_proj"],
    "Dream": ["q_proj", "v_proj"],
    "llada2_moe": ["query_key_value"],
}


def native(family: str, seed: int = 7) -> torch.nn.Module:
    import dllm_edit

    fields, model_class, *_ = FAMILIES[family]
    fields = {k: v for k, v in fields.items() if k not in ("architectures", "model_type")}
    config_class = dllm_edit.models.NATIVE_FAMILIES[family][0]
    torch.manual_seed(seed)  # the tests' own seeding: the library never seeds
    return model_class(config_class(**{"mask_token_id": MASK, **fields, "attn_implementation": "sdpa"}))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_edit_sft_trains_every_weight(family, tmp_path):
    model = native(family)
    trainer = EditSFTTrainer(
        model,
        args=sft_config(tmp_path, max_steps=3, logging_steps=1),
        train_dataset=Dataset.from_list(reversal_rows(24)),
        processing_class=tiny_tokenizer(),
    )
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    # every weight but the experts no token was routed to in three steps
    unchanged = set(before) - changed
    assert all(".experts." in k for k in unchanged), sorted(unchanged)[:5]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_ebpo_with_lora_trains_the_adapters(family, tmp_path):
    trainer = EBPOTrainer(
        native(family),
        reward_funcs=[even_words],
        args=ebpo_config(tmp_path, max_steps=1),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[family], lora_dropout=0.0),
    )
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    changed = {k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    entry = next(h for h in trainer.state.log_history if "reward" in h)
    assert entry["rollout/tokens_per_forward"] > 0
