"""Multi-block editing: definition checks on tiny models."""

import pytest
import torch

import dllm_edit
from tests.helpers import EOS, MASK, PAD

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [20, 21]]


@pytest.mark.parametrize("use_cache", [False, True])
def test_review_copy_leaves_active_block_decoding_unchanged(llama_eager, use_cache):
    # with an MBE threshold of 1.0 no window edit can pass (strict >): outputs equal MBE off
    base = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=12, use_cache=use_cache, **IDS
    )
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        off = dllm_edit.generate(llama_eager, ids, generation_config=base)
        on = dllm_edit.generate(
            llama_eager,
            ids,
            generation_config=base,
            multi_block_edit=True,
            multi_block_window=2,
            multi_block_threshold=1.0,
        )
        assert torch.equal(on.sequences, off.sequences)
        assert torch.equal(on.num_forwards, off.num_forwards)


@pytest.mark.parametrize("model_name", ["llama_eager", "qwen3_sdpa"])
def test_window_edits_happen_and_cache_stays_exact(request, model_name):
    model = request.getfixturevalue(model_name)
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "speedy",
        block_length=3,
        max_new_tokens=12,
        multi_block_edit=True,
        multi_block_window=2,
        multi_block_threshold=0.0,
        eos_early_stop=False,
        output_trace=True,
        **IDS,
    )
    window_edits = 0
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        off = dllm_edit.generate(model, ids, generation_config=cfg, use_cache=False)
        on = dllm_edit.generate(model, ids, generation_config=cfg, use_cache=True)
        assert torch.equal(on.sequences, off.sequences)
        assert torch.equal(on.num_forwards, off.num_forwards)
        for rec in off.trace:
            span = rec.edit.shape[1]
            window = span - cfg.block_length
            window_edits += int(rec.edit[:, :window].sum())
            # window edits never touch the prompt: the prompt of the returned sequence is intact
        assert torch.equal(on.sequences[0, : len(prompt)], ids[0])
    assert window_edits > 0  # the test exercises the invalidation path


def test_bidirectional_adapter_supports_mbe_and_refuses_cache(llama_eager):
    ids = torch.tensor([[5, 6, 7]])
    out = dllm_edit.generate(
        llama_eager,
        ids,
        adapter="bidirectional",
        block_length=4,
        max_new_tokens=8,
        multi_block_edit=True,
        **IDS,
    )
    assert out.sequences.shape == (1, 11)
    with pytest.raises(ValueError, match="use_cache=True"):
        dllm_edit.generate(llama_eager, ids, adapter="bidirectional", use_cache=True, max_new_tokens=4, **IDS)
