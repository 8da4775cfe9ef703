"""The per-position statistics of the candidate pass (`dllm_edit.kernels.candidate_stats`) and how
the decoding loop hands them, and each strategy's state, to the strategies.

The kernel is compared with the torch reference, and both with a naive full softmax; the loop with a
recording strategy on a dummy denoiser. Without CUDA the Triton kernel runs in the interpreter
(tests/conftest.py sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from typing import ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dllm_edit
from dllm_edit.kernels import STAT_NAMES, _dispatch, candidate_stats, candidate_stats_reference
from dllm_edit.strategies import Needs, StepContext, StepResult, Strategy, ThresholdUnmask
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_kernel = pytest.mark.skipif(
    not HAS_TRITON or _dispatch.triton_disabled(), reason="triton is not installed, or disabled"
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ALL = frozenset(STAT_NAMES)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warnings in the interpreter


def naive(logits, current=None, prev_logits=None, suppress=(), temperature=0.0):
    """Every statistic from a float64 full softmax: the ground truth of both paths."""
    x = logits.double().clone()
    if suppress:
        x[..., list(suppress)] = -math.inf
    if temperature > 0:
        x = x / temperature
    p = torch.softmax(x, -1)
    logp = torch.log_softmax(x, -1)
    top2 = torch.topk(p, min(2, p.shape[-1]), -1).values
    top2_x = torch.topk(x, min(2, x.shape[-1]), -1).values
    gap = top2_x[..., 0] - top2_x[..., 1] if x.shape[-1] > 1 else torch.full_like(top2_x[..., 0], math.inf)
    out = {
        "token": p.argmax(-1),
        "prob": p.max(-1).values,
        "top_prob": top2[..., 0],
        "second_prob": top2[..., 1] if p.shape[-1] > 1 else torch.zeros_like(top2[..., 0]),
        "logit_gap": gap,
        "entropy": -torch.where(p > 0, p * logp, 0.0).sum(-1),
    }
    if current is not None:
        out["current_prob"] = p.gather(-1, current[..., None]).squeeze(-1)
    if prev_logits is not None:
        q = prev_logits.double().clone()
        if suppress:
            q[..., list(suppress)] = -math.inf
        logq = torch.log_softmax(q / temperature if temperature > 0 else q, -1)
        out["kl"] = torch.where(p > 0, p * (logp - logq), 0.0).sum(-1)
    return out


def close(got, want, name, vocab):
    rtol = max(3e-5, 4 * math.sqrt(vocab) * torch.finfo(torch.float32).eps)
    torch.testing.assert_close(got.double().cpu(), want.cpu(), rtol=rtol, atol=3e-6, msg=name)


def both(logits, stats, **kwargs):
    """The reference, and the kernel where it can run."""
    ref = candidate_stats(logits, stats, backend="torch", **kwargs)
    if not HAS_TRITON or _dispatch.triton_disabled():
        return ref, None
    from dllm_edit.kernels.candidates.triton import candidate_stats_triton

    kernel_args = {k: v for k, v in kwargs.items() if k not in ("top_k", "top_p")}
    return ref, candidate_stats_triton(
        logits.to(DEVICE),
        stats,
        **{k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in kernel_args.items()},
    )


@pytest.mark.parametrize("shape", [(2, 3, 37), (1, 5, 1000), (3, 1, 7), (1, 2, 1)])
@pytest.mark.parametrize("suppress", [(), (0,)])
def test_every_statistic_matches_a_naive_softmax(shape, suppress):
    if shape[-1] == 1 and suppress:
        pytest.skip("a one-token vocabulary cannot suppress its token")
    g = torch.Generator().manual_seed(sum(shape))
    vocab = shape[-1]
    logits = torch.randn(shape, generator=g) * 3
    current = torch.randint(0, vocab, shape[:-1], generator=g)
    first = candidate_stats(logits, ALL, current=current, suppress_ids=suppress)
    assert torch.isinf(first.kl).all()  # no previous step yet
    moved = logits + 0.5 * torch.randn(shape, generator=g)
    for ref, kernel in [
        both(moved, ALL, current=current, prev=(first.kept_logits, first.kept_lse), suppress_ids=suppress)
    ]:
        want = naive(moved, current, logits, suppress)
        for result in (ref, kernel):
            if result is None:
                continue
            assert torch.equal(result.token.cpu(), want["token"])
            for name in ("prob", "top_prob", "second_prob", "logit_gap", "entropy", "current_prob", "kl"):
                close(getattr(result, name), want[name], name, vocab)
            torch.testing.assert_close(
                result.kept_lse.cpu(),
                torch.logsumexp(
                    moved.masked_fill(
                        torch.isin(torch.arange(vocab), torch.tensor(suppress, dtype=torch.long)), -math.inf
                    ),
                    -1,
                ),
                rtol=1e-5,
                atol=1e-5,
            )


@needs_kernel
@pytest.mark.parametrize("block", [8, 64])
def test_kernel_matches_the_reference_across_tiles_and_lanes(block):
    g = torch.Generator().manual_seed(block)
    logits = torch.randn(4, 6, 203, generator=g)
    logits[0, 0, :100] = -math.inf  # a row that is half -inf
    logits[1, 1, 5] = logits[1, 1, 9] = 50.0  # the top two tie: second == top
    current = torch.randint(0, 203, (4, 6), generator=g)
    ref0 = candidate_stats_reference(logits, ALL, current)
    from dllm_edit.kernels.candidates.triton import candidate_stats_triton

    tri0 = candidate_stats_triton(logits, ALL, current, block=block)
    moved = logits.roll(1, dims=-1)
    ref = candidate_stats_reference(moved, ALL, current, (ref0.kept_logits, ref0.kept_lse))
    tri = candidate_stats_triton(moved, ALL, current, (tri0.kept_logits, tri0.kept_lse), block=block)
    assert ref.second_prob[1, 1] == ref.top_prob[1, 1] and ref.logit_gap[1, 1] == 0.0
    for a, b in ((ref0, tri0), (ref, tri)):
        assert torch.equal(a.token, b.token)
        for name in (
            "prob",
            "current_prob",
            "top_prob",
            "second_prob",
            "logit_gap",
            "entropy",
            "kl",
            "kept_lse",
        ):
            torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=2e-5, atol=2e-6, msg=name)
        torch.testing.assert_close(b.kept_logits, a.kept_logits)


def test_special_rows_and_a_token_the_previous_step_excluded():
    logits = torch.tensor([[0.0, 1.0, 2.0], [-math.inf] * 3, [0.0, math.nan, 1.0]])
    out = candidate_stats(logits, {"second", "entropy", "kl"})
    assert out.entropy[1].isnan() and out.entropy[2].isnan() and out.second_prob[2].isnan()
    # the previous step suppressed id 2, this one does not: p puts mass where q has none
    prev = candidate_stats(logits[:1], {"kl"}, suppress_ids=(2,))
    now = candidate_stats(logits[:1], {"kl"}, prev=(prev.kept_logits, prev.kept_lse))
    assert now.kl.item() == math.inf
    same = candidate_stats(logits[:1], {"kl"}, prev=(now.kept_logits, now.kept_lse))
    assert same.kl.item() == 0.0  # an unchanged distribution: exactly 0 (clamped rounding)


def test_sampling_statistics_are_of_the_sampled_distribution():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    out = candidate_stats(
        logits, {"second", "entropy"}, temperature=2.0, generator=torch.Generator().manual_seed(0)
    )
    want = naive(logits, temperature=2.0)
    close(out.top_prob, want["top_prob"], "top", 3)
    close(out.entropy, want["entropy"], "entropy", 3)
    filtered = candidate_stats(logits, {"second"}, temperature=1.0, top_k=1, generator=torch.Generator())
    assert filtered.second_prob.item() == 0.0 and filtered.top_prob.item() == 1.0
    assert filtered.logit_gap.item() == math.inf  # one token left: no second


def test_logit_gap_stays_finite_where_the_probabilities_underflow():
    # a gap of 200: p2 = exp(-200) is 0 in float32, so log p1 - log p2 would be +inf
    out = candidate_stats(torch.tensor([[0.0, 200.0, 1.0]]), {"logit_gap"})
    assert out.second_prob.item() == 0.0 and out.logit_gap.item() == 199.0
    assert set(out.statistics()) == {"top_prob", "second_prob", "logit_gap"}  # computed together


def test_bad_requests_are_refused():
    logits = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="unknown statistics"):
        candidate_stats(logits, {"margin"})
    with pytest.raises(ValueError, match="current"):
        candidate_stats(logits, {"current"})
    with pytest.raises(ValueError, match="prev"):
        candidate_stats(logits, {"kl"}, prev=(torch.zeros(3, 4), torch.zeros(3)))


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(2, 40),
    scale=st.floats(0.1, 20.0),
    seed=st.integers(0, 2**16),
)
def test_property_reference_equals_naive(rows, vocab, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    prev_logits = torch.randn(rows, vocab, generator=g) * scale
    prev = candidate_stats(prev_logits, {"kl"})
    out = candidate_stats(logits, {"second", "entropy", "kl"}, prev=(prev.kept_logits, prev.kept_lse))
    want = naive(logits, prev_logits=prev_logits)
    assert torch.equal(out.token, want["token"])
    for name in ("second_prob", "logit_gap", "entropy", "kl"):
        torch.testing.assert_close(
            getattr(out, name).double(), want[name], rtol=1e-4, atol=1e-4 * scale, msg=name
        )
    assert (out.kl >= 0).all() and (out.entropy >= -1e-6).all()


def test_the_kept_logits_are_the_only_vocabulary_sized_output():
    """Memory: `kept_logits` is 4 bytes per vocabulary entry and position, asked for by "kl" only."""
    vocab = 157184  # LLaDA2's vocabulary
    logits = torch.zeros(1, 2, vocab)
    assert candidate_stats(logits, {"second", "entropy"}).kept_logits is None
    kept = candidate_stats(logits, {"kl"}).kept_logits
    assert kept.dtype == torch.float32 and kept.element_size() * kept[0, 0].numel() == 628736


# --------------------------------------------------------------------------- the loop's side
IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


@dataclasses.dataclass(frozen=True)
class Recorder(Strategy):
    """Threshold unmasking that records what it saw, and counts its steps in its state."""

    seen: ClassVar[list] = []
    unmasks: ClassVar[bool] = True

    @property
    def needs_stats(self):
        return frozenset({"second", "entropy", "kl", "current"})

    def step(self, ctx: StepContext) -> StepResult:
        Recorder.seen.append(ctx)
        count = ctx.state.get("count", torch.zeros_like(ctx.step)) + 1  # [B]
        result = ThresholdUnmask(threshold=0.6).step(ctx)
        return dataclasses.replace(result, state={"count": count})


def test_the_loop_hands_the_statistics_positions_and_state():
    model = BagDenoiser(vocab_size=48, sharpness=1.0, exact=True)
    ids, attn = left_pad([[3, 4, 5], [6, 7]])
    Recorder.seen.clear()
    cfg = dllm_edit.EditGenerationConfig(
        strategies=[Recorder()], max_new_tokens=8, block_length=4, use_cache=False, **IDS
    )
    dllm_edit.generate(model, ids, attention_mask=attn, generation_config=cfg, adapter="bidirectional")
    seen = Recorder.seen
    assert seen and all(c.second_probs is not None and c.entropy is not None for c in seen)
    # the state counts the steps of the block, from an empty state at each block's first step
    blocks = [c.block_index for c in seen]
    for i, c in enumerate(seen):
        first = i == 0 or blocks[i - 1] != c.block_index
        assert (not c.state) == first
        assert torch.isinf(c.kl_prev).all() == first
        if not first:
            assert torch.equal(c.state["count"], seen[i - 1].state.get("count", torch.zeros_like(c.step)) + 1)
    # positions count from each row's first completion slot
    for c in seen:
        gen = c.positions >= 0  # [B, S]
        assert torch.equal(
            gen & ~c.masked & ~c.editable, torch.zeros_like(gen)
        )  # a generated slot is masked or editable
        assert (c.positions[:, 1:] - c.positions[:, :-1] == 1).all()
    assert {c.positions[:, 0].tolist()[0] for c in seen if c.block_index == 0} <= {-3, -2, -1, 0}


def test_kl_in_the_loop_equals_the_kl_of_consecutive_forwards():
    model = BagDenoiser(vocab_size=48, sharpness=1.0, exact=True)
    ids = torch.tensor([[3, 4, 5, 6]])  # a whole block: the canvas is the prompt, then the block
    Recorder.seen.clear()
    cfg = dllm_edit.EditGenerationConfig(
        strategies=[Recorder()],
        max_new_tokens=4,
        block_length=4,
        use_cache=False,
        suppress_mask_token=False,
        **IDS,
    )
    out = dllm_edit.generate(model, ids, generation_config=cfg, adapter="bidirectional", output_trace=True)
    steps = Recorder.seen
    assert len(steps) >= 2
    # recompute the distributions from the canvases the trace records
    canvases = [
        torch.cat([ids, r.before], dim=1) if r.span_start == ids.shape[1] else None for r in out.trace
    ]
    if canvases[0] is None:
        pytest.skip("the canvas layout put the prompt inside the block")
    for prev_canvas, now_canvas, ctx in zip(canvases, canvases[1:], steps[1:]):
        p_prev = model(prev_canvas).logits[:, ids.shape[1] :]
        p_now = model(now_canvas).logits[:, ids.shape[1] :]
        want = naive(p_now, prev_logits=p_prev)["kl"]
        torch.testing.assert_close(ctx.kl_prev.double(), want, rtol=1e-4, atol=1e-5)


def test_unknown_statistics_are_refused_before_a_forward():
    @dataclasses.dataclass(frozen=True)
    class Wants(Strategy):
        unmasks: ClassVar[bool] = True

        def requires(self):
            return Needs(stats={"margin"})  # type: ignore[arg-type]  # not a statistic: mypy says so too

        def step(self, ctx):
            raise AssertionError("never reached")

    @dataclasses.dataclass(frozen=True)
    class WantsTheEarlierWay(Wants):  # a strategy written for an earlier release, through the old hook
        @property
        def needs_stats(self):
            return frozenset({"margin"})

        def requires(self):
            return Needs()

    model = BagDenoiser(vocab_size=48)
    for strategy in (Wants(), WantsTheEarlierWay()):
        with pytest.raises(ValueError, match="margin"):  # refused when the run is configured
            cfg = dllm_edit.EditGenerationConfig(
                strategies=[strategy], max_new_tokens=4, block_length=4, **IDS
            )
            dllm_edit.generate(model, torch.tensor([[3, 4]]), generation_config=cfg, adapter="bidirectional")
    assert model.calls == 0


def test_batch_equals_alone_with_statistics_and_state():
    model = BagDenoiser(vocab_size=48, sharpness=1.0, exact=True)
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11, 3]]
    cfg = dllm_edit.EditGenerationConfig(
        strategies=[Recorder(), dllm_edit.strategies.TokenEdit(threshold=0.5)],
        max_new_tokens=8,
        block_length=4,
        use_cache=False,
        **IDS,
    )
    ids, attn = left_pad(prompts)
    batched = dllm_edit.generate(
        model, ids, attention_mask=attn, generation_config=cfg, adapter="bidirectional"
    )
    for i, p in enumerate(prompts):
        alone = dllm_edit.generate(model, torch.tensor([p]), generation_config=cfg, adapter="bidirectional")
        width = ids.shape[1] - len(p)
        assert batched.sequences[i, width:].tolist() == alone.sequences[0].tolist()
        assert batched.num_forwards[i] == alone.num_forwards[0]
