"""Hypothesis properties of the canvas and of batching under both block origins (`block_start`).

Each row owns exactly its own canvas (prompt, masks, padding, positions); and under the
full-attention adapters a batch of B rows decodes as B runs of one, with prompts whose lengths mix
multiples of the block length and other lengths (the bug: rows needing fewer blocks saw the trailing
block of masks). The config field, LLaDA-1's quota and the `llada` preset are tested in
`tests/strategies/test_block_start.py`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.layout import build_canvas
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
EXACT_BAG = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
tokens = st.integers(2, MASK - 1)


# ----------------------------------------------------------------------------------------------
# the canvas


@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    bl=st.integers(1, 5),
    gen=st.integers(1, 11),
    block_start=st.sampled_from(["absolute", "prompt_end"]),
)
def test_each_row_owns_exactly_its_own_canvas(lengths, bl, gen, block_start):
    ids, mask = left_pad([[7] * n for n in lengths])
    layout, canvas = build_canvas(ids, mask, bl, gen, MASK, PAD, block_start)
    lengths_t = torch.tensor(lengths)
    own = layout.row_end - layout.offsets  # [B]
    if block_start == "prompt_end":
        assert own.tolist() == (lengths_t + gen).tolist()  # exactly prompt + new tokens
        assert (
            (layout.offsets + lengths_t) == layout.first_block * bl
        ).all()  # blocks start at the prompt end
    else:
        assert own.tolist() == ((lengths_t + gen + bl - 1) // bl * bl).tolist()  # whole blocks
        assert ((layout.offsets + lengths_t) // bl == layout.first_block).all()  # the prompt tail block
        assert (layout.offsets % bl == 0).all()
    slots = torch.arange(canvas.shape[1])
    inside = (slots >= layout.offsets[:, None]) & (slots < layout.row_end[:, None])  # [B, T]
    assert torch.equal(layout.key_valid, inside)
    assert (canvas[~inside] == PAD).all()  # a row never sees another row's trailing blocks
    assert (canvas[layout.generated] == MASK).all() and (layout.generated.sum(-1) == own - lengths_t).all()
    assert (layout.position_ids[inside] == (slots - layout.offsets[:, None])[inside]).all()


# ----------------------------------------------------------------------------------------------
# batch == alone for the full-attention adapters (the bug: rows needing fewer blocks saw the
# trailing block of masks)

batch_configs = st.fixed_dictionaries(
    dict(
        block_length=st.integers(1, 5),
        max_new_tokens=st.integers(1, 11),
        threshold=st.floats(0.0, 1.0),
        editing_threshold=st.one_of(st.none(), st.floats(0.0, 1.0)),
        max_post_steps=st.integers(0, 3),
        eos_early_stop=st.booleans(),
        multi_block_edit=st.booleans(),
        block_start=st.sampled_from(["absolute", "prompt_end"]),
        steps=st.one_of(st.none(), st.integers(1, 5)),
    )
)


@st.composite
def mixed_prompts(draw, bl_max=5):
    """Prompts whose lengths mix multiples of the block length and other lengths."""
    multiple = draw(st.integers(1, 2)) * draw(st.integers(1, bl_max))
    others = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
    lengths = draw(st.permutations([multiple, *others]))
    return [draw(st.lists(tokens, min_size=n, max_size=n)) for n in lengths]


@pytest.mark.parametrize("adapter", ["bidirectional", "masked_lm", "shifted"])
@given(rows=mixed_prompts(), cfg=batch_configs)
def test_batch_of_b_equals_b_runs_of_one(adapter, rows, cfg):
    cfg = dict(cfg)
    if cfg["steps"] is not None:
        cfg["steps"] = min(cfg["steps"], cfg["block_length"])
    ids, mask = left_pad(rows)
    batch = dllm_edit.generate(EXACT_BAG, ids, attention_mask=mask, adapter=adapter, **IDS, **cfg)
    width = ids.shape[1]
    for i, r in enumerate(rows):
        alone = dllm_edit.generate(EXACT_BAG, torch.tensor([r]), adapter=adapter, **IDS, **cfg)
        assert torch.equal(batch.sequences[i, width:], alone.sequences[0, len(r) :]), i
        assert batch.num_forwards[i] == alone.num_forwards[0], i
