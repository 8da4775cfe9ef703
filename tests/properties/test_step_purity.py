"""The purity of `Strategy.step`, for every registered strategy: a step reads its context and writes
nothing into it (nor into the strategy), and its decision depends on the context alone.

The list is read from the registry, so a new strategy is covered as soon as it is registered. Each
is built with its defaults (its paper's); the rules the suite has long checked with other settings
(lower thresholds, so they write more) are also drawn with those. The contexts are drawn afresh at
every run (CI too): a span whose first `window` slots are a finished block (multi-block editing's
window) before the active block, with at least one mask per row in the active block; in some, masks
lie in the window too (a hand-built context the loop never makes: nothing may be mutated there
either).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_edit.kernels import STAT_NAMES
from dllm_edit.strategies import (
    LowConfidenceRemask,
    MultiBlockEdit,
    QuotaUnmask,
    StepContext,
    ThresholdUnmask,
    TokenEdit,
    available_strategies,
)
from tests.helpers import MASK
from tests.helpers.registry import build

STRATEGIES = available_strategies()
# other settings some rules are also checked with: `width` is the span's
VARIANTS = {
    "threshold_unmask": lambda width: ThresholdUnmask(0.5),
    "quota_unmask": lambda width: QuotaUnmask(steps=3, block_length=max(3, width)),
    "token_edit": lambda width: TokenEdit(0.2),
    "multi_block_edit": lambda width: MultiBlockEdit(1, 0.3),
    "low_confidence_remask": lambda width: LowConfidenceRemask(0.5, max_steps=2, max_per_step=2),
}
# Randomized in every profile, CI's included (CI's profile derandomizes the rest of the suite): each
# run draws new examples; a failure prints the `@reproduce_failure` blob that replays it.
EXAMPLES = settings(max_examples=12, deadline=None, derandomize=False, database=None, print_blob=True)


def random_context(
    seed: int, batch: int, width: int, window: int, window_masks: bool = False, vocab: int = 48
) -> StepContext:
    """A step over a span whose first `window` slots are a finished block (multi-block editing's
    window: written tokens only, unless `window_masks`), the rest the active block with at least one
    mask per row; it holds every statistic (`STAT_NAMES`) and WINO's shadow probabilities."""
    g = torch.Generator().manual_seed(seed)
    in_block = torch.arange(window + width) >= window  # [S]
    width = window + width
    masked = torch.rand(batch, width, generator=g) < 0.6  # [B, S]
    if not window_masks:
        masked &= in_block
    masked[:, window] = True  # a mask in every row's active block
    probs = torch.rand(batch, width, generator=g).clamp_min(0.05)  # [B, S]
    second = probs * torch.rand(batch, width, generator=g)  # [B, S], <= top
    stats = {
        "current_prob": probs * 0.5,
        "top_prob": probs,
        "second_prob": second,
        "logit_gap": probs.log() - second.clamp_min(1e-30).log(),
        "entropy": torch.rand(batch, width, generator=g) * 3,
        "kl": torch.rand(batch, width, generator=g) * 0.05,
        "shadow_prob": torch.rand(batch, width, generator=g),
    }
    for name in STAT_NAMES:  # a statistic added later: random values in [0, 1)
        stats.setdefault(name, torch.rand(batch, width, generator=g))
    return StepContext(
        tokens=torch.where(masked, MASK, torch.randint(2, vocab - 2, (batch, width), generator=g)),
        masked=masked,
        editable=~masked,
        in_block=in_block,
        cand_tokens=torch.randint(2, vocab - 2, (batch, width), generator=g),
        cand_probs=probs,
        step=torch.randint(0, 3, (batch,), generator=g),
        block_index=0,
        active=torch.ones(batch, dtype=torch.bool),
        block_masked=(masked & in_block).sum(-1),
        mask_token_id=MASK,
        stats=stats,
        positions=(torch.arange(width) - window).expand(batch, width),
        generator=torch.Generator().manual_seed(seed),
    )


def snapshot(ctx: StepContext) -> dict:
    """Copies of every tensor the context holds: its fields, and the entries of `stats` and `state`."""
    copies = {}
    for field in dataclasses.fields(ctx):
        value = getattr(ctx, field.name)
        if isinstance(value, torch.Tensor):
            copies[field.name] = value.clone()
        elif isinstance(value, dict):
            copies[field.name] = {
                k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in value.items()
            }
    return copies


@pytest.mark.parametrize("name", STRATEGIES)
@EXAMPLES
@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 4),
    width=st.integers(1, 8),
    window=st.integers(0, 3),
    window_masks=st.booleans(),
    variant=st.booleans(),
)
def test_step_is_pure(name, seed, batch, width, window, window_masks, variant):
    span = window + width
    strategy = VARIANTS[name](span) if variant and name in VARIANTS else build(name, width)
    frozen = strategy.to_dict()
    ctx = random_context(seed, batch, width, window, window_masks)
    copies = snapshot(ctx)
    first = strategy.step(ctx)
    again = strategy.step(dataclasses.replace(ctx, generator=torch.Generator().manual_seed(seed)))
    for key, value in copies.items():  # the step wrote into nothing it was given
        if isinstance(value, dict):
            held = getattr(ctx, key)
            assert held.keys() == value.keys(), f"step changed the entries of ctx.{key}"
            for k, v in value.items():
                assert torch.equal(held[k], v), f"step wrote into ctx.{key}[{k!r}]"
        else:
            assert torch.equal(getattr(ctx, key), value), f"step wrote into ctx.{key}"
    assert strategy.to_dict() == frozen, "step changed the strategy"
    assert first.commit.shape == first.edit.shape == first.tokens.shape == (batch, span)
    # the same context (a fresh generator with the same seed) gives the same decision
    assert torch.equal(first.commit, again.commit) and torch.equal(first.edit, again.edit)
    assert torch.equal(first.tokens, again.tokens)
    assert not (first.commit & ~ctx.masked).any()  # commits land on masks only
    if not strategy.needs.window:  # finished blocks stay frozen (multi-block editing edits its window)
        assert not ((first.commit | first.edit) & ~ctx.in_block).any()
    if strategy.unmasks and strategy.progress_every_step:
        assert bool((first.commit.sum(-1) >= 1).all())  # progress on a row with masks
