"""Behaviour 1: configured like the reference, generate() reproduces it token for token."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dllm_edit
from tests.helpers import EOS, MASK, PAD, BagDenoiser, tiny_llama
from tests.helpers.reference_decoder import reference_generate_20, reference_generate_21

REFERENCE_LIKE = dict(
    adapter="block_causal",
    use_cache=False,
    mask_token_id=MASK,
    eos_token_id=EOS,
    pad_token_id=PAD,
    suppress_mask_token=False,
    max_steps_per_block=None,
)
BAG = BagDenoiser(vocab_size=48)
LLAMA = tiny_llama()


def _completion(out, prompt_len, ref):
    """The returned completion, cut where the reference cut it; the rest must be padding."""
    gen = out.sequences[0, prompt_len:]
    assert torch.all(gen[len(ref) :] == PAD) or not (ref == EOS).any()
    return gen[: len(ref)]


@given(
    prompt_len=st.integers(1, 13),
    block_length=st.integers(1, 8),
    gen_length=st.integers(1, 20),
    threshold=st.floats(0.0, 1.0),
    editing_threshold=st.one_of(st.none(), st.sampled_from([0.0, 0.3, 0.6, 0.95])),
    max_post_steps=st.integers(0, 3),
    eos_early_stop=st.booleans(),
    seed=st.integers(0, 2**16),
)
@pytest.mark.parametrize("model", [BAG, LLAMA], ids=["bag", "llama"])
def test_matches_llada21_reference(
    model,
    prompt_len,
    block_length,
    gen_length,
    threshold,
    editing_threshold,
    max_post_steps,
    eos_early_stop,
    seed,
):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(2, MASK, (1, prompt_len), generator=g)
    kw = dict(
        block_length=block_length,
        threshold=threshold,
        editing_threshold=editing_threshold,
        max_post_steps=max_post_steps,
        eos_early_stop=eos_early_stop,
    )
    calls = []
    ref = reference_generate_21(
        model, prompt, mask_id=MASK, eos_id=EOS, gen_length=gen_length, counter=calls, **kw
    )
    out = dllm_edit.generate(model, prompt, max_new_tokens=gen_length, **REFERENCE_LIKE, **kw)
    assert out.sequences.shape == (1, prompt_len + gen_length)
    assert torch.equal(out.sequences[0, :prompt_len], prompt[0])
    assert torch.equal(_completion(out, prompt_len, ref), ref)
    assert int(out.num_forwards[0]) == len(calls)


@given(
    prompt_len=st.integers(1, 13),
    block_length=st.integers(1, 8),
    gen_length=st.integers(1, 20),
    steps_frac=st.floats(0.01, 1.0),
    threshold=st.sampled_from([0.5, 0.9, 0.95, 1.0]),
    eos_early_stop=st.booleans(),
    seed=st.integers(0, 2**16),
)
@pytest.mark.parametrize("model", [BAG, LLAMA], ids=["bag", "llama"])
def test_matches_llada20_quota_reference(
    model, prompt_len, block_length, gen_length, steps_frac, threshold, eos_early_stop, seed
):
    steps = max(1, round(steps_frac * block_length))
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(2, MASK, (1, prompt_len), generator=g)
    ref = reference_generate_20(
        model,
        prompt,
        mask_id=MASK,
        eos_id=EOS,
        gen_length=gen_length,
        block_length=block_length,
        steps=steps,
        threshold=threshold,
        eos_early_stop=eos_early_stop,
    )
    out = dllm_edit.generate(
        model,
        prompt,
        max_new_tokens=gen_length,
        block_length=block_length,
        steps=steps,
        threshold=threshold,
        editing_threshold=None,
        max_post_steps=0,
        eos_early_stop=eos_early_stop,
        **REFERENCE_LIKE,
    )
    assert torch.equal(_completion(out, prompt_len, ref), ref)
