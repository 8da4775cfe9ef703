"""The loop's loose ends, tied: the trace records what a finish (and `eos_fill`) wrote outside the
span, and `tokens_per_forward` counts every slot the decoder wrote (the prompt's masks too)."""

from __future__ import annotations

import torch

import dllm_edit
from dllm_edit.replay import trace_document
from tests.helpers import EOS, MASK, left_pad, tiny_tokenizer
from tests.helpers.unmasking import BAG, PROMPTS, port_config


def _prophet_fires_at_once(bl: int = 4) -> dict:
    base = {
        "type": "QuotaUnmask",
        "steps": bl,
        "block_length": bl,
        "threshold": 1.0,
        "spread": "masked_count",
    }
    return {
        "type": "prophet",
        "base": base,
        "thresholds": (-1.0, -1.0, -1.0),
        "answer_start": 2,
        "regime": "canvas",
    }


def _replayed(out, width: int) -> torch.Tensor:
    """Each row's completion rebuilt from the trace alone: the span after each step, then the slots
    the loop actions filled."""
    canvas = torch.full((out.sequences.shape[0], width + out.sequences.shape[1]), MASK)  # [B, T+]
    for record in out.trace:
        span = slice(record.span_start, record.span_start + record.after.shape[1])
        canvas[:, span] = torch.where(record.active[:, None], record.after, canvas[:, span])
        if record.filled is not None:
            t = record.filled.shape[1]
            canvas[:, :t] = torch.where(record.filled, record.filled_tokens, canvas[:, :t])
    return canvas


def test_the_trace_records_a_finish_outside_the_span():
    ids, mask = left_pad(PROMPTS)
    width, gen = ids.shape[1], 12
    cfg = port_config(_prophet_fires_at_once(), 4, gen, eos_early_stop=False)
    out = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional")
    assert out.num_forwards.tolist() == [1] * len(PROMPTS)  # every row finished at its first forward
    (record,) = out.trace
    assert record.filled is not None and bool(
        record.filled[:, record.span_start + 4 :].any()
    )  # after the span
    canvas = _replayed(out, width)
    for row in range(len(PROMPTS)):
        # the completion the trace rebuilds is the one returned (before its EOS cut)
        n, start = int(out.completion_lengths[row]), int(out.completion_start[row])
        rebuilt = canvas[row, start : start + n]
        assert torch.equal(rebuilt, out.sequences[row, width : width + n])
        doc = trace_document(out, tiny_tokenizer(), ids, row=row, attention_mask=mask)
        positions = {e["position"] for s in doc["steps"] for e in s["committed"]}
        assert positions == set(range(gen))  # every completion position: committed or filled
        assert any(e.get("filled") for s in doc["steps"] for e in s["committed"])


def test_the_trace_records_eos_fill():
    ids, mask = left_pad(PROMPTS)
    cfg = port_config(
        {"type": "threshold_unmask", "threshold": 1.0}, 4, 16, eos_early_stop=False, eos_fill=True
    )
    out = dllm_edit.generate(BAG, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional")
    filled = [r for r in out.trace if r.filled is not None]
    assert filled, "no row wrote an EOS before its last block: pick other prompts"
    for record in filled:
        assert bool((record.filled_tokens[record.filled] == EOS).all())  # eos_fill writes EOS only


def test_tokens_per_forward_counts_the_prompt_masks_filled():
    ids, mask = left_pad([[3, MASK, MASK, 5, 6, MASK, 7], [6, MASK, 7]])
    prompt_masks = ((ids == MASK) & mask.bool()).sum(-1)  # [B]
    for gen in (0, 4):
        cfg = port_config({"type": "threshold_unmask", "threshold": 1.0}, 4, gen, eos_early_stop=False)
        out = dllm_edit.generate(
            BAG, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
        )
        written = (out.completion_lengths + prompt_masks).float()
        assert torch.equal(out.tokens_per_forward, written / out.num_forwards.float())
        assert bool((out.tokens_per_forward > 0).all())  # a fill-only run does not report 0
