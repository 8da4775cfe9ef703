"""What a run needs, checked against what the model and its adapter can give, before any forward.

`check_run` merges the strategies' `Needs` (`dllm_edit.strategies.merge_needs`) and refuses, with the
reason and the fix, every combination the loop cannot run: a KV cache or `compile` the adapter does
not have, a multi-block-edit window on an adapter without the review copy, WINO's shadow block on an
adapter that cannot build it (or with a cache), a vocabulary-sized field of another size than the
model's logits, a rule that reads the whole canvas (`Needs.whole_canvas`) on a session whose forwards
do not predict the blocks ahead (`check_whole_canvas`, right after the session opens: opening one runs
no forward). What passes here runs: the loop then provides every declared input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dllm_edit.adapters import ModelAdapter
from dllm_edit.adapters.shadow import check_shadow_block
from dllm_edit.strategies import Needs, Strategy, merge_needs
from dllm_edit.vocab import check_strategies_vocab


@dataclass(frozen=True)
class RunPlan:
    """What the checks settled: the merged needs and whether the forwards run the shadow block."""

    needs: Needs
    shadow: bool


def check_run(
    model: Any,
    adapter: ModelAdapter,
    strategies: Sequence[Strategy],
    use_cache: bool,
    compile: bool = False,
) -> RunPlan:
    """Refuse what cannot run, before any forward; return the run's merged needs.

    Raises:
        ValueError: a capability the adapter lacks, or sizes that do not match the model.
    """
    if compile and not adapter.supports_compile:
        raise ValueError(
            f"compile=True but the {adapter.name!r} adapter does not compile its forward (only "
            "'block_causal' does). Set compile=False, or compile the model yourself: "
            "model.forward = torch.compile(model.forward)."
        )
    if use_cache and not adapter.supports_cache:
        raise ValueError(
            f"use_cache=True but the {adapter.name!r} adapter has no exact KV cache (every position sees "
            "later blocks). Set use_cache=False (or None for the adapter's default)."
        )
    needs = merge_needs(s.needs for s in strategies)
    if needs.window and not adapter.supports_multi_block_edit:
        wanting = [type(s).__name__ for s in strategies if s.needs.window]
        raise ValueError(
            f"The {adapter.name!r} adapter does not support multi-block editing, which {', '.join(wanting)} "
            "needs (a window of finished blocks in the span); set multi_block_edit=False."
        )
    shadow = check_shadow_block(adapter, strategies, use_cache)  # WINO's shadow block
    check_strategies_vocab(model, strategies)  # e.g. PC-Sampler's prior against the model's logits
    return RunPlan(needs=needs, shadow=shadow)


def _wanting(strategies: Sequence[Strategy]) -> str:
    return ", ".join(type(s).__name__ for s in strategies if s.needs.whole_canvas)


def check_whole_canvas(
    adapter: ModelAdapter, session: Any, strategies: Sequence[Strategy], plan: RunPlan
) -> None:
    """Refuse a rule that reads the whole canvas on a session that cannot predict it, before any forward.

    A strategy with `Needs(whole_canvas=True)` (e.g. `Prophet(regime="canvas")`) reads one forward's
    candidates for every slot of the completion, including the blocks after the active one; only a
    session whose forwards predict them (`sees_ahead`: bidirectional, shifted, masked LM, the
    approximate prefix cache) gives them. Block-causal attention never lets a block see the blocks
    after it, the dual cache runs only the span, and WINO's shadow block is not such a session.

    Raises:
        ValueError: the session does not see the blocks ahead.
    """
    if not plan.needs.whole_canvas or getattr(session, "sees_ahead", False):
        return
    raise ValueError(
        f"{_wanting(strategies)} reads the whole canvas (Needs.whole_canvas: the answer region or the "
        f"fill of a finished row come from the blocks after the active one), but the {adapter.name!r} "
        "adapter's forwards do not predict the blocks ahead (block-causal attention, the dual cache and "
        "WINO's shadow block run only up to the active block). Use the per-block rule "
        "(e.g. Prophet(regime='block')), or a bidirectional / shifted / masked-LM adapter."
    )
