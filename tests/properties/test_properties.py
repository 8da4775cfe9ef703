"""Behaviour 5: Hypothesis properties of the decoding invariants.

That a strategy's `step` mutates nothing is `test_step_is_pure` (every registered strategy), in
`test_step_purity.py`.
"""

import tempfile

import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.strategies import (
    Cosine,
    Linear,
    MultiBlockEdit,
    Stepwise,
    ThresholdUnmask,
    TokenEdit,
    quota_schedule,
)
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad, tiny_llama

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=48, sharpness=2.0)
LLAMA = tiny_llama(seed=3)

prompts = st.lists(st.lists(st.integers(2, MASK - 1), min_size=1, max_size=9), min_size=1, max_size=4)
configs = st.fixed_dictionaries(
    dict(
        block_length=st.integers(1, 6),
        max_new_tokens=st.integers(1, 14),
        threshold=st.floats(0.0, 1.0),
        editing_threshold=st.one_of(st.none(), st.floats(0.0, 1.0)),
        max_post_steps=st.integers(0, 3),
        num_to_transfer=st.integers(1, 3),
        eos_early_stop=st.booleans(),
        multi_block_edit=st.booleans(),
    )
)


@given(rows=prompts, cfg=configs)
def test_invariants_on_every_step(rows, cfg):
    ids, mask = left_pad(rows)
    out = dllm_edit.generate(
        BAG,
        ids,
        attention_mask=mask,
        adapter="block_causal",
        use_cache=False,
        output_trace=True,
        **IDS,
        **cfg,
    )
    width = ids.shape[1]
    # the prompt (and its padding) never changes; no MASK is left in the completion
    assert torch.equal(out.sequences[:, :width], ids)
    assert not (out.sequences[:, width:] == MASK).any()
    per_block = {}
    for rec in out.trace:
        masks_left = rec.masked.any(-1) & rec.active  # [B]
        # every step fills at least one mask while masks remain
        assert bool((rec.commit.sum(-1)[masks_left] >= 1).all())
        # only active rows change
        assert torch.equal(rec.before[~rec.active], rec.after[~rec.active])
        # commits only on masked slots, edits only on unmasked slots
        assert not (rec.commit & ~rec.masked).any()
        assert not (rec.edit & rec.masked).any()
        if cfg["editing_threshold"] is None and not cfg["multi_block_edit"]:
            # M2T-only: a committed token never changes
            written = ~rec.masked
            assert torch.equal(rec.before[written], rec.after[written])
        per_block.setdefault(rec.block, torch.zeros_like(rec.active, dtype=torch.long))
        per_block[rec.block] += rec.active
    # forwards per block within the bound: mask phase (<= bl) + max_post_steps, plus edit-only steps
    bound = 2 * cfg["block_length"] + cfg["max_post_steps"]
    for count in per_block.values():
        assert int(count.max()) <= bound
        if cfg["editing_threshold"] is None and not cfg["multi_block_edit"]:
            assert int(count.max()) <= cfg["block_length"] + cfg["max_post_steps"]


@given(rows=prompts, cfg=configs)
def test_batch_of_b_equals_b_runs_of_one(rows, cfg):
    ids, mask = left_pad(rows)
    batch = dllm_edit.generate(
        BAG, ids, attention_mask=mask, adapter="block_causal", use_cache=False, **IDS, **cfg
    )
    width = ids.shape[1]
    for i, r in enumerate(rows):
        alone = dllm_edit.generate(
            BAG, torch.tensor([r]), adapter="block_causal", use_cache=False, **IDS, **cfg
        )
        assert torch.equal(batch.sequences[i, width:], alone.sequences[0, len(r) :])
        assert batch.num_forwards[i] == alone.num_forwards[0]


@given(rows=prompts, cfg=configs)
def test_cache_on_equals_cache_off(rows, cfg):
    ids, mask = left_pad(rows)
    off = dllm_edit.generate(LLAMA, ids, attention_mask=mask, use_cache=False, **IDS, **cfg)
    on = dllm_edit.generate(LLAMA, ids, attention_mask=mask, use_cache=True, **IDS, **cfg)
    assert torch.equal(on.sequences, off.sequences)
    assert torch.equal(on.num_forwards, off.num_forwards)


@given(
    prompt=st.lists(st.integers(2, MASK - 1), min_size=1, max_size=9),
    k=st.integers(1, 4),
    bl=st.integers(1, 6),
    gen=st.integers(1, 12),
)
def test_threshold_one_is_pure_top_k(prompt, k, bl, gen):
    out = dllm_edit.generate(
        BAG,
        torch.tensor([prompt]),
        adapter="block_causal",
        use_cache=False,
        output_trace=True,
        threshold=1.0,
        num_to_transfer=k,
        editing_threshold=None,
        block_length=bl,
        max_new_tokens=gen,
        eos_early_stop=False,
        **IDS,
    )
    for rec in out.trace:
        expected = torch.minimum(rec.masked.sum(-1), torch.tensor(k))
        assert torch.equal(rec.commit.sum(-1)[rec.active], expected[rec.active])


schedules = st.one_of(
    st.floats(0.0, 1.0),
    st.builds(
        Linear, st.floats(0, 1), st.floats(0, 1), st.integers(1, 8), st.sampled_from(["step", "block"])
    ),
    st.builds(Cosine, st.floats(0, 1), st.floats(0, 1), st.integers(1, 8)),
    st.builds(lambda a, b: Stepwise((a, b), (2,), "block"), st.floats(0, 1), st.floats(0, 1)),
)


@given(
    threshold=schedules,
    editing=st.one_of(st.none(), schedules),
    bl=st.integers(1, 64),
    post=st.integers(0, 20),
    mbe=st.booleans(),
    steps=st.one_of(st.none(), st.integers(1, 4)),
    explicit=st.booleans(),
)
def test_config_save_pretrained_round_trip(threshold, editing, bl, post, mbe, steps, explicit):
    strategies = [ThresholdUnmask(threshold, 2), TokenEdit(0.3), MultiBlockEdit(2, 0.8)] if explicit else None
    cfg = dllm_edit.EditGenerationConfig(
        threshold=threshold,
        editing_threshold=editing,
        block_length=max(bl, steps or 1),
        max_post_steps=post,
        multi_block_edit=mbe,
        steps=steps,
        strategies=strategies,
        mask_token_id=MASK,
        eos_token_id=EOS,
    )
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        back = dllm_edit.EditGenerationConfig.from_pretrained(d)
    for key in (
        "threshold",
        "editing_threshold",
        "block_length",
        "max_post_steps",
        "multi_block_edit",
        "steps",
        "mask_token_id",
        "eos_token_id",
        "strategies",
    ):
        assert getattr(back, key) == getattr(cfg, key), key
    assert back.build_strategies() == cfg.build_strategies()


@given(bl=st.integers(1, 64), steps_frac=st.floats(0.01, 1.0))
def test_quota_schedule_sums_to_block_length(bl, steps_frac):
    steps = max(1, round(steps_frac * bl))
    quota = quota_schedule(bl, steps)
    assert sum(quota) == bl and len(quota) == steps and max(quota) - min(quota) <= 1
    assert quota == sorted(quota, reverse=True)
