"""Where blocks start (`block_start`), LLaDA-1's quota, and batch == alone for every adapter.

`"absolute"` is LLaDA2.x's origin (tested against its port in test_reference_exact.py);
`"prompt_end"` is LLaDA-1's, tested here against `reference_generate_llada1`, a port of LLaDA-1's
`generate` written from SPEC-decoding.md ("LLaDA (v1, 8B) behaviour"). That each row owns exactly its
canvas, and batch == alone for every full-attention adapter, are properties, in
`tests/properties/test_canvas_properties.py`.
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.adapters import (
    ApproxCacheBidirectionalAdapter,
    BidirectionalAdapter,
    BlockCausalAdapter,
    MaskedLMAdapter,
    ShiftedLogitsAdapter,
)
from dllm_edit.layout import build_canvas
from dllm_edit.strategies import QuotaUnmask, masked_count_quota, quota_schedule
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad, tiny_llama
from tests.helpers.reference_decoder import get_num_transfer_tokens, reference_generate_llada1

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
EXACT_BAG = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
tokens = st.integers(2, MASK - 1)


# ----------------------------------------------------------------------------------------------
# the config field


def test_block_start_defaults_to_the_adapter():
    assert dllm_edit.EditGenerationConfig().block_start is None
    assert BlockCausalAdapter.default_block_start == "absolute"
    for cls in (BidirectionalAdapter, ApproxCacheBidirectionalAdapter, ShiftedLogitsAdapter, MaskedLMAdapter):
        assert cls.default_block_start == "prompt_end"
        assert cls().resolve_block_start(None) == "prompt_end"
        assert cls().resolve_block_start("absolute") == "absolute"
    assert BlockCausalAdapter().resolve_block_start(None) == "absolute"


def test_block_start_is_validated():
    with pytest.raises(ValueError, match=r"`block_start` must be .*got 'prompt'.*Did you mean 'prompt_end'"):
        dllm_edit.EditGenerationConfig(block_start="prompt")
    with pytest.raises(TypeError, match=r"`block_start` must be None.*got int 1"):
        dllm_edit.EditGenerationConfig().replace(block_start=1)
    with pytest.raises(ValueError, match="block_start"):
        build_canvas(torch.tensor([[5]]), torch.ones(1, 1), 2, 2, MASK, PAD, block_start="start")


@pytest.mark.parametrize("block_start", [None, "absolute", "prompt_end"])
def test_block_start_round_trips_through_save_pretrained(block_start):
    cfg = dllm_edit.EditGenerationConfig.from_mode("llada", block_start=block_start, **IDS)
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        back = dllm_edit.EditGenerationConfig.from_pretrained(d)
    assert back.block_start == block_start
    assert back.build_strategies() == cfg.build_strategies()


def test_block_causal_refuses_prompt_end_before_any_forward():
    model = BagDenoiser(vocab_size=VOCAB)
    with pytest.raises(
        ValueError,
        match=r"block_start='prompt_end' is not supported by the 'block_causal'.*"
        r"absolute positions.*Set block_start='absolute' or None",
    ):
        dllm_edit.generate(
            model,
            torch.tensor([[5, 6]]),
            adapter="block_causal",
            block_start="prompt_end",
            max_new_tokens=4,
            block_length=2,
            **IDS,
        )
    assert model.calls == 0


# ----------------------------------------------------------------------------------------------
# batch == alone for the full-attention adapters (the bug: rows needing fewer blocks saw the
# trailing block of masks); the property over random prompts is in
# tests/properties/test_canvas_properties.py


def test_the_reported_batch_bug_on_a_real_architecture():
    # left-padded prompts of mixed lengths under full attention: a row that needs one block fewer
    # (P=1 needs 3 blocks of 4 for 10 new tokens, P=3 four) saw the trailing block of masks
    model = copy.deepcopy(tiny_llama("eager", seed=4)).double()  # float64: see test_adapters.py
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40]]
    for block_start in ("absolute", "prompt_end"):
        cfg = dllm_edit.EditGenerationConfig(
            steps=4,
            threshold=1.0,
            editing_threshold=None,
            max_post_steps=0,
            block_length=4,
            max_new_tokens=10,
            eos_early_stop=False,
            block_start=block_start,
            **IDS,
        )
        ids, mask = left_pad(prompts)
        batch = dllm_edit.generate(
            model, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
        )
        for i, prompt in enumerate(prompts):
            alone = dllm_edit.generate(
                model, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional"
            )
            assert torch.equal(batch.sequences[i, ids.shape[1] :], alone.sequences[0, len(prompt) :])


# ----------------------------------------------------------------------------------------------
# LLaDA-1: the quota rule and the `llada` preset against the port


def test_the_two_quota_rules_side_by_side():
    # LLaDA2.0 spreads the block length; LLaDA-1 the masks the block holds at its first step
    assert quota_schedule(8, 3) == [3, 3, 2]
    assert masked_count_quota(torch.tensor([8, 5, 2]), torch.tensor([0, 0, 0]), 3).tolist() == [3, 2, 1]
    assert masked_count_quota(torch.tensor([8, 5, 2]), torch.tensor([2, 2, 1]), 3).tolist() == [2, 1, 1]
    for n in range(0, 12):
        for steps in range(1, 6):
            ours = [
                int(masked_count_quota(torch.tensor([n]), torch.tensor([j]), steps)) for j in range(steps)
            ]
            theirs = get_num_transfer_tokens(torch.arange(12)[None] < n, steps)[0].tolist()
            assert ours == theirs and sum(ours) == n
    with pytest.raises(ValueError, match="spread"):
        QuotaUnmask(steps=2, block_length=4, spread="masks")


@pytest.mark.parametrize(
    "block_start, spread", [("absolute", "block_length"), ("prompt_end", "masked_count")]
)
def test_quota_mode_follows_the_block_origin(block_start, spread):
    cfg = dllm_edit.EditGenerationConfig(steps=2, block_length=4, block_start=block_start)
    assert cfg.build_strategies()[0].spread == spread
    assert dllm_edit.EditGenerationConfig(steps=2, block_length=4).build_strategies("prompt_end")[
        0
    ].spread == ("masked_count")


def test_llada_preset():
    cfg = dllm_edit.EditGenerationConfig.from_mode("llada", **IDS)
    assert (cfg.block_start, cfg.steps, cfg.block_length, cfg.threshold) == ("prompt_end", 32, 32, 1.0)
    assert (cfg.editing_threshold, cfg.max_post_steps, cfg.eos_early_stop, cfg.suppress_mask_token) == (
        None,
        0,
        False,
        False,
    )
    assert dllm_edit.EditGenerationConfig.from_mode("llada", block_length=8).steps == 8
    assert dllm_edit.EditGenerationConfig.from_mode("llada", block_length=8, steps=2).steps == 2


def _completions(out, layout_width, prompts):
    """Each row's whole completion, before the EOS cut of the output (from the trace)."""
    last = {}
    for record in out.trace:
        last[record.block] = record  # the last step of each block holds its final tokens
    full = torch.cat([last[b].after for b in sorted(last)], dim=1)  # [B, blocks * bl]
    return [full[i, : out.sequences.shape[1] - layout_width] for i in range(len(prompts))]


def _llada(model, prompts, bl, blocks, steps_per_block, adapter="bidirectional"):
    """dllm_edit with the `llada` preset vs the port, each prompt alone and the prompts batched."""
    gen = bl * blocks
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "llada", block_length=bl, steps=steps_per_block, max_new_tokens=gen, output_trace=True, **IDS
    )
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    batch_completions = _completions(batch, ids.shape[1], prompts)
    for i, prompt in enumerate(prompts):
        expected = reference_generate_llada1(
            model,
            torch.tensor([prompt]),
            mask_id=MASK,
            steps=steps_per_block * blocks,
            gen_length=gen,
            block_length=bl,
        )[0, len(prompt) :]
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert torch.equal(_completions(alone, len(prompt), [prompt])[0], expected), ("alone", i)
        assert torch.equal(batch_completions[i], expected), ("batched", i)
        assert int(alone.num_forwards[0]) == int(batch.num_forwards[i]) == steps_per_block * blocks
        # the returned completion is the reference's, cut after its first EOS
        hits = (expected == EOS).nonzero()
        cut = int(hits[0, 0]) + 1 if len(hits) else gen
        assert torch.equal(alone.sequences[0, len(prompt) : len(prompt) + cut], expected[:cut])


@given(
    rows=st.lists(st.lists(tokens, min_size=1, max_size=9), min_size=1, max_size=3),
    bl=st.integers(1, 5),
    blocks=st.integers(1, 3),
    steps_frac=st.floats(0.0, 1.0),
)
def test_llada_preset_reproduces_the_llada1_port(rows, bl, blocks, steps_frac):
    steps_per_block = 1 + round(steps_frac * (bl - 1))
    _llada(BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True), rows, bl, blocks, steps_per_block)


@pytest.mark.parametrize("bl, blocks, steps", [(4, 2, 4), (3, 3, 2), (5, 1, 5), (4, 2, 1)])
def test_llada_preset_reproduces_the_port_on_a_tiny_llama(bl, blocks, steps):
    # prompt lengths around block multiples; float32 alone (the forward holds no padding slot,
    # exactly as the port's), float64 for the batch (see test_adapters.py on padded float32 rows)
    prompts = [[5, 6, 7], [9, 10, 11, 12], [20], [30, 31, 32, 33, 34, 35, 36, 37]]
    model = tiny_llama("eager", seed=6)
    _llada(model, prompts[:1], bl, blocks, steps)
    for prompt in prompts:
        _llada(model, [prompt], bl, blocks, steps)
    _llada(copy.deepcopy(model).double(), prompts, bl, blocks, steps)


# ----------------------------------------------------------------------------------------------
# every strategy, MBE and the streamers under prompt_end


class _Collect:
    def __init__(self):
        self.put_calls, self.drafts, self.ended = [], [], 0

    def put(self, value):
        self.put_calls.append(value.flatten().tolist())

    def put_draft(self, value, **info):
        self.drafts.append(value.tolist())

    def end(self):
        self.ended += 1


@pytest.mark.parametrize("mbe", [False, True])
def test_streamer_under_prompt_end(mbe):
    streamer = _Collect()
    prompt = [5, 6, 7]
    out = dllm_edit.generate(
        EXACT_BAG,
        torch.tensor([prompt]),
        adapter="bidirectional",
        streamer=streamer,
        block_length=4,
        max_new_tokens=10,
        multi_block_edit=mbe,
        eos_early_stop=False,
        **IDS,
    )
    assert streamer.put_calls[0] == prompt and streamer.ended == 1
    streamed = [t for chunk in streamer.put_calls[1:] for t in chunk]
    completion = out.sequences[0, 3:].tolist()
    assert (
        streamed == completion[: len(streamed)] and len(streamed) == len([t for t in completion if t != PAD])
    ) or EOS in streamed
    assert streamer.drafts and all(len(d) <= 10 for d in streamer.drafts)


@pytest.mark.parametrize(
    "fields",
    [
        dict(mode="quality"),
        dict(mode="speedy", multi_block_edit=True),
        dict(mode="quality", steps=3, editing_threshold=None, max_post_steps=0),
        dict(mode="llada"),
    ],
    ids=["threshold+edit", "mbe", "quota", "llada"],
)
def test_prompt_end_decodes_exactly_prompt_plus_new_tokens(fields):
    fields = dict(fields)
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        fields.pop("mode"),
        block_length=4,
        max_new_tokens=10,
        output_trace=True,
        eos_early_stop=False,
        **IDS,
        **fields,
    )
    if cfg.steps is not None and cfg.steps > 4:
        cfg = cfg.replace(steps=4)
    out = dllm_edit.generate(
        EXACT_BAG, torch.tensor([[5, 6, 7]]), generation_config=cfg, adapter="bidirectional"
    )
    assert out.sequences.shape == (1, 13) and not (out.sequences == MASK).any()
    first = out.trace[0]
    assert first.masked.sum() == 4  # the first block starts after the prompt: no prompt token in it
    last_block = max(r.block for r in out.trace)
    assert next(r for r in out.trace if r.block == last_block).masked.sum() == 2  # 10 = 4 + 4 + 2
