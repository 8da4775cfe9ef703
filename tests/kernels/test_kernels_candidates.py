"""The candidates kernels: the Triton kernel against the torch reference, and the dispatcher.

Without CUDA the Triton kernel runs in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported); the interpreter runs one program per row in Python,
so the large-vocabulary shapes use few rows.
"""

import importlib
import importlib.util
import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dllm_edit.kernels import (
    _dispatch,
    candidates,
    candidates_reference,
    edit_candidates,
    edit_candidates_reference,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (the `kernels` extra)")
needs_kernel = pytest.mark.skipif(
    not HAS_TRITON or _dispatch.triton_disabled(),
    reason="triton is not installed, or DLLM_EDIT_DISABLE_TRITON is set",
)
# Triton 3.9's interpreter handles bfloat16 loads; on CUDA bf16 is compiled.
DTYPES = [torch.float32, torch.float16, torch.bfloat16]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warnings in the interpreter


def _triton(logits, current=None, **kwargs):
    from dllm_edit.kernels.candidates.triton import candidates_triton

    return candidates_triton(logits, current=current, **kwargs)


def _assert_matches(got, want, vocab=None):
    """Tokens equal, probabilities equal to float rounding (NaN where the reference has NaN).

    A probability divides by a float32 sum over the vocabulary, which the kernel and the reference
    accumulate in different orders: the relative rounding error of such a sum grows like
    `sqrt(V) * eps` (about 3e-5 at V = 157184, measured with triton 3.9's interpreter), so the
    tolerance does too.
    """
    rtol = 2e-5 if vocab is None else max(2e-5, 4 * math.sqrt(vocab) * torch.finfo(torch.float32).eps)
    assert torch.equal(got[0].cpu(), want[0].cpu())
    for g, w in zip(got[1:], want[1:]):
        torch.testing.assert_close(g.cpu(), w.cpu(), rtol=rtol, atol=1e-7, equal_nan=True)


# (B, L, V): V not a multiple of any tile, L = 1, B = 1 and B = 33; LLaDA2's 157184 with 2 rows
SHAPES = [(1, 1, 1), (33, 1, 5), (2, 3, 1023), (1, 2, 50257), (2, 1, 157184)]


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_greedy_kernel_matches_reference(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    logits = (4 * torch.randn(shape, generator=g)).to(dtype).to(DEVICE)
    current = torch.randint(0, shape[-1], shape[:-1], generator=g).to(DEVICE)
    suppress = (shape[-1] - 1,) if shape[-1] > 1 else ()
    got = _triton(logits, current, suppress_ids=suppress)
    want = edit_candidates_reference(logits, current, suppress_ids=suppress)
    _assert_matches(got, want, vocab=shape[-1])


@needs_kernel
@pytest.mark.parametrize("block", [16, 64])
def test_ties_take_the_lowest_id_across_lanes_and_tiles(block):
    logits = torch.zeros(4, 200)
    logits[0, [7, 150]] = 3.0  # same lane in different tiles (150 - 7 is not a multiple of the block)
    logits[1, [130, 2]] = 3.0
    logits[2, [block + 3, 3]] = 3.0  # same lane, different tiles
    logits[3] = 1.0  # every id ties
    tok, prob, _ = _triton(logits.to(DEVICE), block=block)
    assert tok.tolist() == [7, 2, 3, 0] == torch.argmax(logits, -1).tolist()
    _assert_matches((tok, prob), candidates_reference(logits))


@needs_kernel
def test_special_rows_follow_the_reference():
    nan, inf = float("nan"), float("inf")
    logits = torch.randn(6, 300)
    logits[0] = -inf
    logits[0, 257] = 0.5  # every entry -inf but one: that one, probability 1
    logits[1] = -inf  # every entry -inf: token 0, probability NaN
    logits[2, [40, 290]] = nan  # NaN poisons the row: first NaN id, probability NaN
    logits[3, 299] = nan  # NaN in the last (partial) tile
    logits[4, 5] = nan  # ... unless it is suppressed
    logits[5, 100] = 1e4  # one huge logit
    current = torch.tensor([257, 3, 1, 0, 7, 100])
    want = edit_candidates_reference(logits, current, suppress_ids=(5,))
    got = _triton(logits.to(DEVICE), current.to(DEVICE), suppress_ids=(5,), block=128)
    _assert_matches(got, want)
    assert want[0].tolist()[:4] == [257, 0, 40, 299]
    assert want[1][0] == 1 and want[1][1:4].isnan().all() and not want[1][4].isnan()


@needs_kernel
def test_current_probability():
    logits = torch.randn(3, 70)
    current = torch.tensor([5, -1, 70])  # in range; out of range on both sides: probability 0
    for temperature in (0.0, 0.7):
        got = _triton(logits.to(DEVICE), current.to(DEVICE), temperature=temperature, suppress_ids=(5,))
        want_p = torch.softmax(
            logits.index_fill(-1, torch.tensor([5]), -float("inf")) / (temperature or 1), -1
        )
        torch.testing.assert_close(got[2].cpu(), torch.zeros(3))  # 5 is suppressed
        torch.testing.assert_close(got[1].cpu(), want_p.gather(-1, got[0].cpu()[:, None]).squeeze(-1))
    got = _triton(logits.to(DEVICE), torch.tensor([3, 4, 6], device=DEVICE))
    want_p = torch.softmax(logits, -1)
    torch.testing.assert_close(got[2].cpu(), want_p[[0, 1, 2], [3, 4, 6]])


@needs_kernel
def test_strided_logits_are_read_in_place():
    full = torch.randn(3, 7, 130)
    span = full[:, 2:5]  # [3, 3, V] slice of the sequence: not viewable as [9, V]
    _assert_matches(_triton(span.to(DEVICE))[:2], candidates_reference(span))
    wide = torch.randn(130, 4).t()  # vocabulary stride != 1
    _assert_matches(_triton(wide.to(DEVICE))[:2], candidates_reference(wide))
    single = torch.randn(130)  # no leading dimension
    _assert_matches(_triton(single.to(DEVICE))[:2], candidates_reference(single))


@needs_kernel
def test_sampling_is_reproducible_and_its_probability_is_the_softmax():
    logits = torch.randn(2, 5, 300).to(DEVICE)

    def run(seed):
        return _triton(logits, temperature=0.8, generator=torch.Generator().manual_seed(seed))

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    want = torch.softmax(logits.float().cpu() / 0.8, -1).gather(-1, a[0].cpu()[..., None]).squeeze(-1)
    torch.testing.assert_close(a[1].cpu(), want)
    gen = torch.Generator().manual_seed(0)
    first, second = (_triton(logits, temperature=0.8, generator=gen)[0] for _ in range(2))
    assert not torch.equal(first, second)  # the generator advances between calls


@needs_kernel
def test_sampling_follows_the_softmax_chi_square():
    # one row per sample (the interpreter's cost is per row): 600 samples of a 6-token vocabulary
    probs = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    temperature = 0.7
    logits = (temperature * probs.log()).expand(600, 6).contiguous()
    tok, prob, _ = _triton(
        logits.to(DEVICE), temperature=temperature, generator=torch.Generator().manual_seed(3)
    )
    counts = torch.bincount(tok.cpu(), minlength=6).double()
    expected = 600 * probs.double()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 20.52, (chi2, counts.tolist())  # 99.9% quantile of chi-square with 5 degrees of freedom
    torch.testing.assert_close(prob.cpu(), probs[tok.cpu()])


@needs_kernel
def test_sampling_never_proposes_a_suppressed_or_impossible_id():
    logits = torch.zeros(40, 9)
    logits[:, 2] = -float("inf")
    tok, _, _ = _triton(logits.to(DEVICE), temperature=1.0, suppress_ids=(4, -1))
    assert not ({2, 4, 8} & set(tok.tolist()))


@needs_kernel
@given(
    values=st.lists(
        st.sampled_from([-2.0, 0.0, 1.0, 1.0, 3.0, float("-inf")]), min_size=3 * 37, max_size=3 * 37
    ),
    block=st.sampled_from([8, 16, 64]),
)
def test_greedy_property_many_ties(values, block):
    logits = torch.tensor(values).reshape(3, 37)
    current = torch.tensor([0, 36, 11])
    _assert_matches(
        _triton(logits.to(DEVICE), current.to(DEVICE), block=block),
        edit_candidates_reference(logits, current),
    )


# --- the dispatcher -------------------------------------------------------------------------------


def test_importing_the_package_does_not_import_triton():
    code = "import sys, dllm_edit, dllm_edit.kernels; assert 'triton' not in sys.modules, 'triton imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_auto_uses_the_torch_path_on_cpu(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the Triton path ran")

    if HAS_TRITON:
        tri = importlib.import_module("dllm_edit.kernels.candidates.triton")

        monkeypatch.setattr(tri, "candidates_triton", boom)
    logits = torch.randn(2, 3, 11)
    _assert_matches(candidates(logits), candidates_reference(logits))
    _assert_matches(candidates(logits, backend="torch"), candidates_reference(logits))


@needs_triton
def test_disable_env_and_top_k_fall_back_to_the_reference(monkeypatch):
    tri = importlib.import_module("dllm_edit.kernels.candidates.triton")

    def boom(*args, **kwargs):
        raise AssertionError("the Triton path ran")

    logits = torch.randn(2, 3, 11)
    monkeypatch.setattr(tri, "candidates_triton", boom)
    monkeypatch.setenv("DLLM_EDIT_DISABLE_TRITON", "1")
    _assert_matches(candidates(logits, backend="triton"), candidates_reference(logits))
    monkeypatch.delenv("DLLM_EDIT_DISABLE_TRITON")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for kwargs in ({"top_k": 3}, {"top_p": 0.5}):
        want = candidates_reference(
            logits, temperature=0.5, generator=torch.Generator().manual_seed(0), **kwargs
        )
        got = candidates(
            logits, temperature=0.5, generator=torch.Generator().manual_seed(0), backend="triton", **kwargs
        )
        _assert_matches(got, want)


@needs_kernel
def test_backend_triton_runs_the_kernel(monkeypatch):
    tri = importlib.import_module("dllm_edit.kernels.candidates.triton")

    calls = []
    real = tri.candidates_triton
    monkeypatch.setattr(tri, "candidates_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    logits = torch.randn(2, 11).to(DEVICE)
    current = torch.tensor([1, 2], device=DEVICE)
    _assert_matches(candidates(logits, backend="triton"), candidates_reference(logits))
    _assert_matches(
        edit_candidates(logits, current, backend="triton"), edit_candidates_reference(logits, current)
    )
    assert len(calls) == 2


def test_backend_errors(monkeypatch):
    logits = torch.randn(2, 11)
    with pytest.raises(ValueError, match="backend must be one of"):
        candidates(logits, backend="cuda")
    monkeypatch.delenv("DLLM_EDIT_DISABLE_TRITON", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if HAS_TRITON:
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            candidates(logits, backend="triton")
    monkeypatch.setattr(_dispatch, "triton_available", lambda: False)
    with pytest.raises(ImportError, match=r"dllm-edit\[kernels\]"):
        candidates(logits, backend="triton")
    with pytest.raises(TypeError, match="logits must be a floating tensor"):
        candidates(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="current must have the shape"):
        edit_candidates(logits, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        candidates(logits, temperature=-1.0)


@needs_kernel
def test_suppress_ids_out_of_range():
    with pytest.raises(ValueError, match="suppress_ids must lie in"):
        _triton(torch.randn(2, 11).to(DEVICE), suppress_ids=(11,))


def test_reference_does_not_write_into_float32_logits():
    logits = torch.randn(3, 10)
    before = logits.clone()
    candidates_reference(logits, suppress_ids=(2,))
    assert torch.equal(logits, before)


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize(
    "stats", [frozenset(), frozenset({"current_prob", "top_prob", "entropy"})], ids=["plain", "stats"]
)
def test_reading_the_logits_in_place_gives_the_working_copys_bits(stats):
    from dllm_edit.kernels import candidate_stats_reference
    from dllm_edit.kernels.candidates import reference

    vocab = 200_000  # 10 rows a chunk: 25 rows run three chunks
    logits = torch.randn(25, vocab, generator=torch.Generator().manual_seed(0)) * 5
    logits[3, 17] = float("nan")  # a NaN row
    logits[4] = -float("inf")  # an all -inf row
    current = torch.randint(0, vocab, (25,), generator=torch.Generator().manual_seed(1))
    before = logits.clone()
    suppress = (vocab - 1, 5, vocab - 1)
    assert reference._reads_in_place(logits, 0.0, None, None, suppress, True)
    assert not reference._reads_in_place(logits, 0.0, None, None, suppress, False)  # not lent
    assert not reference._reads_in_place(logits.clone().requires_grad_(), 0.0, None, None, suppress, True)
    in_place = candidate_stats_reference(logits, stats, current, suppress_ids=suppress, in_place=True)
    assert torch.equal(_bits(logits), _bits(before))  # restored bit for bit
    copied = candidate_stats_reference(logits, stats, current, suppress_ids=suppress)  # the working copy
    for field in ("token", "prob", "current_prob", "top_prob", "second_prob", "logit_gap", "entropy"):
        a, b = getattr(in_place, field), getattr(copied, field)
        assert (a is None and b is None) or torch.equal(_bits(a), _bits(b)), field


def test_in_place_suppression_is_restored_when_the_call_raises(monkeypatch):
    from dllm_edit.kernels.candidates import reference

    logits = torch.randn(4, 64)
    before = logits.clone()

    def boom(x, out):
        assert torch.isneginf(x[:, 7]).all()  # the suppressed column, written in place
        raise RuntimeError("boom")

    monkeypatch.setattr(reference, "first_argmax", boom)
    with pytest.raises(RuntimeError, match="boom"):
        candidates_reference(logits, suppress_ids=(7,), in_place=True)
    assert torch.equal(_bits(logits), _bits(before))


@pytest.mark.parametrize("op", ["candidates", "edit_candidates", "candidate_stats"])
def test_logits_autograd_saved_are_never_written_unless_lent(op):
    # a detached view of logits saved for backward (a trainer's greedy draft) shares their version
    # counter: writing and restoring them would still break the backward, so the default copies
    from dllm_edit import kernels

    weight = torch.randn(5, 16, requires_grad=True)
    logits = torch.randn(6, 5) @ weight  # [6, 16]
    loss = torch.log_softmax(logits, -1)[:, 0].sum()  # saves its output for backward
    version = logits._version
    view = logits.detach()
    if op == "candidates":
        kernels.candidates(view, suppress_ids=(3,), backend="torch")
    elif op == "edit_candidates":
        kernels.edit_candidates(view, torch.zeros(6, dtype=torch.long), suppress_ids=(3,), backend="torch")
    else:
        kernels.candidate_stats(view, {"entropy"}, suppress_ids=(3,), backend="torch")
    assert logits._version == version
    loss.backward()  # raises if the saved tensor had been written
    assert weight.grad is not None


@pytest.mark.parametrize("value", ["yes", 1, torch.tensor(True)])
def test_in_place_must_be_a_bool(value):
    from dllm_edit import kernels

    with pytest.raises(TypeError, match="in_place must be a bool"):
        kernels.candidates(torch.randn(2, 8), in_place=value)


def test_logits_that_cannot_be_written_take_the_copy():
    with torch.inference_mode():
        inference = torch.randn(3, 10)
    shared = torch.randn(1, 10).expand(3, 10)  # three rows, one memory
    for logits in (inference, shared):
        tok, prob = candidates_reference(logits, suppress_ids=(int(logits[0].argmax()),), in_place=True)
        expected = torch.softmax(
            logits.clone().index_fill(-1, tok.new_tensor([int(logits[0].argmax())]), -1e30), -1
        )
        assert torch.equal(tok, expected.argmax(-1))
        torch.testing.assert_close(prob, expected.max(-1).values)


def test_edit_candidates_reference_is_the_softmax():
    logits = torch.randn(4, 12)
    current = torch.tensor([0, 5, 11, 3])
    tok, prob, cur = edit_candidates_reference(logits, current)
    p = torch.softmax(logits, -1)
    assert torch.equal(tok, p.argmax(-1))
    torch.testing.assert_close(prob, p.max(-1).values)
    torch.testing.assert_close(cur, p[torch.arange(4), current])
    # top-k: a current token outside the k best has probability 0
    _, _, cur_k = edit_candidates_reference(logits, logits.argmin(-1), top_k=2)
    assert torch.equal(cur_k, torch.zeros(4))
    assert math.isclose(float(edit_candidates_reference(logits, current, top_k=1)[1].min()), 1.0)


def test_reference_sampling_follows_the_softmax_chi_square():
    # the torch path (CPU): Gumbel-max with torch.rand; 20000 samples in one call
    probs = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    logits = (0.7 * probs.log()).expand(20000, 6)
    tok, prob = candidates_reference(logits, temperature=0.7, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(tok, minlength=6).double()
    expected = 20000 * probs.double()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 20.52, (chi2, counts.tolist())
    torch.testing.assert_close(prob, probs[tok])


def _near_one_logits(targets, top=20.0, vocab=64):
    """Rows whose argmax (id 0, logit `top`) has probability `targets[i]`: the other ids share the
    rest evenly, so |logit| ~ 20, where exp(x - logsumexp(x)) loses near-1 precision."""
    rows = []
    for p in targets:
        rest = math.log((1 - p) / (vocab - 1)) + top - math.log(p)  # softmax(row)[0] == p
        rows.append([top] + [rest] * (vocab - 1))
    return torch.tensor(rows, dtype=torch.float32)


TARGETS = [0.9999937, 0.9999923, 0.9999911, 0.99999, 0.9999995]


def test_near_one_probabilities_keep_their_order():
    # issue 20: exp(chosen - lse) mapped 0.9999937, 0.9999923 and 0.9999911 to one float32 value
    logits = _near_one_logits(TARGETS)
    token, prob = candidates_reference(logits)
    assert token.tolist() == [0] * len(TARGETS)
    want = torch.softmax(logits, dim=-1)[:, 0]  # what the reference decoders compare and rank
    assert torch.equal(prob, want)
    assert torch.argsort(prob, descending=True).tolist() == sorted(
        range(len(TARGETS)), key=lambda i: -TARGETS[i]
    )
    assert len(set(prob[:3].tolist())) == 3
    old = torch.exp(logits[:, 0] - torch.logsumexp(logits, dim=-1))  # the former formula
    assert len(set(old[:3].tolist())) < 3  # (what this test guards against)
    _, _, current = edit_candidates_reference(logits, torch.zeros(len(TARGETS), dtype=torch.long))
    assert torch.equal(current, want)


@needs_kernel
def test_near_one_probabilities_keep_their_order_in_the_kernel():
    logits = _near_one_logits(TARGETS).to(DEVICE)
    token, prob, _ = _triton(logits, temperature=0.0, generator=None, suppress_ids=())
    _assert_matches((token, prob), candidates_reference(logits))
    assert torch.argsort(prob.cpu(), descending=True).tolist() == sorted(
        range(len(TARGETS)), key=lambda i: -TARGETS[i]
    )
