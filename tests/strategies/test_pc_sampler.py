"""PC-Sampler (`PCSampler`): position-aware, calibrated confidence (a token prior), and the token
prior's files and estimation; the rule on hand-built steps, and exactness against the port of the
authors' code (`tests/references/pc_sampler.py`) on tiny random models, solo and batched.

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

import dllm_edit
from dllm_edit.strategies import (
    PCSampler,
    StepContext,
    estimate_token_prior,
    load_token_prior,
    strategy_from_dict,
)
from dllm_edit.vocab import check_strategies_vocab
from tests.helpers import MASK, VOCAB, left_pad, tiny_llama, tiny_tokenizer
from tests.helpers.llada1 import BAG, IDS, PROMPTS, completions, ctx_of, llada1_config
from tests.references import pc_sampler as ref_pc

# ----------------------------------------------------------------------------------------------
# the rule


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


# ----------------------------------------------------------------------------------------------
# the token prior: files, estimation, the config


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
# exactness against the authors' decoder


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


def test_pc_sampler_ranks_at_the_references_resolution_far_into_the_completion():
    # two slots whose weighted scores differ by a relative 1e-6, in a block 1000 tokens in: the
    # reference weights by the offset in the block (exp(-λ·j), j = 0, 1) and picks slot 1; counted
    # from the completion's start, λ·pos ≈ 250 has a float32 spacing of 1.5e-5 and the two would tie
    lambd = 0.25
    c = torch.tensor([0.5, 0.5 * math.exp(lambd) * (1 + 1e-6)], dtype=torch.float32)
    reference = torch.exp(-lambd * torch.arange(2, dtype=torch.float32)) * c  # the port's weighting
    assert int(reference.argmax()) == 1 and reference[1] > reference[0]
    for offset in (0, 64, 1000):
        ctx = StepContext(
            tokens=torch.full((1, 2), MASK),
            masked=torch.ones(1, 2, dtype=torch.bool),
            editable=torch.zeros(1, 2, dtype=torch.bool),
            in_block=torch.ones(2, dtype=torch.bool),
            cand_tokens=torch.tensor([[3, 4]]),
            cand_probs=c[None],
            positions=torch.tensor([[offset, offset + 1]]),
            step=torch.tensor([0]),
            block_index=offset // 2,
            active=torch.tensor([True]),
        )
        assert PCSampler(lambd=lambd).step(ctx).commit.tolist() == [[False, True]], offset
    # with a window before the block, positions still count from the active block's first slot
    ctx = StepContext(
        tokens=torch.tensor([[3, 3, MASK, MASK]]),
        masked=torch.tensor([[False, False, True, True]]),
        editable=torch.tensor([[True, True, False, False]]),
        in_block=torch.tensor([False, False, True, True]),
        cand_tokens=torch.tensor([[3, 3, 3, 4]]),
        cand_probs=torch.cat([torch.ones(2), c])[None],
        positions=torch.tensor([[998, 999, 1000, 1001]]),
        step=torch.tensor([0]),
        block_index=500,
        active=torch.tensor([True]),
    )
    assert PCSampler(lambd=lambd).step(ctx).commit.tolist() == [[False, False, False, True]]
