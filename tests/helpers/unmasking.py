"""Helpers of the tests of Fast-dLLM, EB-Sampler, Dream, LLaDA random and Prophet
(`tests/strategies/test_fast_dllm.py` ... `test_prophet.py`): hand-built one-step contexts, and the
comparison of `dllm_edit.generate` with a port of the authors' decoder (`tests/references/`) under
the `llada` preset, each prompt alone and the prompts batched."""

from __future__ import annotations

import torch

import dllm_edit
from dllm_edit.strategies import StepContext
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


def ctx_of(probs, masked=None, in_block=None, **extra) -> StepContext:
    """A one-step context over `probs` (`[B, S]`): every slot masked unless `masked` says otherwise."""
    probs = torch.as_tensor(probs, dtype=torch.float32)
    if probs.dim() == 1:
        probs = probs[None]
    batch, width = probs.shape
    masked = torch.ones(batch, width, dtype=torch.bool) if masked is None else torch.as_tensor(masked)
    if masked.dim() == 1:
        masked = masked[None].expand(batch, width)
    fields = dict(
        tokens=torch.where(masked, MASK, 9),
        masked=masked,
        editable=~masked,
        in_block=torch.ones(width, dtype=torch.bool) if in_block is None else torch.as_tensor(in_block),
        cand_tokens=torch.arange(width).expand(batch, width) + 2,
        cand_probs=probs,
        step=torch.zeros(batch, dtype=torch.long),
        block_index=0,
        active=torch.ones(batch, dtype=torch.bool),
        mask_token_id=MASK,
    )
    fields.update(extra)
    return StepContext(**fields)


def stats_ctx(logits, masked, **extra) -> StepContext:
    """A context with every statistic, computed from `logits` `[B, S, V]` as the candidate pass does."""
    probs = torch.softmax(logits.float(), dim=-1)  # [B, S, V]
    top2 = probs.topk(2, dim=-1).values  # [B, S, 2]
    top2_logits = logits.float().topk(2, dim=-1).values  # [B, S, 2]
    entropy = -torch.special.xlogy(probs, probs).sum(-1)  # [B, S]
    return ctx_of(
        top2[..., 0],
        masked,
        cand_tokens=probs.argmax(-1),
        top_probs=top2[..., 0],
        second_probs=top2[..., 1],
        logit_gap=top2_logits[..., 0] - top2_logits[..., 1],
        entropy=entropy,
        **extra,
    )


def random_case(seed, batch=1, width=10, vocab=12, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, width, vocab, generator=g) * scale * torch.rand(batch, width, 1, generator=g)
    masked = torch.rand(batch, width, generator=g) < 0.7
    masked[:, 0] = True
    return logits, masked


def commits(strategy, ctx):
    return strategy.step(ctx).commit[0].nonzero().flatten().tolist()


# ----------------------------------------------------------------------------------------------
# end to end against the ports


BAG = BagDenoiser(vocab_size=VOCAB, sharpness=2.0, exact=True)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12], [20], [30, 31, 32, 33, 34, 35, 36, 37, 38]]


def port_config(unmasking, bl, gen, **fields):
    return dllm_edit.EditGenerationConfig.from_mode(
        "llada",
        steps=None,
        unmasking=unmasking,
        block_length=bl,
        max_new_tokens=gen,
        output_trace=True,
        **IDS,
        **fields,
    )


def completions(out, rows):
    """Each row's whole completion (before the EOS cut of the output), from the trace."""
    last = {}
    for record in out.trace:
        last[record.block] = record
    full = torch.cat([last[b].after for b in sorted(last)], dim=1)  # [B, blocks * bl]
    return [full[i] for i in range(rows)]


def compare_with_port(
    model, unmasking, port, bl, gen, adapter="bidirectional", prompts=PROMPTS, batched_model=None
):
    """dllm_edit vs `port(model, prompt) -> (canvas, nfe)`: each prompt alone, then all batched."""
    cfg = port_config(unmasking, bl, gen)
    expected = []
    for prompt in prompts:
        x, nfe = port(model, torch.tensor([prompt]))
        expected.append((x[0, len(prompt) :], int(nfe) if not torch.is_tensor(nfe) else int(nfe[0])))
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert torch.equal(completions(alone, 1)[0], expected[-1][0]), ("alone", prompt)
        assert int(alone.num_forwards[0]) == expected[-1][1], ("alone forwards", prompt)
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(
        batched_model or model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter
    )
    for i, (tokens, nfe) in enumerate(expected):
        assert torch.equal(completions(batch, len(prompts))[i], tokens), ("batched", i)
        assert int(batch.num_forwards[i]) == nfe, ("batched forwards", i)
    return expected


def assert_parallel(expected, gen):
    """The test means something: some row committed several tokens in one forward."""
    assert any(nfe < gen for _, nfe in expected)
