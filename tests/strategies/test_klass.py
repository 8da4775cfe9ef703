"""KLASS, PC-Sampler and WINO (issue 35, items 3 and 5): the rules on hand-built steps, and exactness
against ports of the authors' code (tests/references/) on tiny random models, solo and batched.

The end-to-end runs use LLaDA-1's settings (blocks from the prompt's end, no editing, no post steps,
no EOS stop, no mask-token guard, no forward cap): tokens of the whole completion (from the trace,
before the EOS cut) and forwards must be the reference's.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from conftest import EOS, MASK, PAD, VOCAB, left_pad, tiny_llama, tiny_tokenizer
from denoisers import BagDenoiser
from hypothesis import given, settings
from hypothesis import strategies as st
from references import klass as ref_klass
from references import pc_sampler as ref_pc
from references import wino as ref_wino

import dllm_edit
from dllm_edit.adapters import (
    ApproxCacheBidirectionalAdapter,
    BidirectionalAdapter,
    BlockCausalAdapter,
    MaskedLMAdapter,
    ShiftedLogitsAdapter,
)
from dllm_edit.adapters.shadow import (
    ShadowBlockSession,
    check_shadow_block,
    open_shadow_session,
    shadow_block_inputs,
    split_shadow,
)
from dllm_edit.kernels import candidates
from dllm_edit.layout import build_canvas
from dllm_edit.strategies import (
    KLASS,
    WINO,
    Needs,
    PCSampler,
    StepContext,
    estimate_token_prior,
    get_strategy,
    load_token_prior,
    strategy_from_dict,
)
from dllm_edit.strategies.wino import narrow_out, wide_in
from dllm_edit.vocab import check_strategies_vocab

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


# ----------------------------------------------------------------------------------------------
# KLASS: the rule


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
# KLASS: exactness against the authors' decoder


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


@pytest.mark.parametrize("setting", range(len(KLASS_SETTINGS)), ids=["defaults", "h1", "max_conf", "min_kl"])
@pytest.mark.parametrize("model_name", ["bag", "llama"])
def test_klass_matches_the_reference(setting, model_name):
    fields = KLASS_SETTINGS[setting]
    if model_name == "llama" and fields:
        fields = {**LLAMA_KLASS, "unmask_strategy": fields.get("unmask_strategy", "all")}
    model = BAG if model_name == "bag" else tiny_llama("eager", seed=2)
    batched_model = model if model_name == "bag" else copy.deepcopy(model).double()
    counts: dict = {}
    for bl, blocks in ((8, 1), (4, 3)):
        gen = bl * blocks
        batch, batch_forwards, alone, alone_forwards = decode_both(
            model, KLASS(**fields), PROMPTS, bl, gen, batched_model
        )
        for i, prompt in enumerate(PROMPTS):
            # the history restarted per block, as dllm_edit's loop sees it (the documented difference);
            # on one block that is the authors' code itself
            expected, forwards = _klass_reference(model, prompt, bl, gen, False, fields, counts)
            if blocks == 1:
                authors, authors_forwards = _klass_reference(model, prompt, bl, gen, True, fields)
                assert torch.equal(authors, expected) and authors_forwards == forwards
            assert alone[i].tolist() == expected.tolist() and alone_forwards[i] == forwards, (bl, i)
            assert batch[i].tolist() == expected.tolist() and batch_forwards[i] == forwards, (bl, i)
    if fields:
        assert counts.get("ready_steps", 0) > 0, (
            "the setting never left the fallback: the test would not see the KL rule"
        )


def test_klass_documented_difference_history_across_blocks():
    # the authors' code compares a block's first forward with the previous block's last one and
    # keeps the KL history across blocks; dllm_edit restarts both per block. On the first block the
    # two agree (above); here is a later block where the carried history makes a slot ready earlier.
    model = BagDenoiser(vocab_size=VOCAB, sharpness=3.0, exact=True, seed=2)
    found = False
    for prompt in PROMPTS:
        _, n_carried = _klass_reference(model, prompt, 4, 12, True, {})
        reset, n_reset = _klass_reference(model, prompt, 4, 12, False, {})
        alone = dllm_edit.generate(
            model,
            torch.tensor([prompt]),
            generation_config=llada1_config(KLASS(), 4, 12),
            adapter="bidirectional",
        )
        assert completions(alone)[0].tolist() == reset.tolist() and int(alone.num_forwards[0]) == n_reset
        assert n_carried <= n_reset  # the carried history can only make slots ready sooner here
        found |= n_carried < n_reset
    assert found, "no prompt shows the documented difference"


# ----------------------------------------------------------------------------------------------
# PC-Sampler: the rule


def test_pc_sampler_scores_position_and_calibration():
    prior = [0.5, 0.01, 0.49] + [0.0] * 3
    tokens = torch.tensor([[0, 1, 2]])
    ctx = ctx_of([[0.9, 0.6, 0.5]], cand_tokens=tokens)
    # C = -c log f: 0.62, 2.76, 0.36; weights exp(-0.25 j)
    assert PCSampler(prior=prior).step(ctx).commit.tolist() == [[False, True, False]]
    ctx2 = ctx_of([[0.9, 0.6, 0.5]], cand_tokens=tokens, block_masked=torch.tensor([6]))
    assert PCSampler(prior=prior, steps=3).step(ctx2).commit.tolist() == [[True, True, False]]
    # no prior: confidence times the position weight
    assert PCSampler().step(ctx).commit.tolist() == [[True, False, False]]
    # a strong decay overrides confidence: the leftmost masked slot
    late = ctx_of([[0.2, 0.9, 0.95]], masked=[[False, True, True]])
    assert PCSampler(lambd=5.0).step(late).commit.tolist() == [[False, True, False]]
    assert PCSampler(lambd=0.0).step(late).commit.tolist() == [[False, False, True]]


def test_pc_sampler_clip_ties_go_left_and_no_underflow():
    # α clips every slot to the same score: the position weight (and, at λ = 0, the lower slot) decides
    prior = [1e-6] * 6
    ctx = ctx_of(
        [[0.8, 0.9, 0.95]], cand_tokens=torch.tensor([[0, 1, 2]]), positions=torch.tensor([[500, 501, 502]])
    )
    assert PCSampler(prior=prior, alpha=1.0).step(ctx).commit.tolist() == [[True, False, False]]
    assert PCSampler(prior=prior, alpha=1.0, lambd=0.0).step(ctx).commit.tolist() == [[True, False, False]]
    # past float32's range the reference's exp(-λ pos) is 0 for every slot: all tie there, while the
    # log-space order still reads the calibrated confidence
    weights = torch.exp(-0.25 * torch.tensor([500.0, 501.0, 502.0]))
    assert weights.tolist() == [0.0, 0.0, 0.0]
    far = ctx_of(
        [[0.5, 0.9, 0.7]], cand_tokens=torch.tensor([[0, 1, 2]]), positions=torch.tensor([[500, 501, 502]])
    )
    assert PCSampler(prior=[0.5, 0.5, 0.5]).step(far).commit.tolist() == [[False, True, False]]


def test_pc_sampler_prior_size_is_checked():
    small = PCSampler(prior=[0.5, 0.5])
    with pytest.raises(
        ValueError, match=r"`prior` of PCSampler has 2 entries but the model's vocabulary has 48"
    ):
        small.check_vocab(48)
    with pytest.raises(
        ValueError, match=r"`prior` of PCSampler has 2 entries, fewer than the model's vocabulary"
    ):
        small.step(ctx_of([[0.9, 0.8, 0.7]]))  # candidate ids 2..4 are past its end
    PCSampler().check_vocab(48)  # no prior: nothing to check
    with pytest.raises(ValueError, match="has 2 entries but the model's vocabulary has 48"):
        check_strategies_vocab(tiny_llama("eager", seed=0), [small])
    with pytest.raises(ValueError, match="has 2 entries but the model's vocabulary has 48"):
        check_strategies_vocab(BAG, [small])  # a denoiser with a `vocab_size` attribute says it too
    check_strategies_vocab(lambda ids: None, [small])  # a model that says no vocabulary: nothing to compare


@pytest.mark.parametrize(
    "prior, error, match",
    [
        ([0.5, 2.0], ValueError, r"frequencies in \[0, 1\].*got values in \[0.5, 2.0\]"),
        ([0.5, -0.1], ValueError, "frequencies in"),
        ([0.0, 0.0], ValueError, "all zeros"),
        ([0.5, float("nan")], ValueError, "NaN"),
        (torch.ones(2, 2) / 4, ValueError, r"1-D vector.*shape \(2, 2\)"),
        (["a", "b"], TypeError, "sequence of floats"),
        (3, TypeError, "`prior` must be None"),
        ("/no/such/prior.pt", ValueError, "no file at"),
    ],
)
def test_pc_sampler_bad_priors(prior, error, match):
    with pytest.raises(error, match=match):
        PCSampler(prior=prior)


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(lambd=-0.1), ValueError, r"`lambd` of PCSampler must be a finite float >= 0"),
        (dict(lambd=float("inf")), ValueError, "lambd"),
        (dict(alpha=0), ValueError, r"`alpha` of PCSampler must be a finite float > 0"),
        (dict(alpha="10"), TypeError, "alpha"),
        (dict(steps=0), ValueError, "`steps` of PCSampler"),
    ],
)
def test_pc_sampler_bad_values_name_the_field(fields, error, match):
    with pytest.raises(error, match=match):
        PCSampler(**fields)


def test_token_prior_files_and_estimation(tmp_path):
    expected = [0.5, 0.25, 0.25, 0.25]  # counts 2, 1, 1 of N = 4 tokens; id 3 unseen: 1 / N
    ids = [[0, 0, 1], [2]]
    prior = estimate_token_prior(ids, vocab_size=4)
    assert prior.tolist() == expected
    torch.save(prior, tmp_path / "p.pt")
    np.save(tmp_path / "p.npy", prior.numpy())
    (tmp_path / "p.json").write_text(json.dumps(prior.tolist()))
    (tmp_path / "f.json").write_text(json.dumps({"frequencies": prior.tolist()}))
    counts = {"num_token": 4, "token_frequency_dict": {"0": 2, "1": 1, "2": 1}}
    (tmp_path / "c.json").write_text(json.dumps({**counts, "vocab_size": 4}))
    for name in ("p.pt", "p.npy", "p.json", "f.json", "c.json"):
        assert load_token_prior(tmp_path / name).tolist() == expected, name
        strategy = PCSampler(prior=str(tmp_path / name))
        assert strategy.prior == str(tmp_path / name) and strategy.prior_size == 4
    (tmp_path / "bad.json").write_text(json.dumps(counts))
    with pytest.raises(ValueError, match='does not say the vocabulary size; add "vocab_size"'):
        load_token_prior(tmp_path / "bad.json")
    (tmp_path / "p.txt").write_text("0.5")
    with pytest.raises(ValueError, match=r"unknown file type '\.txt'"):
        PCSampler(prior=tmp_path / "p.txt")
    # texts through a tokenizer, rows of a dataset, and the errors
    tok = tiny_tokenizer()
    from_texts = estimate_token_prior(["w2 w2 w3", "w4"], tok)
    assert from_texts.shape == (len(tok),) and from_texts[2] == 0.5 and from_texts[0] == 0.25
    assert torch.equal(estimate_token_prior([{"text": "w2 w2 w3"}, {"text": "w4"}], tok), from_texts)
    with pytest.raises(TypeError, match="no tokenizer"):
        estimate_token_prior(["w2"], vocab_size=48)
    with pytest.raises(ValueError, match="holds no tokens"):
        estimate_token_prior([[]], vocab_size=4)
    with pytest.raises(ValueError, match=r"token id 9 outside \[0, vocab_size=4\)"):
        estimate_token_prior([[9]], vocab_size=4)
    with pytest.raises(ValueError, match="has no 'text' field"):
        estimate_token_prior([{"content": "w2"}], tok)
    with pytest.raises(TypeError, match="not one string"):
        estimate_token_prior("w2 w3", tok)


def test_pc_sampler_round_trips_through_the_config(tmp_path):
    strategy = PCSampler(prior=[0.25] * 4, lambd=0.5, steps=2)
    assert strategy_from_dict(json.loads(json.dumps(strategy.to_dict()))) == strategy
    cfg = dllm_edit.EditGenerationConfig(unmasking=strategy, block_length=4, max_new_tokens=8, **IDS)
    cfg.save_pretrained(tmp_path)
    back = dllm_edit.EditGenerationConfig.from_pretrained(tmp_path)
    assert back.unmasking == strategy and back.unmasking.prior_size == 4
    assert dllm_edit.EditGenerationConfig(unmasking="pc_sampler").unmasking == PCSampler()


# ----------------------------------------------------------------------------------------------
# PC-Sampler: exactness against the authors' decoder


# at λ = 0 nothing separates slots whose calibrated score is clipped to α (an exact tie, which the
# reference's topk breaks in no specified order): that case runs with an α no score reaches
@pytest.mark.parametrize("lambd, alpha", [(0.25, 10.0), (0.0, 1e3), (1.0, 10.0)])
def test_pc_sampler_matches_the_reference(lambd, alpha):
    g = torch.Generator().manual_seed(3)
    prior = torch.rand(VOCAB, generator=g) ** 4  # a skewed corpus
    prior = prior / prior.sum()
    for model_name in ("bag", "llama"):
        model = BAG if model_name == "bag" else tiny_llama("eager", seed=4)
        batched_model = model if model_name == "bag" else copy.deepcopy(model).double()
        for bl, blocks, steps_per_block in ((8, 1, 8), (4, 3, 4), (6, 2, 3)):
            gen = bl * blocks
            strategy = PCSampler(
                lambd=lambd,
                alpha=alpha,
                prior=prior,
                steps=None if steps_per_block == bl else steps_per_block,
            )
            cfg = llada1_config(strategy, bl, gen)
            ids, mask = left_pad(PROMPTS)
            batch = dllm_edit.generate(
                batched_model, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
            )
            batch_tokens = completions(batch)
            for i, prompt in enumerate(PROMPTS):
                x, n = ref_pc.generate_with_pc_sampler(
                    model,
                    torch.tensor([prompt]),
                    mask_id=MASK,
                    steps=steps_per_block * blocks,
                    gen_length=gen,
                    block_length=bl,
                    lambd=lambd,
                    alpha=alpha,
                    baseline=prior,
                )
                expected = x[0, len(prompt) :].tolist()
                alone = dllm_edit.generate(
                    model, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional"
                )
                assert completions(alone)[0].tolist() == expected, (model_name, bl, i)
                assert int(alone.num_forwards[0]) == n == steps_per_block * blocks
                assert batch_tokens[i].tolist() == expected and int(batch.num_forwards[i]) == n


def test_pc_sampler_prior_changes_the_order():
    # the calibration is not a no-op: a prior that makes one token common reorders the decode
    cfg = lambda s: llada1_config(s, 8, 8)  # noqa: E731
    plain = dllm_edit.generate(
        BAG, torch.tensor([PROMPTS[0]]), generation_config=cfg(PCSampler()), adapter="bidirectional"
    )
    first_token = int(completions(plain)[0, 0])
    skew = torch.full((VOCAB,), 1e-3)
    skew[first_token] = 0.9
    other = dllm_edit.generate(
        BAG, torch.tensor([PROMPTS[0]]), generation_config=cfg(PCSampler(prior=skew)), adapter="bidirectional"
    )
    orders = [[r.commit[0].nonzero().flatten().tolist() for r in out.trace] for out in (plain, other)]
    assert orders[0] != orders[1]


# ----------------------------------------------------------------------------------------------
# WINO: the rule


def test_wino_wide_in_caps_and_fallback():
    conf = torch.tensor([[0.9, 0.61, 0.6, 0.95, 0.7, 0.8, 0.65]])
    masked = torch.ones(1, 7, dtype=torch.bool)
    assert wide_in(conf, masked, torch.tensor([0.6]), torch.tensor([10]))[0].tolist() == [
        True,
        True,
        False,
        True,
        True,
        True,
        True,
    ]  # 0.6 is not > 0.6
    assert wide_in(conf, masked, torch.tensor([0.6]), torch.tensor([2]))[0].tolist() == [
        True,
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    assert wide_in(conf, masked, torch.tensor([0.99]), torch.tensor([2]))[0].tolist() == [
        False,
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    # the cap of the strategy: clamp(floor(0.7 m), 5, 20); m = 7 -> 5
    ctx = ctx_of(conf, shadow_probs=torch.zeros(1, 7))
    assert int(WINO(wide_in_threshold=0.5).step(ctx).commit.sum()) == 5
    assert int(WINO(wide_in_threshold=0.5, min_accept=2, accept_ratio=0.5).step(ctx).commit.sum()) == 3
    # ties in the cap go to the lower slot
    tied = wide_in(
        torch.tensor([[0.9, 0.9, 0.9]]),
        torch.ones(1, 3, dtype=torch.bool),
        torch.tensor([0.5]),
        torch.tensor([2]),
    )
    assert tied[0].tolist() == [True, True, False]


def test_wino_narrow_out_rules():
    masked = torch.tensor([[False, False, False, True, True, True]])
    shadow = torch.tensor([[0.3, 0.9, 0.2, 0.0, 0.0, 0.0]])
    probs = torch.tensor([[0.9, 0.9, 0.9, 0.95, 0.8, 0.1]])
    base = dict(masked=masked, shadow_probs=shadow, step=torch.tensor([3]))
    w = WINO()
    # 2 commits (> 1), previous step committed 5: both doubted tokens (< 0.9; 0.9 itself stays) go back
    out = w.step(ctx_of(probs, **base, state={"last_accept": torch.tensor([5])}))
    assert out.commit[0].tolist() == [False, False, False, True, True, False]
    assert out.edit[0].tolist() == [True, False, True, False, False, False]
    assert out.tokens[0, [0, 2]].tolist() == [MASK, MASK] and out.state["last_accept"].tolist() == [2]
    # previous step committed 2: at most 1 re-mask, the least believed
    out = w.step(ctx_of(probs, **base, state={"last_accept": torch.tensor([2])}))
    assert out.edit[0].tolist() == [False, False, True, False, False, False]
    # a step committing one token re-masks nothing; nor does a block's first step (no state)
    one = torch.tensor([[0.9, 0.9, 0.9, 0.95, 0.1, 0.1]])
    assert not w.step(ctx_of(one, **base, state={"last_accept": torch.tensor([5])})).edit.any()
    assert not w.step(ctx_of(probs, **base)).edit.any()
    # narrow_out alone: ties to the lower slot
    tie = narrow_out(
        torch.tensor([[0.5, 0.5, 0.5]]),
        torch.ones(1, 3, dtype=torch.bool),
        torch.tensor([0.9]),
        torch.tensor([2]),
    )
    assert tie[0].tolist() == [True, True, False]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), width=st.integers(1, 24))
def test_wino_a_block_ends_within_its_mask_count(seed, width):
    # whatever the model says, re-masks stay below the previous step's commits: m masks, <= m steps
    g = torch.Generator().manual_seed(seed)
    masked = torch.ones(1, width, dtype=torch.bool)
    state: dict = {}
    strategy = WINO(wide_in_threshold=0.3)
    for step in range(width + 1):
        if not masked.any():
            break
        assert step < width, "a block took more forwards than it had masks"
        ctx = ctx_of(
            torch.rand(1, width, generator=g),
            masked=masked,
            shadow_probs=torch.rand(1, width, generator=g),
            step=torch.tensor([step]),
            state=state,
        )
        out = strategy.step(ctx)
        assert out.commit.any() and not (out.commit & out.edit).any()
        masked = (masked & ~out.commit) | out.edit
        state = out.state


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(wide_in_threshold=1.2), ValueError, "wide_in_threshold"),
        (dict(narrow_out_threshold=-0.1), ValueError, "narrow_out_threshold"),
        (dict(accept_ratio=0.0), ValueError, r"`accept_ratio` of WINO must be a finite float in \(0, 1\]"),
        (dict(accept_ratio="0.7"), TypeError, "accept_ratio"),
        (dict(min_accept=0), ValueError, r"`min_accept` of WINO must be an int >= 1"),
        (
            dict(min_accept=6, max_accept=5),
            ValueError,
            r"`max_accept` of WINO \(5\) must be >= `min_accept` \(6\)",
        ),
    ],
)
def test_wino_bad_values_name_the_field(fields, error, match):
    with pytest.raises(error, match=match):
        WINO(**fields)


def test_wino_needs_the_shadow_block():
    assert WINO().needs_shadow_block and not KLASS().needs_shadow_block and WINO().remasks
    assert WINO().needs == Needs(shadow_block=True, remasks=True)
    with pytest.raises(LookupError, match="shadow_prob"):  # a hand-built context without it
        WINO().step(ctx_of([[0.9]], mask_token_id=9))
    assert (
        get_strategy("wino") is WINO
        and get_strategy("klass") is KLASS
        and get_strategy("pc_sampler") is PCSampler
    )


# ----------------------------------------------------------------------------------------------
# the shadow block


def test_shadow_mask_is_the_references():
    # one unpadded row: the mask and position ids the WINO code builds for block 1 of a 3-block canvas
    prompt, bl, gen = 3, 4, 12
    layout, _ = build_canvas(torch.tensor([[5, 6, 7]]), torch.ones(1, 3), bl, gen, MASK, PAD, "prompt_end")
    block = layout.first_block + 1
    allowed, positions = shadow_block_inputs(layout, torch.tensor([0]), int(layout.offsets.min()), block)
    lead = int(layout.offsets.min())
    start = prompt + bl  # the reference's slots
    total = prompt + gen + bl
    ref = torch.ones(total, total, dtype=torch.bool)
    ref[:, -bl:] = False
    ref[-bl:, -bl:] = True
    ref[-bl:, start : start + bl] = ~torch.eye(bl, dtype=torch.bool)
    assert lead == layout.offsets[0] and torch.equal(allowed[0], ref)
    assert positions[0].tolist() == list(range(prompt + gen)) + list(range(start, start + bl))


def test_shadow_session_keeps_the_canvas_logits():
    ids, mask = left_pad(PROMPTS)
    layout, canvas = build_canvas(ids, mask, 4, 8, MASK, PAD, "prompt_end")
    canvas[:, layout.first_block * 4 : layout.first_block * 4 + 2] = 9  # some written tokens
    plain = BidirectionalAdapter().open(BAG, layout, False)
    shadow = ShadowBlockSession(BAG, layout, MASK)
    for window in (0, 1):
        block = layout.first_block + window
        both = shadow.logits(canvas, block, window)  # [B, S + bl, V]
        assert both.shape[1] == (window + 2) * 4
        span, probs = split_shadow(both, canvas, torch.arange(3), block, window)
        assert torch.equal(span, plain.logits(canvas, block, window))  # nothing sees the shadow
        assert probs.shape == (3, (window + 1) * 4) and (probs[:, : window * 4] == 0).all()
        tokens = canvas[:, block * 4 : (block + 1) * 4]  # [B, bl]
        direct = torch.softmax(both[:, -4:], dim=-1).gather(-1, tokens[..., None])[..., 0]  # [B, bl]
        assert torch.allclose(probs[:, window * 4 :], direct, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize(
    "adapter",
    [BlockCausalAdapter(), ShiftedLogitsAdapter(), MaskedLMAdapter(), ApproxCacheBidirectionalAdapter()],
)
def test_adapters_without_the_shadow_block_are_refused(adapter):
    with pytest.raises(
        ValueError, match=rf"WINO verifies written tokens with WINO's shadow block.*{adapter.name!r} adapter"
    ):
        check_shadow_block(adapter, [WINO()], use_cache=False)
    assert check_shadow_block(adapter, [KLASS()], use_cache=False) is False


def test_the_shadow_block_takes_no_cache_nor_a_model_without_positions():
    with pytest.raises(ValueError, match="takes no KV cache; set use_cache=False"):
        check_shadow_block(BidirectionalAdapter(), [WINO()], use_cache=True)
    assert check_shadow_block(BidirectionalAdapter(), [WINO()], use_cache=False) is True

    class NoPositions(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):  # pragma: no cover - never run
            raise AssertionError

    layout, _ = build_canvas(torch.tensor([[5]]), torch.ones(1, 1), 2, 2, MASK, PAD, "prompt_end")
    with pytest.raises(ValueError, match="takes no `position_ids`"):
        open_shadow_session(BidirectionalAdapter(), NoPositions(), layout, False, MASK)


# ----------------------------------------------------------------------------------------------
# WINO: exactness against the authors' decoder


def drive_wino(model, prompts, strategy, bl, gen):
    """The decoding loop's data flow for WINO under LLaDA-1's settings (greedy, no editing, no post
    steps), through the adapter hook: canvas, `ShadowBlockSession`, `split_shadow`, the candidate
    kernel, `WINO.step`. Returns (completions [B, G], forwards [B], re-masks written)."""
    ids, mask = left_pad(prompts)
    layout, canvas = build_canvas(ids, mask, bl, gen, MASK, PAD, "prompt_end")
    session = open_shadow_session(BidirectionalAdapter(), model, layout, False, MASK)
    forwards = torch.zeros(len(prompts), dtype=torch.long)
    remasks = 0
    for block in range(layout.first_block, layout.num_blocks):
        span = slice(block * bl, (block + 1) * bl)
        state: dict = {}
        steps = torch.zeros(len(prompts), dtype=torch.long)
        while True:
            old = canvas[:, span].clone()
            masked = old == MASK
            active = masked.any(-1)
            if not active.any():
                break
            rows = torch.arange(len(prompts))
            logits, shadow = split_shadow(session.logits(canvas, block, 0), canvas, rows, block, 0)
            tokens, probs = candidates(logits)
            ctx = StepContext(
                tokens=old,
                masked=masked,
                editable=layout.generated[:, span] & ~masked,
                in_block=torch.ones(bl, dtype=torch.bool),
                cand_tokens=tokens,
                cand_probs=probs,
                step=steps,
                block_index=block - layout.first_block,
                active=active,
                mask_token_id=MASK,
                positions=torch.zeros_like(old),
                state=state,
                shadow_probs=shadow,
            )
            out = strategy.step(ctx)
            write = (out.commit | out.edit) & active[:, None]
            canvas[:, span] = torch.where(write, out.tokens, old)
            state, steps, forwards = out.state, steps + active, forwards + active
            remasks += int((out.edit & active[:, None]).sum())
    return canvas.gather(1, layout.output_index), forwards, remasks


WINO_SETTINGS = [dict(), dict(wide_in_threshold=0.3, narrow_out_threshold=0.95, min_accept=2)]


def _wino_reference(model, prompt, bl, gen, fields):
    strategy = WINO(**fields)
    x, n = ref_wino.decoding_wino(
        model,
        torch.tensor([prompt]),
        mask_id=MASK,
        gen_length=gen,
        block_length=bl,
        threshold=strategy.wide_in_threshold.value,
        threshold_back=strategy.narrow_out_threshold.value,
        caps=(strategy.accept_ratio, strategy.min_accept, strategy.max_accept),
    )
    return x[0, len(prompt) :].tolist(), n


@pytest.mark.parametrize("fields", WINO_SETTINGS, ids=["defaults", "aggressive"])
def test_wino_hook_matches_the_reference(fields):
    remasks = 0
    for model in (BAG, SOFT_BAG, tiny_llama("eager", seed=6)):
        batched = model if isinstance(model, BagDenoiser) else copy.deepcopy(model).double()
        for bl, blocks in ((8, 1), (6, 2)):
            gen = bl * blocks
            batch, batch_forwards, _ = drive_wino(batched, PROMPTS, WINO(**fields), bl, gen)
            for i, prompt in enumerate(PROMPTS):
                expected, n = _wino_reference(model, prompt, bl, gen, fields)
                alone, forwards, count = drive_wino(model, [prompt], WINO(**fields), bl, gen)
                assert alone[0].tolist() == expected and int(forwards[0]) == n, (bl, i)
                assert batch[i].tolist() == expected and int(batch_forwards[i]) == n
                remasks += count
    assert remasks > 0  # narrow-out ran, and re-masked as the reference did


@pytest.fixture
def shadow_loop():
    """Skip until the decoding loop runs the shadow block (`dllm_edit.adapters.shadow`'s hook)."""
    try:
        cfg = llada1_config(WINO(), 2, 2)
        dllm_edit.generate(BAG, torch.tensor([[5]]), generation_config=cfg, adapter="bidirectional")
    except ValueError as err:
        if "shadow_probs" in str(err):
            pytest.skip("dllm_edit/generation.py does not run the shadow block yet (see adapters/shadow.py)")
        raise


@pytest.mark.parametrize("fields", WINO_SETTINGS, ids=["defaults", "aggressive"])
def test_wino_generate_matches_the_reference(shadow_loop, fields):
    for model in (BAG, SOFT_BAG):
        for bl, blocks in ((8, 1), (6, 2)):
            gen = bl * blocks
            batch, batch_forwards, alone, alone_forwards = decode_both(
                model, WINO(**fields), PROMPTS, bl, gen
            )
            for i, prompt in enumerate(PROMPTS):
                expected, n = _wino_reference(model, prompt, bl, gen, fields)
                assert alone[i].tolist() == expected and alone_forwards[i] == n
                assert batch[i].tolist() == expected and batch_forwards[i] == n
    cfg = llada1_config(WINO(**WINO_SETTINGS[1]), 8, 8)
    out = dllm_edit.generate(
        SOFT_BAG, torch.tensor([PROMPTS[0]]), generation_config=cfg, adapter="bidirectional"
    )
    assert int(out.num_edits[0]) > 0  # the re-masks are counted as edits


def test_wino_is_refused_before_any_forward(shadow_loop):
    model = BagDenoiser(vocab_size=VOCAB)
    for adapter in ("block_causal", "shifted", "masked_lm"):
        with pytest.raises(ValueError, match="shadow block"):
            dllm_edit.generate(
                model,
                torch.tensor([[5, 6]]),
                adapter=adapter,
                unmasking="wino",
                max_new_tokens=4,
                block_length=4,
                **IDS,
            )
    assert model.calls == 0
