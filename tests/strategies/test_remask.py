"""LowConfidenceRemask: its rule, its loop guard, re-drafting with every adapter, and the current score.

The decoding invariants with it in the list are a property, in `tests/properties/test_remask_properties.py`.
"""

import dataclasses

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import (
    LowConfidenceRemask,
    StepContext,
    ThresholdUnmask,
    TokenEdit,
    get_strategy,
    strategy_from_dict,
)
from tests.helpers import EOS, MASK, PAD, BagDenoiser, tiny_llama
from tests.helpers.traces import remask_slots

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=48, sharpness=1.0)  # soft logits: many candidates below a threshold


def context(probs, step=0, editable=None, mask_token_id=MASK):
    probs = torch.tensor(probs)  # [B, S]
    tokens = torch.arange(probs.numel()).reshape(probs.shape) + 2  # [B, S]
    return StepContext(
        tokens=tokens,
        masked=torch.zeros_like(tokens, dtype=torch.bool),
        editable=torch.ones_like(tokens, dtype=torch.bool) if editable is None else torch.tensor(editable),
        in_block=torch.ones(tokens.shape[1], dtype=torch.bool),
        cand_tokens=tokens,
        cand_probs=probs,
        step=torch.full((tokens.shape[0],), step),
        block_index=0,
        active=torch.ones(tokens.shape[0], dtype=torch.bool),
        mask_token_id=mask_token_id,
    )


def test_rule_budget_and_guard():
    strategy = LowConfidenceRemask(threshold=0.5, max_steps=2, max_per_step=2)
    ctx = context([[0.4, 0.1, 0.6, 0.2, 0.5]], step=1)
    result = strategy.step(ctx)
    # strictly below 0.5, the two least confident: positions 1 and 3 (0.4 passes but the budget is 2)
    assert result.edit.tolist() == [[False, True, False, True, False]]
    assert result.tokens[result.edit].eq(MASK).all() and not result.commit.any()
    assert torch.equal(result.tokens[~result.edit], ctx.tokens[~result.edit])
    assert not strategy.step(context([[0.1, 0.1]], step=2)).edit.any()  # the guard: only steps 0, 1
    prompt = context([[0.1, 0.1]], editable=[[False, True]])
    assert strategy.step(prompt).edit.tolist() == [[False, True]]  # the prompt is never remasked
    with pytest.raises(LookupError, match="mask_token_id"):  # a hand-built context without it
        strategy.step(context([[0.1]], mask_token_id=None))


def test_fields_are_validated_and_round_trip():
    for bad in (dict(max_steps=0), dict(max_per_step=0), dict(max_steps=True), dict(threshold=1.5)):
        error = TypeError if bad == dict(max_steps=True) else ValueError  # a bool is not an int
        with pytest.raises(error, match=next(iter(bad)).replace("threshold", "remask_threshold")):
            LowConfidenceRemask(**bad)
    strategy = LowConfidenceRemask(threshold=0.2, max_steps=3, max_per_step=2)
    assert get_strategy("LowConfidenceRemask") is LowConfidenceRemask
    assert strategy_from_dict(strategy.to_dict()) == strategy
    cfg = dllm_edit.EditGenerationConfig(strategies=[ThresholdUnmask(0.5), strategy], block_length=4, **IDS)
    assert cfg.replace(max_new_tokens=8).strategies == [ThresholdUnmask(0.5), strategy]


def test_a_cap_too_small_for_the_guard_is_refused():
    strategies = [ThresholdUnmask(0.5), LowConfidenceRemask(max_steps=4)]
    with pytest.raises(ValueError, match=r"max_steps_per_block`=10 is below the 12"):
        dllm_edit.EditGenerationConfig(
            strategies=strategies, block_length=4, max_post_steps=4, max_steps_per_block=10
        )
    with pytest.raises(ValueError, match="max_steps_per_block"):  # auto cap 2*4+4 = 12 < 4 + 4 + 5
        dllm_edit.EditGenerationConfig(
            strategies=[ThresholdUnmask(0.5), LowConfidenceRemask(max_steps=5)],
            block_length=4,
            max_post_steps=4,
        )


def test_remasking_redrafts_and_works_with_every_adapter_and_the_cache():
    strategies = [ThresholdUnmask(0.5), TokenEdit(0.9), LowConfidenceRemask(threshold=0.6, max_steps=4)]
    cfg = dllm_edit.EditGenerationConfig(
        strategies=strategies, block_length=4, max_new_tokens=8, max_post_steps=2, **IDS
    )
    ids = torch.tensor([[5, 6, 7], [9, 10, 11]])
    llama = tiny_llama(seed=3)
    off = dllm_edit.generate(llama, ids, generation_config=cfg, use_cache=False, output_trace=True)
    on = dllm_edit.generate(llama, ids, generation_config=cfg, use_cache=True)
    assert torch.equal(on.sequences, off.sequences) and torch.equal(on.num_forwards, off.num_forwards)
    assert any(remask_slots(rec).any() for rec in off.trace)  # a random model is unsure: it remasks
    plain = dllm_edit.generate(llama, ids, generation_config=cfg.replace(strategies=strategies[:2]))
    assert (off.num_forwards > plain.num_forwards).any()  # redrafting costs forwards
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    bert = BertForMaskedLM(
        BertConfig(
            vocab_size=MASK + 1,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=64,
        )
    ).eval()
    for model, adapter in ((llama, "bidirectional"), (llama, "shifted"), (bert, "masked_lm")):
        out = dllm_edit.generate(model, ids, generation_config=cfg, adapter=adapter, output_trace=True)
        assert not (out.sequences[:, 3:] == MASK).any()
        assert any(remask_slots(rec).any() for rec in out.trace)


def test_current_score_reads_the_written_tokens_probability():
    ctx = dataclasses.replace(context([[0.9, 0.9, 0.2]]), current_probs=torch.tensor([[0.1, 0.8, 0.2]]))
    by_candidate = LowConfidenceRemask(threshold=0.3, max_per_step=3).step(ctx)
    by_current = LowConfidenceRemask(threshold=0.3, max_per_step=3, score="current").step(ctx)
    assert by_candidate.edit.tolist() == [[False, False, True]]
    assert by_current.edit.tolist() == [[True, False, True]]  # position 0: written token at q = 0.1
    assert not LowConfidenceRemask().needs_current_probs
    strategy = LowConfidenceRemask(score="current")
    assert strategy.needs_current_probs and strategy_from_dict(strategy.to_dict()) == strategy
    with pytest.raises(LookupError, match="current_prob"):  # a hand-built context without it
        strategy.step(context([[0.5]]))
    with pytest.raises(ValueError, match="score"):
        LowConfidenceRemask(score="written")


@pytest.mark.parametrize("score", ["candidate", "current"])
def test_the_loop_computes_current_probs_only_when_asked(monkeypatch, score):
    seen = []
    step = LowConfidenceRemask.step

    def spy(self, ctx):
        seen.append(ctx)
        return step(self, ctx)

    monkeypatch.setattr(LowConfidenceRemask, "step", spy)
    strategies = [ThresholdUnmask(0.5), TokenEdit(0.9), LowConfidenceRemask(0.6, max_steps=4, score=score)]
    cfg = dllm_edit.EditGenerationConfig(
        strategies=strategies, block_length=4, max_new_tokens=8, max_post_steps=2, **IDS
    )
    ids = torch.tensor([[5, 6, 7], [9, 10, 11]])
    llama = tiny_llama(seed=3)
    off = dllm_edit.generate(llama, ids, generation_config=cfg, use_cache=False, output_trace=True)
    on = dllm_edit.generate(llama, ids, generation_config=cfg, use_cache=True)
    assert torch.equal(on.sequences, off.sequences) and not (off.sequences[:, 3:] == MASK).any()
    assert seen and any(remask_slots(rec).any() for rec in off.trace)
    if score == "candidate":
        assert all(ctx.current_probs is None for ctx in seen)
        return
    for ctx in seen:
        written = ctx.editable & ctx.active[:, None]  # [B, S]
        q, p = ctx.current_probs[written], ctx.cand_probs[written]
        assert (q <= p + 1e-6).all()  # greedy: the written token is at most as likely as the argmax
        same = (ctx.cand_tokens == ctx.tokens)[written]
        torch.testing.assert_close(q[same], p[same])  # where it is the argmax, q is p
