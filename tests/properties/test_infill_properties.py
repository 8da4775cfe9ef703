"""Hypothesis property of infilling: the prompt's fixed tokens never change, every mask of the input
is filled, and a batch decodes as each row alone (bidirectional and shifted adapters, both block
origins, with editing on)."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
slot = st.one_of(st.integers(2, MASK - 1), st.just(MASK))
prompt = st.lists(slot, min_size=1, max_size=9)


@given(
    prompts=st.lists(prompt, min_size=1, max_size=3).filter(lambda ps: all(MASK in p for p in ps)),
    bl=st.integers(1, 4),
    gen=st.integers(0, 6),
    block_start=st.sampled_from(["absolute", "prompt_end"]),
    adapter=st.sampled_from(["bidirectional", "shifted"]),
    mode=st.sampled_from(["speedy", "quality"]),
)
def test_infilling_keeps_fixed_tokens_fills_every_mask_and_batches_as_alone(
    prompts, bl, gen, block_start, adapter, mode
):
    config = dllm_edit.EditGenerationConfig.from_mode(
        mode, block_length=bl, max_new_tokens=gen, block_start=block_start, eos_early_stop=False, **IDS
    )
    ids, mask = left_pad(prompts)
    out = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=config, adapter=adapter)
    width = ids.shape[1]
    fixed = (ids != MASK) & mask.bool()  # [B, W]
    assert torch.equal(out.sequences[:, :width][fixed], ids[fixed])
    assert not (out.sequences[:, :width][mask.bool()] == MASK).any()
    for i, p in enumerate(prompts):
        alone = dllm_edit.generate(BAG, torch.tensor([p]), generation_config=config, adapter=adapter)
        assert out.sequences[i, width - len(p) :].tolist() == alone.sequences[0].tolist()
        assert int(out.num_forwards[i]) == int(alone.num_forwards[0])
