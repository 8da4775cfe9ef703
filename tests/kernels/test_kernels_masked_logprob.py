"""masked_logprob: values and gradients (inputs, weight, bias) against autograd of the naive reference.

Both backends: the chunked torch path, and the Triton kernels (compiled on CUDA, in Triton's
interpreter on the CPU: tests/conftest.py sets TRITON_INTERPRET=1).
"""

import importlib.util

import pytest
import torch

from dllm_edit.kernels import _dispatch, masked_logprob, masked_logprob_reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HAS_KERNEL = importlib.util.find_spec("triton") is not None and not _dispatch.triton_disabled()
BACKENDS = [
    "torch",
    pytest.param(
        "triton",
        marks=pytest.mark.skipif(not HAS_KERNEL, reason="triton missing or DLLM_EDIT_DISABLE_TRITON set"),
    ),
]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-2, atol=2e-3)}

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warnings in the interpreter


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _run(fn, inputs, targets, mask, weight=None, bias=None, **kwargs):
    """Output and gradients (inputs, weight, bias) of a random weighting of the log-probabilities."""
    leaves = [_leaf(t) if t is not None else None for t in (inputs, weight, bias)]
    out = fn(leaves[0], targets, mask, weight=leaves[1], bias=leaves[2], **kwargs)
    g = torch.Generator().manual_seed(5)
    cotangent = torch.rand(out.shape, generator=g).to(out.device)
    (out * cotangent).sum().backward()
    return out, [leaf.grad if leaf is not None else None for leaf in leaves]


def _compare(got, want, dtype):
    out, grads = got
    want_out, want_grads = want
    assert out.dtype == torch.float32 and out.shape == want_out.shape
    torch.testing.assert_close(out, want_out, **TOL[dtype])
    for g, w in zip(grads, want_grads):
        if w is None:
            assert g is None
            continue
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), **TOL[dtype])


def _data(shape, vocab, dtype, seed, masked=True):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(*shape, vocab, generator=g)).to(dtype).to(DEVICE)
    targets = torch.randint(0, vocab, shape, generator=g).to(DEVICE)
    mask = None
    if masked:
        mask = (torch.rand(shape, generator=g) < 0.5).to(DEVICE)
        mask.view(-1)[0] = True
        targets = targets.masked_fill(~mask, -100)  # ignored positions may hold anything
    return logits, targets, mask


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("shape", "vocab", "chunk"),
    [((1, 1), 1, None), ((2, 7), 1023, 3), ((33, 1), 37, 4), ((1, 3), 50257, None)],
    ids=["V1", "V1023", "B33", "V50257"],
)
def test_logits_input(shape, vocab, chunk, dtype, backend):
    logits, targets, mask = _data(shape, vocab, dtype, seed=vocab)
    got = _run(masked_logprob, logits, targets, mask, chunk_size=chunk, backend=backend)
    _compare(got, _run(masked_logprob_reference, logits, targets, mask), dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(("chunk", "masked"), [(None, True), (2, True), (3, False)])
def test_hidden_input_fused_linear(chunk, masked, with_bias, dtype, backend):
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(3, 5, 16, generator=g).to(dtype).to(DEVICE)  # [B, L, H]
    weight = (0.5 * torch.randn(1023, 16, generator=g)).to(dtype).to(DEVICE)  # [V, H]
    bias = torch.randn(1023, generator=g).to(dtype).to(DEVICE) if with_bias else None
    _, targets, mask = _data((3, 5), 1023, dtype, seed=2, masked=masked)
    got = _run(masked_logprob, hidden, targets, mask, weight, bias, chunk_size=chunk, backend=backend)
    want = _run(masked_logprob_reference, hidden, targets, mask, weight, bias)
    if dtype == torch.float16:  # the reference's fp16 grads are rounded per op; compare against fp32
        want = _run(
            masked_logprob_reference,
            hidden.float(),
            targets,
            mask,
            weight.float(),
            None if bias is None else bias.float(),
        )
        want = (want[0], [None if w is None else w.half() for w in want[1]])
    _compare(got, want, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_llada2_vocabulary_few_rows(backend):
    logits, targets, mask = _data((1, 2), 157184, torch.float32, seed=0)
    got = _run(masked_logprob, logits, targets, mask, backend=backend)
    _compare(got, _run(masked_logprob_reference, logits, targets, mask), torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_some_leaves_need_grad_and_nothing_selected(backend):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 4, 8, generator=g).to(DEVICE)
    weight = torch.randn(50, 8, generator=g).to(DEVICE).requires_grad_(True)
    targets = torch.randint(0, 50, (2, 4), generator=g).to(DEVICE)
    out = masked_logprob(hidden, targets, weight=weight, backend=backend)
    out.sum().backward()
    ref_w = _leaf(weight)
    masked_logprob_reference(hidden, targets, weight=ref_w).sum().backward()
    torch.testing.assert_close(weight.grad, ref_w.grad)
    none = torch.zeros(2, 4, dtype=torch.bool, device=DEVICE)
    logits = _leaf(torch.randn(2, 4, 9).to(DEVICE))
    empty = masked_logprob(logits, torch.full((2, 4), -100, device=DEVICE), none, backend=backend)
    assert empty.shape == (0,)
    empty.sum().backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_minus_inf_logits_and_mask_order():
    logits = torch.zeros(2, 3, 5)
    logits[0, 1, 2] = -float("inf")
    targets = torch.tensor([[0, 2, 1], [4, 4, 4]])
    mask = torch.tensor([[False, True, True], [True, False, False]])
    out = masked_logprob(logits, targets, mask)
    assert out[0] == -float("inf")
    torch.testing.assert_close(out, masked_logprob_reference(logits, targets, mask))


def test_validation_messages():
    x = torch.randn(2, 3, 5)
    t = torch.zeros(2, 3, dtype=torch.long)
    cases = [
        (TypeError, "inputs must be a floating tensor", dict(inputs=torch.ones(2, 3, 5, dtype=torch.long))),
        (TypeError, "targets must be a LongTensor", dict(targets=t.float())),
        (ValueError, "targets must have the shape", dict(targets=t[0])),
        (TypeError, "mask must be a BoolTensor", dict(mask=t)),
        (ValueError, "mask must have the shape", dict(mask=torch.ones(3, dtype=torch.bool))),
        (
            ValueError,
            r"targets at selected positions must lie in \[0, V\) = \[0, 5\), got 5",
            dict(targets=t + 5),
        ),
        (ValueError, r"got -100; exclude ignored positions", dict(targets=t - 100)),
        (ValueError, "weight must be \\[V, H\\]", dict(weight=torch.randn(7, 4))),
        (
            TypeError,
            "weight dtype torch.float64 differs",
            dict(weight=torch.randn(7, 5, dtype=torch.float64)),
        ),
        (ValueError, "bias must be \\[V\\] = \\[7\\]", dict(weight=torch.randn(7, 5), bias=torch.randn(6))),
        (ValueError, "bias was given without weight", dict(bias=torch.randn(5))),
        (ValueError, "chunk_size must be a positive int", dict(chunk_size=0)),
        (ValueError, "backend must be one of", dict(backend="gpu")),
    ]
    for error, message, override in cases:
        kwargs = dict(inputs=x, targets=t, mask=None) | override
        with pytest.raises(error, match=message):
            masked_logprob(kwargs.pop("inputs"), kwargs.pop("targets"), kwargs.pop("mask"), **kwargs)
    # unselected positions may hold anything
    mask = torch.tensor([[True, False, False], [False, False, True]])
    masked_logprob(x, t.masked_fill(~mask, -100), mask)


@pytest.mark.skipif(not HAS_KERNEL, reason="triton missing or DLLM_EDIT_DISABLE_TRITON set")
def test_backend_triton_runs_the_kernels(monkeypatch):
    tri = importlib.import_module("dllm_edit.kernels.masked_logprob.triton")
    calls = []
    for name in ("logprob_forward", "logprob_backward"):
        real = getattr(tri, name)
        monkeypatch.setattr(
            tri, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k)
        )
    logits, targets, mask = _data((2, 3), 11, torch.float32, seed=4)
    _run(masked_logprob, logits, targets, mask, backend="triton")
    hidden = torch.randn(2, 3, 4).to(DEVICE)
    _run(masked_logprob, hidden, targets, mask, torch.randn(11, 4).to(DEVICE), backend="triton", chunk_size=1)
    # the fused linear forward is torch (vocabulary chunks); its backward runs the gradient kernel
    assert calls.count("logprob_forward") == 1 and calls.count("logprob_backward") >= 2


def test_auto_on_cpu_is_the_torch_path(monkeypatch):
    if DEVICE == "cuda":
        pytest.skip("on CUDA auto runs the kernels")
    monkeypatch.setattr(_dispatch, "triton_available", lambda: True)
    assert not _dispatch.use_triton(torch.zeros(1), "auto", op="test")
    monkeypatch.setenv("DLLM_EDIT_DISABLE_TRITON", "1")
    assert not _dispatch.use_triton(torch.zeros(1), "triton", op="test")
