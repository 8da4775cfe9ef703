"""Helpers of the KLASS, PC-Sampler and WINO tests (`tests/strategies/test_klass.py`,
`test_pc_sampler.py`, `test_wino.py`): a one-block context, decoding under LLaDA-1's settings (the
ports' settings), and the whole completions read from the trace."""

from __future__ import annotations

import torch

import dllm_edit
from dllm_edit.strategies import StepContext
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
BAG = BagDenoiser(vocab_size=VOCAB, sharpness=3.0, exact=True, seed=1)
SOFT_BAG = BagDenoiser(vocab_size=VOCAB, sharpness=1.5, exact=True, seed=2)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [20]]


def ctx_of(probs, masked=None, **fields):
    """A one-block StepContext over `probs` `[B, S]` (every slot masked unless `masked` says)."""
    probs = torch.as_tensor(probs, dtype=torch.float32)
    batch, width = probs.shape
    masked = torch.ones(batch, width, dtype=torch.bool) if masked is None else torch.as_tensor(masked)
    base = dict(
        tokens=torch.where(masked, MASK, 3),
        masked=masked,
        editable=~masked,
        in_block=torch.ones(width, dtype=torch.bool),
        cand_tokens=torch.arange(width).expand(batch, width) + 2,
        cand_probs=probs,
        step=torch.zeros(batch, dtype=torch.long),
        block_index=0,
        active=torch.ones(batch, dtype=torch.bool),
        block_masked=masked.sum(-1),
        mask_token_id=MASK,
        positions=torch.arange(width).expand(batch, width),
    )
    base.update(fields)
    return StepContext(**base)


def llada1_config(strategy, bl, gen, **extra):
    return dllm_edit.EditGenerationConfig(
        unmasking=strategy,
        block_length=bl,
        max_new_tokens=gen,
        block_start="prompt_end",
        editing_threshold=None,
        max_post_steps=0,
        eos_early_stop=False,
        suppress_mask_token=False,
        max_steps_per_block=None,
        output_trace=True,
        **IDS,
        **extra,
    )


def completions(out):
    """Every row's whole completion `[B, G]` before the EOS cut (the last step of each block)."""
    last = {}
    for record in out.trace:
        last[record.block] = record
    return torch.cat([last[b].after for b in sorted(last)], dim=1)


def decode_both(model, strategy, prompts, bl, gen, batched_model=None):
    """dllm_edit with `strategy` on the prompts batched (left-padded; on `batched_model` if given, e.g.
    a float64 copy, see test_adapters.py) and alone: (completions [B, G], forwards [B], ...alone)."""
    cfg = llada1_config(strategy, bl, gen)
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(
        batched_model or model, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
    )
    alone = [
        dllm_edit.generate(model, torch.tensor([p]), generation_config=cfg, adapter="bidirectional")
        for p in prompts
    ]
    return (
        completions(batch),
        batch.num_forwards.tolist(),
        [completions(a)[0] for a in alone],
        [int(a.num_forwards[0]) for a in alone],
    )
