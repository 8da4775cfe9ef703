"""KLASS (`KLASS`): commit the slots whose confidence is high and whose distribution has settled
(KL to the previous forwards below κ over the whole history), the rule on hand-built steps, and
exactness against the port of the authors' code (`tests/references/klass.py`) on tiny random models,
solo and batched.

The end-to-end runs use LLaDA-1's settings (blocks from the prompt's end, no editing, no post steps,
no EOS stop, no mask-token guard, no forward cap): tokens of the whole completion (from the trace,
before the EOS cut) and forwards must be the reference's.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import dllm_edit
from dllm_edit.strategies import KLASS, StepContext
from tests.helpers import MASK, VOCAB, BagDenoiser, left_pad, tiny_llama
from tests.helpers.llada1 import BAG, PROMPTS, completions, ctx_of, decode_both, llada1_config
from tests.references import klass as ref_klass

# ----------------------------------------------------------------------------------------------
# the rule


def test_klass_thresholds_are_strict_and_need_the_whole_history():
    history = torch.tensor([[[0.001, 0.001], [0.001, 0.001], [0.001, 0.5], [0.001, 0.001]]])  # [1, 4, 2]
    kl = torch.tensor([[0.001, 0.015, 0.001, 0.001]])  # slot 1: KL == κ is not stable (strict <)
    ctx = ctx_of([[0.9, 0.9, 0.9, 0.6]], kl_prev=kl, step=torch.tensor([2]), state={"kl_history": history})
    out = KLASS().step(ctx)
    # slot 2 moved one forward ago (0.5 in its history), slot 3 has c == τ_c (strict >)
    assert out.commit.tolist() == [[True, False, False, False]]
    assert out.state["kl_history"][0, :, -1].tolist() == pytest.approx(kl[0].tolist())
    assert out.state["kl_history"][0, :, 0].tolist() == pytest.approx([0.001, 0.001, 0.5, 0.001])


def test_klass_block_start_has_no_history_and_falls_back_to_top_k():
    # state empty (a block's first step): missing history counts as unstable whatever kl_prev says
    ctx = ctx_of([[0.5, 0.99, 0.99, 0.2]], kl_prev=torch.zeros(1, 4))
    out = KLASS().step(ctx)
    assert out.commit.tolist() == [[False, True, False, False]]  # top-1; the tie 0.99/0.99 to the lower slot
    assert out.state["kl_history"].shape == (1, 4, 2) and math.isinf(out.state["kl_history"][0, 0, 0])
    # history_length=1: this step's KL alone decides
    assert KLASS(history_length=1).step(ctx).commit.tolist() == [[False, True, True, False]]
    # LLaDA-1's quota in the fallback: 8 masks over 4 steps -> 2 per step, at least 1 beyond
    wide = ctx_of(
        [[0.1, 0.4, 0.3, 0.2]], kl_prev=torch.full((1, 4), math.inf), block_masked=torch.tensor([8])
    )
    assert KLASS(steps=4).step(wide).commit.tolist() == [[False, True, True, False]]
    late = ctx_of(
        [[0.1, 0.4, 0.3, 0.2]],
        kl_prev=torch.full((1, 4), math.inf),
        block_masked=torch.tensor([2]),
        step=torch.tensor([5]),
    )
    assert KLASS(steps=4).step(late).commit.sum() == 1


@pytest.mark.parametrize(
    "choice, expected",
    [
        ("all", [True, True, True, False]),
        ("max_conf", [False, True, False, False]),
        ("min_kl", [False, False, True, False]),
    ],
)
def test_klass_unmask_strategies(choice, expected):
    kl = torch.tensor([[0.002, 0.003, 0.001, 0.001]])
    history = torch.full((1, 4, 2), 0.001)
    ctx = ctx_of([[0.7, 0.9, 0.8, 0.3]], kl_prev=kl, step=torch.tensor([3]), state={"kl_history": history})
    assert KLASS(unmask_strategy=choice).step(ctx).commit[0].tolist() == expected


def test_klass_ties_go_to_the_lower_slot_and_random_uses_the_generator():
    history = torch.full((1, 5, 2), 0.001)
    ctx = ctx_of(
        [[0.8, 0.9, 0.9, 0.7, 0.1]], kl_prev=torch.full((1, 5), 0.001), state={"kl_history": history}
    )
    assert KLASS(unmask_strategy="max_conf").step(ctx).commit[0].tolist() == [
        False,
        True,
        False,
        False,
        False,
    ]
    assert KLASS(unmask_strategy="min_kl").step(ctx).commit[0].tolist() == [True, False, False, False, False]
    picks = set()
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        commit = (
            KLASS(unmask_strategy="random").step(StepContext(**{**ctx.__dict__, "generator": g})).commit[0]
        )
        assert int(commit.sum()) == 1 and not commit[4]  # one ready slot (slot 4 is unsure)
        again = KLASS(unmask_strategy="random").step(
            StepContext(**{**ctx.__dict__, "generator": torch.Generator().manual_seed(seed)})
        )
        assert torch.equal(again.commit[0], commit)
        picks.add(int(commit.nonzero()))
    assert len(picks) > 1


def test_klass_rows_are_independent():
    a = ctx_of(
        [[0.9, 0.2, 0.7]],
        kl_prev=torch.tensor([[0.001, 0.0, 0.5]]),
        state={"kl_history": torch.full((1, 3, 2), 0.001)},
    )
    b = ctx_of(
        [[0.1, 0.65, 0.3]],
        kl_prev=torch.tensor([[0.2, 0.01, 0.0]]),
        state={"kl_history": torch.full((1, 3, 2), 0.2)},
    )
    both = ctx_of(
        torch.cat([a.cand_probs, b.cand_probs]),
        kl_prev=torch.cat([a.kl_prev, b.kl_prev]),
        state={"kl_history": torch.cat([a.state["kl_history"], b.state["kl_history"]])},
    )
    out = KLASS().step(both).commit
    assert out[0].tolist() == KLASS().step(a).commit[0].tolist() == [True, False, False]
    assert out[1].tolist() == KLASS().step(b).commit[0].tolist() == [False, True, False]


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(conf_threshold=1.5), ValueError, "conf_threshold"),
        (dict(kl_threshold=0.0), ValueError, r"`kl_threshold` of KLASS must be a finite float > 0.*got 0.0"),
        (dict(kl_threshold="0.01"), TypeError, "kl_threshold"),
        (dict(history_length=0), ValueError, r"`history_length` of KLASS must be an int >= 1.*got 0"),
        (dict(history_length=2.0), TypeError, "history_length"),
        (dict(unmask_strategy="max_confidence"), ValueError, r"unmask_strategy.*Did you mean 'max_conf'"),
        (dict(steps=0), ValueError, r"`steps` of KLASS must be None or an int >= 1"),
    ],
)
def test_klass_bad_values_name_the_field(fields, error, match):
    with pytest.raises(error, match=match):
        KLASS(**fields)


def test_klass_declares_kl_and_refuses_a_context_without_it():
    assert KLASS().needs_stats == frozenset({"kl"}) and KLASS().unmasks
    assert KLASS().needs.stats == {"kl"}
    with pytest.raises(LookupError, match="'kl'"):  # a hand-built context without it
        KLASS().step(ctx_of([[0.9]]))


# ----------------------------------------------------------------------------------------------
# exactness against the authors' decoder


KLASS_SETTINGS = [
    dict(),  # the paper's defaults: τ_c 0.6, κ 0.015, h 2
    dict(conf_threshold=0.3, kl_threshold=0.5, history_length=1),
    dict(conf_threshold=0.3, kl_threshold=0.3, history_length=2, unmask_strategy="max_conf"),
    dict(conf_threshold=0.2, kl_threshold=0.5, history_length=1, unmask_strategy="min_kl"),
]


def _klass_reference(model, prompt, bl, gen, carry, fields, counts=None):
    names = dict(
        conf_threshold="conf_threshold", kl_threshold="kl_threshold", history_length="kl_history_length"
    )
    kwargs = {names.get(k, k): v for k, v in fields.items()}
    x, n = ref_klass.stable_confident_decode(
        model,
        torch.tensor([prompt]),
        mask_id=MASK,
        gen_length=gen,
        steps=gen,
        block_length=bl,
        carry_across_blocks=carry,
        counts=counts,
        **kwargs,
    )
    return x[0, len(prompt) :], n


# the tiny Llama's distributions are flat and move a lot between forwards: looser thresholds reach
# its KL rule
LLAMA_KLASS = dict(conf_threshold=0.05, kl_threshold=5.0, history_length=2)


@pytest.mark.parametrize("history", ["canvas", "block"])
@pytest.mark.parametrize("setting", range(len(KLASS_SETTINGS)), ids=["defaults", "h1", "max_conf", "min_kl"])
@pytest.mark.parametrize("model_name", ["bag", "llama"])
def test_klass_matches_the_reference(setting, model_name, history):
    # history="canvas" is the authors' code (previous distribution carried across blocks);
    # history="block" is their code with both restarted per block (the behaviour before the field)
    fields = KLASS_SETTINGS[setting]
    if model_name == "llama" and fields:
        fields = {**LLAMA_KLASS, "unmask_strategy": fields.get("unmask_strategy", "all")}
    model = BAG if model_name == "bag" else tiny_llama("eager", seed=2)
    batched_model = model if model_name == "bag" else copy.deepcopy(model).double()
    counts: dict = {}
    for bl, blocks in ((8, 1), (4, 3)):
        gen = bl * blocks
        batch, batch_forwards, alone, alone_forwards = decode_both(
            model, KLASS(**fields, history=history), PROMPTS, bl, gen, batched_model
        )
        for i, prompt in enumerate(PROMPTS):
            expected, forwards = _klass_reference(model, prompt, bl, gen, history == "canvas", fields, counts)
            if blocks == 1:  # one block: the two variants are one rule
                other, other_forwards = _klass_reference(model, prompt, bl, gen, history != "canvas", fields)
                assert torch.equal(other, expected) and other_forwards == forwards
            assert alone[i].tolist() == expected.tolist() and alone_forwards[i] == forwards, (bl, i)
            assert batch[i].tolist() == expected.tolist() and batch_forwards[i] == forwards, (bl, i)
    if fields:
        assert counts.get("ready_steps", 0) > 0, (
            "the setting never left the fallback: the test would not see the KL rule"
        )


def _both_histories(model, prompts, bl, gen, fields, adapter="bidirectional"):
    """dllm_edit's completions and forwards, alone, for history="canvas" and "block"."""
    out = {}
    for history in ("canvas", "block"):
        runs = [
            dllm_edit.generate(
                model,
                torch.tensor([p]),
                generation_config=llada1_config(KLASS(**fields, history=history), bl, gen).replace(
                    block_start=None  # the adapter's own
                ),
                adapter=adapter,
            )
            for p in prompts
        ]
        out[history] = [(completions(r)[0].tolist(), int(r.num_forwards[0])) for r in runs]
    return out


def test_klass_history_across_blocks_is_the_authors_and_block_is_the_old_rule():
    # on several blocks the carried previous distribution makes slots of later blocks ready one
    # forward sooner: "canvas" follows the authors' code, "block" their code restarted per block
    model = BagDenoiser(vocab_size=VOCAB, sharpness=3.0, exact=True, seed=2)
    runs = _both_histories(model, PROMPTS, 4, 12, {})
    found = False
    for i, prompt in enumerate(PROMPTS):
        carried, n_carried = _klass_reference(model, prompt, 4, 12, True, {})
        reset, n_reset = _klass_reference(model, prompt, 4, 12, False, {})
        assert runs["canvas"][i] == (carried.tolist(), n_carried)
        assert runs["block"][i] == (reset.tolist(), n_reset)
        found |= n_carried < n_reset
    assert found, "no prompt shows the carried history: the test would not see it"
    assert KLASS().needs.across_blocks and not KLASS(history="block").needs.across_blocks


def test_klass_history_across_many_blocks_batched():
    # eight blocks, rows of different lengths in one batch (rows finish blocks at different steps,
    # so frozen rows must keep their state and previous distribution): batch == alone, and the
    # carried history changes decisions on this model
    model = BagDenoiser(vocab_size=VOCAB, sharpness=3.0, exact=True, seed=2)
    cfg = llada1_config(KLASS(), 2, 16)
    ids, mask = left_pad(PROMPTS)
    batch = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
    )
    for i, prompt in enumerate(PROMPTS):
        expected, forwards = _klass_reference(model, prompt, 2, 16, True, {})
        assert completions(batch)[i].tolist() == expected.tolist() and int(batch.num_forwards[i]) == forwards


def test_klass_history_across_blocks_needs_an_adapter_that_sees_ahead():
    # a block-causal forward never predicts the blocks ahead: no previous distribution exists at a
    # block's first forward, so "canvas" decodes as "block" there
    model = tiny_llama("eager", seed=2)
    runs = _both_histories(model, PROMPTS, 4, 12, LLAMA_KLASS, adapter="block_causal")
    assert runs["canvas"] == runs["block"]


def test_klass_canvas_history_restarts_its_kl_history_at_a_new_block():
    # the state the loop hands back across blocks: rows whose history was written in an earlier
    # block start afresh (the authors' gate reads no entry of an earlier block)
    history = torch.full((2, 2, 2), 0.001)
    ctx = ctx_of(
        [[0.9, 0.2], [0.9, 0.2]],
        kl_prev=torch.full((2, 2), 0.001),
        step=torch.tensor([0, 2]),
        block_index=1,
        state={"kl_history": history, "kl_block": torch.tensor([0, 1])},
    )
    out = KLASS().step(ctx)
    assert out.commit.tolist() == [[True, False], [True, False]]  # row 0: the top-1 fallback
    assert out.state["kl_history"][0, 0].tolist()[0] == math.inf
    assert out.state["kl_block"].tolist() == [1, 1]
    assert KLASS().step(ctx).commit.tolist() == KLASS(history="block").step(ctx).commit.tolist()


@pytest.mark.parametrize("adapter", ["bidirectional", "shifted", "bidirectional_approx_cache"])
def test_klass_canvas_history_batch_equals_alone_on_every_adapter_that_sees_ahead(adapter):
    model = copy.deepcopy(tiny_llama("eager", seed=2)).double()
    cfg = llada1_config(KLASS(**LLAMA_KLASS), 4, 12)
    ids, mask = left_pad(PROMPTS)
    batch = dllm_edit.generate(model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    for i, prompt in enumerate(PROMPTS):
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert completions(batch)[i].tolist() == completions(alone)[0].tolist()
        assert int(batch.num_forwards[i]) == int(alone.num_forwards[0])
