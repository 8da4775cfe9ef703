"""Every native family takes transformers' `StaticCache` (keys and values written at
`cache_position`): a block-causal decode through a static cache equals the uncached forward."""

from __future__ import annotations

import pytest
import torch
from transformers import StaticCache

import dllm_edit.models
from tests.helpers import MASK
from tests.helpers.remote_code import seeded_state_dict
from tests.models.test_loading import FAMILIES


def native(family: str) -> torch.nn.Module:
    fields, model_class, *_ = FAMILIES[family]
    fields = {k: v for k, v in fields.items() if k not in ("architectures", "model_type")}
    config_class = dllm_edit.models.NATIVE_FAMILIES[family][0]
    model = model_class(config_class(**{"mask_token_id": MASK, **fields, "attn_implementation": "sdpa"}))
    model.load_state_dict(seeded_state_dict(model, seed=3))
    return model.eval()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_cache_equals_the_uncached_block_causal_forward(family):
    model = native(family)
    ids = torch.tensor([[5, 9, 3, 7, 11, 2, 8, 4], [6, 6, 10, 3, 5, 12, 9, 1]])  # [B, 8]
    slots = torch.arange(8)
    block_causal = (slots[None, :] // 4 <= slots[:, None] // 4)[None, None].expand(2, 1, 8, 8)  # [B, 1, 8, 8]
    with torch.no_grad():
        reference = model(ids, attention_mask=block_causal).logits  # [B, 8, V]
        cache = StaticCache(config=model.config, max_cache_len=16)
        seen = torch.zeros(2, 1, 4, 16, dtype=torch.bool)  # [B, 1, 4, 16]: no slot written yet
        logits = []
        for start in (0, 4):
            seen[..., : start + 4] = True  # this block's keys and the ones before
            out = model(
                ids[:, start : start + 4],
                attention_mask=seen.clone(),
                position_ids=slots[start : start + 4].expand(2, 4),
                past_key_values=cache,
                cache_position=slots[start : start + 4],
                use_cache=True,
            )
            logits.append(out.logits)  # [B, 4, V]
    torch.testing.assert_close(torch.cat(logits, dim=1), reference, rtol=1e-5, atol=1e-5)
