"""Loop actions: what the loop does to the canvas after a step's write, besides the rules' commits
and edits (finish a row, fill after an EOS, freeze a row, ...).

Each action is a `LoopAction` subclass in a file of its own, registered with
`register_loop_action`; the loop applies every registered action whose `enabled(run)` holds, in
registration order, after each step's write. Adding one needs no edit to the loop: write the file,
register the class, import it (the built-ins are imported by `dllm_edit.loop`).

Examples:
    >>> from dllm_edit.loop import LoopAction, loop_actions, register_loop_action, unregister_loop_action
    >>> @register_loop_action
    ... class CountSteps(LoopAction):
    ...     name = "count_steps"
    ...     def apply(self, run, canvas, blk, decision, proposal):
    ...         pass
    >>> [cls.name for cls in loop_actions()]
    ['finish', 'eos_fill', 'count_steps']
    >>> unregister_loop_action("count_steps")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

if TYPE_CHECKING:
    from dllm_edit.loop.block import BlockState
    from dllm_edit.loop.decide import Decision
    from dllm_edit.loop.forward import Proposal
    from dllm_edit.loop.run import DecodeLoop


class LoopAction:
    """One action the loop applies after each step's write.

    Subclasses set `name` (and `order`, where it matters), override `apply`, and may override
    `enabled` (called once per `generate` call) to take part only in some runs. An action may
    change the canvas in place, freeze rows (`blk.active`), or finish them (`run.finished`); it
    must stay vectorised over the rows (no Python loop over rows, no `.item()`).
    """

    name: ClassVar[str] = ""
    #: Where the action runs among the others (lower first; equal: registration order).
    order: ClassVar[int] = 100

    @classmethod
    def enabled(cls, run: DecodeLoop) -> bool:
        """Whether this action takes part in the run (the default: always)."""
        return True

    def apply(
        self, run: DecodeLoop, canvas: torch.Tensor, blk: BlockState, decision: Decision, proposal: Proposal
    ) -> None:
        """Act on `canvas` (`[B, T]`, in place) after the step's write."""
        raise NotImplementedError


_ACTIONS: dict[str, type[LoopAction]] = {}


def register_loop_action(cls: type[LoopAction]) -> type[LoopAction]:
    """Register `cls` (usable as a class decorator); the loop runs the actions by `order`, then in
    registration order.

    Raises:
        TypeError: `cls` is not a `LoopAction` subclass with a non-empty `name`.
        ValueError: another class is registered under that name.
    """
    if not (isinstance(cls, type) and issubclass(cls, LoopAction)) or not cls.name:
        raise TypeError(
            f"register_loop_action expects a LoopAction subclass with a non-empty `name`, got {cls!r}."
        )
    taken = _ACTIONS.get(cls.name)
    if taken is not None and taken is not cls:
        raise ValueError(
            f"A loop action named {cls.name!r} is already registered ({taken.__qualname__}); choose another "
            "name, or unregister_loop_action it first."
        )
    _ACTIONS[cls.name] = cls
    return cls


def unregister_loop_action(name: str) -> None:
    """Remove the action registered as `name`.

    Raises:
        ValueError: no action has that name.
    """
    if name not in _ACTIONS:
        raise ValueError(f"No loop action named {name!r}; registered: {list(_ACTIONS)}.")
    del _ACTIONS[name]


def loop_actions() -> list[type[LoopAction]]:
    """The registered action classes, in the order the loop applies them."""
    return sorted(_ACTIONS.values(), key=lambda cls: cls.order)  # stable: registration order on ties
