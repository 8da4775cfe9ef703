"""The approximate prefix cache of the bidirectional adapter (Fast-dLLM style)."""

import pytest
import torch

import dllm_edit
from dllm_edit.adapters import ApproxCacheBidirectionalAdapter
from tests.helpers import EOS, MASK, PAD, BagDenoiser

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
ADAPTER = "bidirectional_approx_cache"


def test_blocks_decided_in_their_first_step_match_the_exact_adapter(llama_eager):
    # threshold 0 fills every mask in the block's first (fresh, full-canvas) step; with no post steps
    # no stale-prefix step ever decides anything, so the result equals the exact adapter's
    cfg = dllm_edit.EditGenerationConfig(
        threshold=0.0, editing_threshold=None, max_post_steps=0, block_length=4, max_new_tokens=12, **IDS
    )
    for prompt in ([5, 6, 7], [9, 10, 11, 12, 13]):
        ids = torch.tensor([prompt])
        exact = dllm_edit.generate(llama_eager, ids, generation_config=cfg, adapter="bidirectional")
        approx = dllm_edit.generate(llama_eager, ids, generation_config=cfg, adapter=ADAPTER)
        assert torch.equal(approx.sequences, exact.sequences)


def test_later_steps_run_only_span_and_suffix(llama_eager):
    lengths = []
    hook = llama_eager.model.embed_tokens.register_forward_pre_hook(
        lambda m, a: lengths.append(a[0].shape[1])
    )
    try:
        out = dllm_edit.generate(
            llama_eager,
            torch.tensor([[5, 6, 7, 8, 9]]),
            adapter=ADAPTER,
            block_length=4,
            max_new_tokens=8,
            eos_early_stop=False,
            output_trace=True,
            **IDS,
        )
    finally:
        hook.remove()
    canvas = 16  # ceil((5 + 8) / 4) * 4
    first_of_block = [i == 0 or out.trace[i].block != out.trace[i - 1].block for i in range(len(out.trace))]
    for length, first, rec in zip(lengths, first_of_block, out.trace):
        assert length == (canvas if first else canvas - rec.span_start)
    assert out.sequences.shape == (1, 13) and not (out.sequences == MASK).any()


def test_batch_equals_rows_alone(llama_eager):
    cfg = dllm_edit.EditGenerationConfig.from_mode("quality", block_length=4, max_new_tokens=8, **IDS)
    ids = torch.tensor([[PAD, PAD, 5, 6, 7], [9, 10, 11, 12, 13]])
    mask = (ids != PAD).long()
    batch = dllm_edit.generate(llama_eager, ids, attention_mask=mask, generation_config=cfg, adapter=ADAPTER)
    for i in range(2):
        row = ids[i : i + 1, mask[i].bool()]
        alone = dllm_edit.generate(llama_eager, row, generation_config=cfg, adapter=ADAPTER)
        assert torch.equal(batch.sequences[i, 5:], alone.sequences[0, row.shape[1] :])


def test_never_auto_detected_and_needs_a_cache_argument():
    assert ApproxCacheBidirectionalAdapter.name not in dllm_edit.adapters.MODEL_TYPE_ADAPTERS.values()
    with pytest.raises(ValueError, match="KV cache argument"):
        dllm_edit.generate(
            BagDenoiser(vocab_size=48), torch.tensor([[5, 6]]), adapter=ADAPTER, max_new_tokens=4, **IDS
        )
    # use_cache=False falls back to the exact full-canvas session
    out = dllm_edit.generate(
        BagDenoiser(vocab_size=48),
        torch.tensor([[5, 6]]),
        adapter=ADAPTER,
        use_cache=False,
        max_new_tokens=4,
        **IDS,
    )
    assert out.sequences.shape == (1, 6)
