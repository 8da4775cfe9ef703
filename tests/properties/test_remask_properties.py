"""Hypothesis properties of decoding with `LowConfidenceRemask` in the strategy list.

The prompt never changes, every mask is filled in the end, re-masks happen only on active rows, only
where the probability is below the threshold, at most `max_per_step` per step and only in the early
steps the guard allows, and a block ends within its bound. The rule itself is tested in
`tests/strategies/test_remask.py`.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.strategies import LowConfidenceRemask, ThresholdUnmask, TokenEdit
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad
from tests.helpers.traces import remask_slots

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=48, sharpness=1.0)  # soft logits: many candidates below a threshold


@given(
    rows=st.lists(st.lists(st.integers(2, MASK - 1), min_size=1, max_size=7), min_size=1, max_size=3),
    block_length=st.integers(1, 6),
    max_new_tokens=st.integers(1, 12),
    threshold=st.floats(0.0, 1.0),
    edit=st.one_of(st.none(), st.floats(0.0, 1.0)),
    remask=st.floats(0.0, 1.0),
    max_steps=st.integers(1, 6),
    max_per_step=st.integers(1, 3),
    max_post_steps=st.integers(0, 3),
)
def test_invariants_with_remasking(
    rows, block_length, max_new_tokens, threshold, edit, remask, max_steps, max_per_step, max_post_steps
):
    max_steps = min(max_steps, block_length)  # within the default cap (larger ones are refused)
    strategy = LowConfidenceRemask(threshold=remask, max_steps=max_steps, max_per_step=max_per_step)
    strategies = [ThresholdUnmask(threshold), *([] if edit is None else [TokenEdit(edit)]), strategy]
    ids, mask = left_pad(rows)
    out = dllm_edit.generate(
        BAG,
        ids,
        attention_mask=mask,
        adapter="block_causal",
        use_cache=False,
        output_trace=True,
        strategies=strategies,
        block_length=block_length,
        max_new_tokens=max_new_tokens,
        max_post_steps=max_post_steps,
        eos_early_stop=False,
        **IDS,
    )
    width = ids.shape[1]
    assert torch.equal(out.sequences[:, :width], ids)  # the prompt never changes
    assert not (out.sequences[:, width:] == MASK).any()  # the guard runs out, every mask is filled
    forwards = {}
    for rec in out.trace:
        remasked = remask_slots(rec)  # [B, S]
        assert not (remasked & ~rec.active[:, None]).any()
        assert (rec.probs[remasked] < remask).all()  # only where p < τ
        assert (remasked.sum(-1) <= max_per_step).all()
        forwards.setdefault(rec.block, torch.zeros_like(rec.active, dtype=torch.long))
        if remasked.any():
            assert int(forwards[rec.block][remasked.any(-1)].max()) < max_steps  # the guard: early steps only
        forwards[rec.block] += rec.active
    for count in forwards.values():  # terminates within the bound (below the hard cap)
        assert int(count.max()) <= block_length + max_post_steps + max_steps
