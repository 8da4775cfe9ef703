"""`first_argmax`, the blocked argmax of the candidate reference, is `torch.argmax` exactly: the
first maximum on ties, the first NaN of a row holding one, index 0 on an all -inf row."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_edit.kernels.candidates.reference import first_argmax


@settings(deadline=None)
@given(
    vocab=st.sampled_from([16, 4095, 4096, 8192, 12288, 126464]),
    rows=st.integers(1, 4),
    levels=st.integers(1, 5),
    nans=st.integers(0, 3),
    seed=st.integers(0, 2**16),
    special=st.sampled_from(["none", "all_neg_inf", "all_pos_inf", "max_at_block_edge"]),
)
def test_first_argmax_is_torch_argmax(vocab, rows, levels, nans, seed, special):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, levels, (rows, vocab), generator=g).float()  # few levels: many ties
    if nans:
        x[0, torch.randint(0, vocab, (nans,), generator=g)] = float("nan")
    if special == "all_neg_inf":
        x[-1] = -float("inf")
    elif special == "all_pos_inf":
        x[-1] = float("inf")
    elif special == "max_at_block_edge" and vocab >= 4096:
        x[-1, vocab // 16 - 1] = x[-1, vocab // 16] = levels + 1.0  # the last slot of block 0, the first of 1
    expected = torch.argmax(x, dim=-1)
    assert torch.equal(first_argmax(x, torch.empty(rows, dtype=torch.long)), expected)
