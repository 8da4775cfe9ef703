"""`torch.compile` on the native MoE classes: the expert dispatch (which experts run, on how many
tokens, read to the host with `tolist`) runs eagerly, so the graphs are built once and a new batch
with another routing recompiles nothing; the logits are those of the eager model.

Before `_dispatch` was excluded from tracing, dynamo guarded each graph on one batch's expert
counts: LLaDA2.x's tiny model built 9 graphs at the second forward and 16 by the twelfth (then hit
the recompile limit and ran eagerly), so a compiled decode was a recompiling one. Three of the four
cases below failed on that code (LLaDA-MoE with `dynamic=True` happened not to recompile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.models import test_llada2_moe, test_llada_moe


def _llada2() -> tuple[torch.nn.Module, int]:
    return test_llada2_moe.native_model(), test_llada2_moe.MASK


def _llada_moe() -> tuple[torch.nn.Module, int]:
    model = test_llada_moe.native_model()
    return model, int(model.config.vocab_size) - 1


# dynamic=False as block_causal_static compiles, dynamic=True as block_causal does
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("build", [_llada2, _llada_moe], ids=["llada2_moe", "llada_moe"])
def test_compiled_moe_builds_its_graphs_once(
    build: Callable[[], tuple[torch.nn.Module, int]], dynamic: bool
) -> None:
    model, top = build()
    graphs: list[int] = []

    def counting_backend(gm: torch.fx.GraphModule, _inputs: Any) -> Callable[..., Any]:
        graphs.append(len(gm.graph.nodes))
        return gm.forward  # the traced aten ops, run as they are (no inductor: the same bits)

    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=dynamic, backend=counting_backend)
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(2, top, (2, 8), generator=generator) for _ in range(8)]  # [B, T] each
    built_after: list[int] = []
    try:
        with torch.no_grad():
            for ids in batches:
                got = compiled(input_ids=ids).logits  # [B, T, V]
                want = model(input_ids=ids).logits  # [B, T, V]
                torch.testing.assert_close(got, want, rtol=0, atol=0)
                built_after.append(len(graphs))
    finally:
        torch._dynamo.reset()
    # the routing differs from batch to batch; the graphs must not (two warm-up calls: dynamo
    # builds the first call's graphs, and may mark a size dynamic at the second)
    assert built_after[2:] == [built_after[1]] * (len(batches) - 2), built_after
