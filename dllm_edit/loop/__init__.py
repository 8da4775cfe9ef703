"""The decoding loop as a sequence of steps, one module each (`dllm_edit.generate` drives it).

| step | module | in -> out |
|---|---|---|
| lay out the block | `block` | canvas, block -> `BlockState` |
| block-end rule, device read | `top_of_step` | canvas, `BlockState` -> `StepTop` or None |
| forward and candidates | `forward` | canvas, `BlockState`, tokens -> `Proposal` |
| the statistics the rules need | `statistics` | `StepTop`, `Proposal` -> `StepContext` |
| the rules decide | `decide` | `StepContext` -> `Decision` |
| commit, edit, remask; trace | `write`, `trace` | `Decision` -> canvas (in place), `StepRecord` |
| finish, fill, freeze, ... | `actions` (+ `finish`, `eos_fill`) | `Decision`, `Proposal` -> canvas, rows |
| the loop itself | `run` | `DecodeLoop.run(canvas)` |

A new loop action is one file with a registered `LoopAction` (`dllm_edit.loop.actions`); a new
rule is one file with a registered `Strategy` (`dllm_edit.strategies`); neither edits the loop.
"""

from __future__ import annotations

from dllm_edit.loop import eos_fill, finish  # noqa: F401  (the built-in actions register on import)
from dllm_edit.loop.actions import LoopAction, loop_actions, register_loop_action, unregister_loop_action
from dllm_edit.loop.block import BlockState
from dllm_edit.loop.decide import Decision
from dllm_edit.loop.forward import Proposal
from dllm_edit.loop.run import DecodeLoop
from dllm_edit.loop.top_of_step import StepTop

__all__ = [
    "BlockState",
    "Decision",
    "DecodeLoop",
    "LoopAction",
    "Proposal",
    "StepTop",
    "loop_actions",
    "register_loop_action",
    "unregister_loop_action",
]
