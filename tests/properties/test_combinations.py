"""Every combination the registry can form decodes, or is refused with a reason before any forward.

The combinations: each registered unmasking rule beside each registered strategy (`[rule, other]`:
editing, multi-block editing, remasking, a second unmasking rule), and inside each combinator (a
registered rule with a `base` field, e.g. `Prophet(base=rule)`), on each built-in adapter kind. A
combination either decodes a small batch to the end, or raises a `ValueError` / `TypeError`
before the model's first forward (the strategies' merged `Needs` against what the adapter can
give, `dllm_edit.run_checks`). The lists are read from the registry, so a new rule (a plugin
included) is tried in every combination as soon as it is registered.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.strategies import Strategy, available_strategies, get_strategy
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad, tiny_llama
from tests.helpers.registry import build

BLOCK = 4
# (adapter, model): the bag-of-tokens denoiser under every adapter kind (it takes any mask and no
# cache), and a tiny random Llama under the block-causal adapter with its KV cache
ADAPTERS = ("bidirectional", "block_causal", "shifted", "masked_lm", "block_causal+cache")


def model_for(adapter: str) -> tuple[torch.nn.Module, list[int]]:
    """The model of an `ADAPTERS` entry and a list whose length counts its forwards."""
    model = tiny_llama("eager", seed=0) if adapter.endswith("+cache") else BagDenoiser(MASK + 1, exact=True)
    calls: list[int] = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    return model, calls


COMBINATORS = [
    name
    for name in available_strategies()
    if "base" in {f.name for f in dataclasses.fields(get_strategy(name))}
]


def combinations(rule: str) -> list[tuple[str, list[Strategy]]]:
    """`(label, strategies)` for every combination the registry forms with the unmasking `rule`."""
    out = [(f"[{rule}]", [build(rule, BLOCK)])]
    out += [
        (f"[{rule}, {other}]", [build(rule, BLOCK), build(other, BLOCK)]) for other in available_strategies()
    ]
    for combinator in COMBINATORS:
        held = get_strategy(combinator)(base=build(rule, BLOCK))  # type: ignore[call-arg]
        out.append((f"[{combinator}(base={rule})]", [held]))
    return out


def decode(strategies: list[Strategy], adapter: str) -> tuple[torch.Tensor | None, Exception | None, int]:
    """Decode a small batch: `(sequences or None, the refusal or None, forwards run)`."""
    ids, mask = left_pad([[3, 4, 5], [6, 7]])
    model, calls = model_for(adapter)
    try:
        config = dllm_edit.EditGenerationConfig(
            strategies=strategies,
            block_length=BLOCK,
            max_new_tokens=2 * BLOCK,
            mask_token_id=MASK,
            eos_token_id=EOS,
            pad_token_id=PAD,
            use_cache=adapter.endswith("+cache"),
        )
        out = dllm_edit.generate(
            model,
            ids,
            attention_mask=mask,
            generation_config=config,
            adapter=adapter.removesuffix("+cache"),
            generator=torch.Generator().manual_seed(0),
        )
    except (ValueError, TypeError) as error:
        return None, error, len(calls)
    return out.sequences, None, len(calls)


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("rule", unmasking_strategies())
def test_every_combination_decodes_or_is_refused_before_a_forward(rule, adapter):
    for label, strategies in combinations(rule):
        sequences, refusal, forwards = decode(strategies, adapter)
        if refusal is not None:
            assert forwards == 0, f"{label} on {adapter!r} was refused after {forwards} forwards: {refusal}"
            assert str(refusal), f"{label} on {adapter!r} was refused without a reason"
        else:
            assert sequences is not None and not (sequences == MASK).any(), (
                f"{label} on {adapter!r} left a mask"
            )


@pytest.mark.parametrize("rule", unmasking_strategies())
def test_every_rule_runs_alone_on_some_adapter(rule):
    ran = [adapter for adapter in ADAPTERS if decode([build(rule, BLOCK)], adapter)[1] is None]
    assert ran, f"{rule} is refused on every adapter"


def test_a_combinator_brings_its_base_s_needs():
    """The merge is what makes a combination run: WINO inside Prophet still gets its shadow block."""
    if "prophet" not in COMBINATORS or "wino" not in available_strategies():
        pytest.skip("needs the built-in prophet and wino")
    held = get_strategy("prophet")(base="wino")  # type: ignore[call-arg]
    assert held.needs.shadow_block and held.needs.remasks and "logit_gap" in held.needs.stats
    ids, mask = left_pad([[3, 4, 5]])
    model = BagDenoiser(vocab_size=MASK + 1, sharpness=1.5, exact=True)
    config = dllm_edit.EditGenerationConfig(
        strategies=[held],
        block_length=BLOCK,
        max_new_tokens=BLOCK,
        mask_token_id=MASK,
        eos_token_id=EOS,
        use_cache=False,
    )
    with pytest.raises(ValueError, match="shadow block"):
        dllm_edit.generate(model, ids, attention_mask=mask, generation_config=config, adapter="block_causal")
    assert model.calls == 0
    out = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=config, adapter="bidirectional"
    )
    assert not (out.sequences == MASK).any() and model.calls > 0
