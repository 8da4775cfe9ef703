"""Per-row state across blocks (`Needs(across_blocks=True)`): the loop hands a strategy's state from a
row's last active step of one block to its first step of the next, and steps where a row is frozen
never change it, so a row decodes the same in a batch as alone.

The rule below writes, at the leftmost mask of the block, the number of steps it has run for the
row: carried across blocks the completion counts up over the whole run; reset per block it counts
up again in every block. Blocks start at absolute positions, so rows of different prompt lengths
hold different numbers of masks in their first block and finish it at different steps: a row that
is frozen while the others decode must keep its count.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import Needs, StepContext, StepResult, Strategy
from dllm_edit.strategies.selection import masked_in_block, masked_ranks
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad

FIRST = 2  # the token written at a row's first step (not PAD, not EOS)


@dataclass(frozen=True)
class CountingRule(Strategy):
    """Fill the leftmost mask with `FIRST + steps run so far` (the count lives in the state)."""

    across: bool = True
    unmasks = True

    def requires(self) -> Needs:
        return Needs(across_blocks=self.across)

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        count = ctx.state.get("count", torch.zeros_like(ctx.step))  # [B]
        slots = torch.arange(masked.shape[1], device=masked.device).expand_as(masked)  # [B, S]
        commit = masked & (masked_ranks(-slots.float(), masked) == 0)  # [B, S] the leftmost mask
        tokens = (FIRST + count)[:, None].expand_as(ctx.tokens)  # [B, S]
        return StepResult(
            commit=commit, edit=torch.zeros_like(commit), tokens=tokens, state={"count": count + 1}
        )


PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13], [20]]  # 1, 3 and 3 masks in the first block of 4


def _config(rule: Strategy) -> dllm_edit.EditGenerationConfig:
    return dllm_edit.EditGenerationConfig(
        unmasking=rule,
        block_length=4,
        max_new_tokens=10,
        block_start="absolute",
        editing_threshold=None,
        max_post_steps=0,
        eos_early_stop=False,
        suppress_mask_token=False,
        max_steps_per_block=None,
        mask_token_id=MASK,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )


MODEL = BagDenoiser(vocab_size=VOCAB, sharpness=3.0, exact=True, seed=1)


def _completions(rule: Strategy, prompts: list[list[int]]) -> list[list[int]]:
    ids, mask = left_pad(prompts)
    out = dllm_edit.generate(
        MODEL, ids, attention_mask=mask, generation_config=_config(rule), adapter="bidirectional"
    )
    return [row[len(ids[0]) :].tolist() for row in out.sequences]


def test_state_lives_across_blocks_and_frozen_rows_keep_theirs():
    batch = _completions(CountingRule(), PROMPTS)
    for prompt, row in zip(PROMPTS, batch):
        assert row == list(range(FIRST, FIRST + 10)), prompt  # one count over the whole run
        assert _completions(CountingRule(), [prompt])[0] == row  # batch == alone


def test_without_the_opt_in_the_state_restarts_at_every_block():
    for prompt, row in zip(PROMPTS, _completions(CountingRule(across=False), PROMPTS)):
        first = 4 - len(prompt) % 4  # masks of the first block
        counts = list(range(first)) + [0, 1, 2, 3] * 3
        assert row == [FIRST + c for c in counts[:10]], prompt


def test_the_opt_in_is_declared_once_and_merged():
    assert Needs(across_blocks=True) | Needs() == Needs(across_blocks=True)
    assert not Needs().across_blocks
    with pytest.raises(TypeError, match="across_blocks"):
        Needs(across_blocks=1)
