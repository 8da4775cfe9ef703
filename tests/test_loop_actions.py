"""A new loop action is one file plus one test, with no edit to the loop: this file is both.

`FreezeAfter` freezes each row after a fixed number of forwards in a block, filling what is left of
the block with the step's candidates: a budget cap per block written as an action, not as a loop
change.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

import dllm_edit
from dllm_edit.loop import LoopAction, loop_actions, register_loop_action, unregister_loop_action
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


class FreezeAfter(LoopAction):
    """Once a row has spent `forwards` forwards in the block, its block's masks take the step's
    candidates and the row stops decoding the block."""

    name = "freeze_after"
    forwards: ClassVar[int] = 1

    def apply(self, run, canvas, blk, decision, proposal):
        spent = blk.active & (blk.steps >= self.forwards)  # [B]
        span = canvas[:, blk.span]  # [B, S]
        fill = (span == run.special.mask) & blk.in_block & spent[:, None]  # [B, S]
        canvas[:, blk.span] = torch.where(fill, proposal.cand.token, span)
        blk.active = blk.active & ~spent


def _decode(**fields):
    config = dllm_edit.EditGenerationConfig(
        **{
            "block_length": 4,
            "max_new_tokens": 8,
            "threshold": 0.99,
            "eos_early_stop": False,
            **IDS,
            **fields,
        }
    )
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    return dllm_edit.generate(BagDenoiser(VOCAB), ids, generation_config=config, adapter="bidirectional")


def test_a_registered_action_runs_in_the_loop():
    plain = _decode()
    register_loop_action(FreezeAfter)
    frozen = _decode()
    assert [cls.name for cls in loop_actions()] == ["finish", "eos_fill", "freeze_after"]
    assert bool((plain.num_forwards > 2).all())  # a high threshold takes several forwards per block
    assert frozen.num_forwards.tolist() == [2, 2]  # one forward per block, two blocks
    assert not bool((frozen.sequences == MASK).any())
    unregister_loop_action("freeze_after")
    assert torch.equal(_decode().sequences, plain.sequences)


def test_an_action_can_take_part_only_in_some_runs():
    class OnlyWithTrace(FreezeAfter):
        name = "freeze_with_trace"

        @classmethod
        def enabled(cls, run):
            return bool(run.config.output_trace)

    register_loop_action(OnlyWithTrace)
    assert bool((_decode().num_forwards > 2).all())
    assert _decode(output_trace=True).num_forwards.tolist() == [2, 2]


def test_actions_run_by_order_then_registration():
    class Early(LoopAction):
        name, order = "early", 0

    class Late(LoopAction):
        name = "late"

    register_loop_action(Late)
    register_loop_action(Early)
    assert [cls.name for cls in loop_actions()] == ["early", "finish", "eos_fill", "late"]


def test_bad_registrations_are_refused():
    with pytest.raises(TypeError, match="LoopAction subclass with a non-empty `name`"):
        register_loop_action(object)  # type: ignore[arg-type]

    class Nameless(LoopAction):
        pass

    with pytest.raises(TypeError, match="non-empty `name`"):
        register_loop_action(Nameless)

    class Clash(LoopAction):
        name = "finish"

    with pytest.raises(ValueError, match="'finish' is already registered"):
        register_loop_action(Clash)
    with pytest.raises(ValueError, match="No loop action named 'nope'"):
        unregister_loop_action("nope")
