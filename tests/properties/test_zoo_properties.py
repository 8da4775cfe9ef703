"""Hypothesis properties of every registered unmasking algorithm (the zoo), alone and with T2T editing.

For each strategy with `unmasks=True` (built with its defaults, its paper's): progress (at least one
commit per step while masks remain, unless it re-masks, and then the block ends within its declared
bound), a finished block never changes again, no mask token is written as a token, and batch ==
alone, on examples drawn afresh at every run (CI too). The list is read from the registry, so a new
algorithm is covered as soon as it is registered. That `step` is pure is checked for every
registered strategy in `test_step_purity.py`; a bound one algorithm promises (a WINO block ends
within its mask count) is at the end.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.strategies import WINO, Strategy, TokenEdit
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad
from tests.helpers.llada1 import ctx_of
from tests.helpers.registry import build

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=48, sharpness=1.5, exact=True)
ALGORITHMS = unmasking_strategies()
# Randomized in every profile, CI's included (CI's profile derandomizes the rest of the suite): each
# run draws new examples, so the zoo's properties are searched wider over time; a failure prints the
# `@reproduce_failure` blob that replays it.
EXAMPLES = settings(max_examples=12, deadline=None, derandomize=False, database=None, print_blob=True)

prompts = st.lists(st.lists(st.integers(2, MASK - 2), min_size=1, max_size=7), min_size=1, max_size=3)
shapes = st.fixed_dictionaries(
    dict(
        block_length=st.integers(2, 6),
        max_new_tokens=st.integers(2, 12),
        max_post_steps=st.integers(0, 2),
        eos_early_stop=st.booleans(),
        editing=st.booleans(),
    )
)


def adapter_for(strategy: Strategy) -> str:
    """The bidirectional adapter (LLaDA / Dream, where these rules come from), unless the rule needs
    another one (a capability it declares)."""
    return getattr(strategy, "preferred_adapter", None) or "bidirectional"


def decode(name, rows, shape, **extra):
    strategy = build(name, shape["block_length"])
    strategies = [strategy] + ([TokenEdit(threshold=0.5)] if shape["editing"] else [])
    ids, mask = left_pad(rows)
    cfg = dllm_edit.EditGenerationConfig(
        strategies=strategies,
        block_length=shape["block_length"],
        max_new_tokens=shape["max_new_tokens"],
        max_post_steps=shape["max_post_steps"],
        eos_early_stop=shape["eos_early_stop"],
        use_cache=False,
        **IDS,
    )
    generator = torch.Generator().manual_seed(0)
    out = dllm_edit.generate(
        BAG,
        ids,
        attention_mask=mask,
        generation_config=cfg,
        adapter=adapter_for(strategy),
        generator=generator,
        **extra,
    )
    return strategy, ids, out


@pytest.mark.parametrize("name", ALGORITHMS)
@EXAMPLES
@given(rows=prompts, shape=shapes)
def test_progress_history_and_no_mask_written(name, rows, shape):
    strategy, ids, out = decode(name, rows, shape, output_trace=True)
    width = ids.shape[1]
    assert torch.equal(out.sequences[:, :width], ids)  # the prompt never changes
    assert not (out.sequences[:, width:] == MASK).any()  # no mask left
    remasks = strategy.remasks
    progress = strategy.progress_every_step
    last_of_block: dict[int, torch.Tensor] = {}
    per_block: dict[int, torch.Tensor] = {}
    for rec in out.trace:
        written = rec.commit | rec.edit
        if progress:
            masks_left = rec.masked.any(-1) & rec.active  # [B]
            assert bool((rec.commit.sum(-1)[masks_left] >= 1).all()), "a step made no progress"
        if not remasks:
            assert not (rec.after[written] == MASK).any(), "a mask token was written as a token"
        assert not (rec.commit & ~rec.masked).any()
        assert torch.equal(rec.before[~rec.active], rec.after[~rec.active])
        if not shape["editing"] and not remasks:  # M2T only: a committed token never changes
            assert torch.equal(rec.before[~rec.masked], rec.after[~rec.masked])
        last_of_block[rec.block] = rec
        per_block.setdefault(rec.block, torch.zeros_like(rec.active, dtype=torch.long))
        per_block[rec.block] += rec.active
    # a finished block never changes again: the loop writes only the span, which moves past it
    # (that the strategy writes nothing outside the active block: `test_step_is_pure`, test_step_purity.py)
    blocks = sorted(last_of_block)
    for earlier, later in itertools.pairwise(blocks):
        end = last_of_block[earlier].span_start + last_of_block[earlier].after.shape[1]
        assert all(rec.span_start >= end for rec in out.trace if rec.block == later)
    bound = 2 * shape["block_length"] + shape["max_post_steps"] + strategy.extra_forwards_per_block
    for count in per_block.values():
        assert int(count.max()) <= bound


@pytest.mark.parametrize("name", ALGORITHMS)
@EXAMPLES
@given(rows=prompts, shape=shapes)
def test_batch_equals_alone(name, rows, shape):
    if not build(name, shape["block_length"]).batch_independent:
        pytest.skip(f"{name} draws one [B, S] sample per step: batch == alone holds in distribution only")
    _, ids, batch = decode(name, rows, shape)
    width = ids.shape[1]
    for i, r in enumerate(rows):
        _, _, alone = decode(name, [r], shape)
        assert batch.sequences[i, width:].tolist() == alone.sequences[0, len(r) :].tolist()
        assert batch.num_forwards[i] == alone.num_forwards[0]


# ----------------------------------------------------------------------------------------------
# one algorithm's bound


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), width=st.integers(1, 24))
def test_wino_a_block_ends_within_its_mask_count(seed, width):
    # whatever the model says, re-masks stay below the previous step's commits: m masks, <= m steps
    g = torch.Generator().manual_seed(seed)
    masked = torch.ones(1, width, dtype=torch.bool)
    state: dict = {}
    strategy = WINO(wide_in_threshold=0.3)
    for step in range(width + 1):
        if not masked.any():
            break
        assert step < width, "a block took more forwards than it had masks"
        ctx = ctx_of(
            torch.rand(1, width, generator=g),
            masked=masked,
            shadow_probs=torch.rand(1, width, generator=g),
            step=torch.tensor([step]),
            state=state,
        )
        out = strategy.step(ctx)
        assert out.commit.any() and not (out.commit & out.edit).any()
        masked = (masked & ~out.commit) | out.edit
        state = out.state
