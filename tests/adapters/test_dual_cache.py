"""The approximate dual KV cache of bidirectional models (Fast-dLLM's `generate_with_dual_cache`)."""

import doctest
import itertools

import pytest
import torch

import dllm_edit
from dllm_edit.adapters import DualCacheBidirectionalAdapter, cache, dual_cache
from tests.helpers import EOS, MASK, PAD, BagDenoiser, left_pad
from tests.references.fast_dllm_cache import fast_dllm_dual_cache, fast_dllm_prefix_cache

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
ADAPTER = "bidirectional_dual_cache"
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20, 21]]


@pytest.fixture(scope="module")
def varied_llama():
    """A tiny random Llama whose predictions vary with the position and the context.

    The conftest models (initializer_range 0.02) predict nearly the same token with nearly the same
    probability everywhere, which no cache can get wrong; larger weights make the stale keys/values
    of a cached step matter, and a sharper head makes thresholds change decisions.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.3,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 4.0)
        head.bias.zero_()
        head.bias[MASK] = -1e4  # the mask token is never the argmax (the references have no guard)
    model.lm_head = head
    return model


def fast_dllm_config(block_length, max_new_tokens, threshold=None, steps=None):
    """Our config of Fast-dLLM's LLaDA loop: threshold rule (top-1 always, `>` vs the reference's
    `>=`, equal but at exact ties) or the quota rule with `steps` per block; no editing, no post step,
    no EOS stop, no mask guard."""
    if steps is not None:
        return dllm_edit.EditGenerationConfig.from_mode(
            "llada", block_length=block_length, steps=steps, max_new_tokens=max_new_tokens, **IDS
        )
    return dllm_edit.EditGenerationConfig(
        threshold=threshold,
        num_to_transfer=1,
        editing_threshold=None,
        max_post_steps=0,
        block_start="prompt_end",
        eos_early_stop=False,
        suppress_mask_token=False,
        block_length=block_length,
        max_new_tokens=max_new_tokens,
        output_trace=True,
        **IDS,
    )


def blocks_filled_at_once(trace):
    """Blocks whose only step was their first (the reference spends one more forward on each)."""
    blocks = [rec.block for rec in trace]
    return sum(blocks.count(b) == 1 for b in set(blocks))


def check_against_reference(model, rule, adapter, reference):
    """Same tokens as the reference port on every prompt; forwards too, up to its no-op forwards."""
    bl, gen = 8, 24
    cfg = fast_dllm_config(bl, gen, **rule)
    ref_steps = None if "steps" not in rule else rule["steps"] * gen // bl  # the reference counts all blocks
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        out = dllm_edit.generate(model, ids, generation_config=cfg, adapter=adapter)
        ref, nfe = reference(
            model,
            ids,
            mask_id=MASK,
            gen_length=gen,
            block_length=bl,
            steps=ref_steps,
            threshold=rule.get("threshold"),
        )
        assert torch.equal(out.sequences, ref)
        extra = blocks_filled_at_once(out.trace) if "threshold" in rule else 0
        assert int(out.num_forwards) + extra == nfe


@pytest.mark.parametrize("rule", [dict(threshold=0.9), dict(threshold=0.5), dict(steps=4), dict(steps=2)])
def test_matches_fast_dllm_dual_cache(varied_llama, rule):
    check_against_reference(varied_llama, rule, ADAPTER, fast_dllm_dual_cache)


@pytest.mark.parametrize("rule", [dict(threshold=0.9), dict(steps=4)])
def test_prefix_cache_matches_fast_dllm_prefix_cache(varied_llama, rule):
    check_against_reference(varied_llama, rule, "bidirectional_approx_cache", fast_dllm_prefix_cache)


@pytest.mark.parametrize("model_name", ["llama_eager", "qwen3_sdpa", "varied_llama"])
@pytest.mark.parametrize(
    "case",
    [
        dict(mode="quality", block_length=4, max_new_tokens=10, max_post_steps=3),
        dict(
            mode="quality",
            block_length=4,
            max_new_tokens=8,
            max_post_steps=3,
            multi_block_edit=True,
            block_start="absolute",
        ),
        dict(mode="llada", block_length=4, steps=2, max_new_tokens=8),
    ],
    ids=["quality", "mbe-absolute", "llada-quota"],
)
def test_refresh_every_step_equals_the_uncached_decode(request, model_name, case):
    model = request.getfixturevalue(model_name)
    case = dict(case)
    cfg = dllm_edit.EditGenerationConfig.from_mode(case.pop("mode"), **IDS, **case)
    ids, mask = left_pad(PROMPTS)
    exact = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=cfg, adapter="bidirectional"
    )
    every = DualCacheBidirectionalAdapter(refresh_every=1)
    out = dllm_edit.generate(model, ids, attention_mask=mask, generation_config=cfg, adapter=every)
    assert torch.equal(out.sequences, exact.sequences)
    assert torch.equal(out.num_forwards, exact.num_forwards)
    off = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=cfg, adapter=ADAPTER, use_cache=False
    )
    assert torch.equal(off.sequences, exact.sequences)


def _forward_shapes(model):
    shapes = []
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda m, a: shapes.append(tuple(a[0].shape)))
    return shapes, hook


@pytest.mark.parametrize("refresh_every", [None, 2, 3])
def test_cached_steps_run_only_the_block(varied_llama, refresh_every):
    prompt = [5, 6, 7, 8, 9]
    shapes, hook = _forward_shapes(varied_llama)
    try:
        out = dllm_edit.generate(
            varied_llama,
            torch.tensor([prompt]),
            adapter=DualCacheBidirectionalAdapter(refresh_every),
            generation_config=fast_dllm_config(4, 12, steps=4),
        )
    finally:
        hook.remove()
    canvas = len(prompt) + 12  # prompt_end: a row alone runs exactly its own canvas
    expected = [
        canvas if s == 0 or (refresh_every is not None and s % refresh_every == 0) else 4
        for _ in range(3)
        for s in range(4)
    ]
    assert [length for _, length in shapes] == expected
    assert int(out.num_forwards) == 12 and not (out.sequences == MASK).any()


@pytest.mark.parametrize(
    "model_name, refresh_every, case",
    [
        ("varied_llama", None, dict(mode="quality", block_length=4, max_new_tokens=12, max_post_steps=2)),
        (
            "varied_llama",
            None,
            dict(
                mode="quality",
                block_length=4,
                max_new_tokens=8,
                max_post_steps=2,
                block_start="absolute",
                multi_block_edit=True,
            ),
        ),
        ("varied_llama", 2, dict(mode="llada", block_length=4, steps=2, max_new_tokens=12)),
        ("llama_eager", None, dict(mode="speedy", block_length=5, max_new_tokens=10, max_post_steps=2)),
    ],
    ids=["quality", "mbe-absolute", "llada-refresh2", "speedy-llama"],
)
def test_batch_equals_rows_alone_and_no_mask_is_left(request, model_name, refresh_every, case):
    model = request.getfixturevalue(model_name)
    case = dict(case)
    cfg = dllm_edit.EditGenerationConfig.from_mode(case.pop("mode"), **IDS, **case)
    adapter = DualCacheBidirectionalAdapter(refresh_every)
    prompts = [*PROMPTS, [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40]]
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    assert not (batch.sequences == MASK).any()
    width = ids.shape[1]
    for i, prompt in enumerate(prompts):
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        got = batch.sequences[i, width : width + alone.sequences.shape[1] - len(prompt)]
        assert torch.equal(got, alone.sequences[0, len(prompt) :])
        assert batch.num_forwards[i] == alone.num_forwards[0]


def test_rows_leave_the_batch_in_the_middle_of_a_block(varied_llama):
    # with absolute blocks the rows' canvases end at different blocks; with post steps a row whose
    # last block is decided leaves the forward batch while others still decode theirs
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=6, block_start="absolute", eos_early_stop=False, **IDS
    )
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [20, 21, 22, 23, 24, 25, 26]]
    ids, mask = left_pad(prompts)
    shapes, hook = _forward_shapes(varied_llama)
    try:
        batch = dllm_edit.generate(
            varied_llama, ids, attention_mask=mask, generation_config=cfg, adapter=ADAPTER
        )
    finally:
        hook.remove()
    rows_of_cached_steps = [rows for rows, length in shapes if length == 4]
    left_mid_block = any(b < a for a, b in itertools.pairwise(rows_of_cached_steps))
    assert left_mid_block  # the case covers select_rows between two cached steps
    for i, prompt in enumerate(prompts):
        alone = dllm_edit.generate(
            varied_llama, torch.tensor([prompt]), generation_config=cfg, adapter=ADAPTER
        )
        width = ids.shape[1]
        got = batch.sequences[i, width : width + alone.sequences.shape[1] - len(prompt)]
        assert torch.equal(got, alone.sequences[0, len(prompt) :])


def test_agreement_with_the_uncached_decode_is_measured(varied_llama, record_property):
    # the dual cache is approximate: on this model it does change tokens (so the cache is really
    # read), refreshing more often changes fewer of them here, and every refresh interval ends with
    # the same number of generated tokens. The agreement is recorded, not held to a number.
    bl, gen = 8, 32
    ids = torch.tensor([[5, 6, 7, 20, 30]])
    cfg = fast_dllm_config(bl, gen, threshold=0.9)
    exact = dllm_edit.generate(varied_llama, ids, generation_config=cfg, adapter="bidirectional")
    agreement = {}
    for every in (None, 4, 2, 1):
        out = dllm_edit.generate(
            varied_llama, ids, generation_config=cfg, adapter=DualCacheBidirectionalAdapter(every)
        )
        assert out.sequences.shape == exact.sequences.shape and not (out.sequences == MASK).any()
        agreement[every] = (out.sequences[0, 5:] == exact.sequences[0, 5:]).float().mean().item()
    record_property("dual_cache_agreement", agreement)
    assert agreement[1] == 1.0
    assert agreement[None] < 1.0
    assert agreement[None] <= agreement[2]


@pytest.mark.parametrize(
    "value, error, match",
    [
        (0, ValueError, "`refresh_every` must be >= 1"),
        (-3, ValueError, "got -3"),
        (1.5, TypeError, "`refresh_every` must be None .* got 1.5 of type float"),
        (True, TypeError, "got True of type bool"),
        ("2", TypeError, "got '2' of type str"),
    ],
)
def test_bad_refresh_every_is_refused(value, error, match):
    with pytest.raises(error, match=match):
        DualCacheBidirectionalAdapter(refresh_every=value)


class _CountingBag(BagDenoiser):
    """A denoiser with no cache argument, counting its forwards."""

    def __init__(self):
        super().__init__(vocab_size=48)
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        self.calls += 1
        return super().forward(input_ids, attention_mask, position_ids, use_cache)


class _IgnoresCache(BagDenoiser):
    """Takes any keyword (a cache too) but never writes keys/values into it."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        return super().forward(input_ids, attention_mask, position_ids)


class _NoPositions(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        raise AssertionError("never called")


def test_models_that_cannot_take_the_cache_are_refused():
    ids = torch.tensor([[5, 6]])
    bag = _CountingBag()
    with pytest.raises(ValueError, match=r"takes no KV cache argument .* adapter='bidirectional'"):
        dllm_edit.generate(bag, ids, adapter=ADAPTER, max_new_tokens=4, **IDS)
    assert bag.calls == 0  # refused before any forward
    with pytest.raises(ValueError, match="takes no `position_ids`"):
        dllm_edit.generate(_NoPositions(), ids, adapter=ADAPTER, max_new_tokens=4, **IDS)
    with pytest.raises(ValueError, match=r"wrote keys/values into it for 0 layer\(s\)"):
        dllm_edit.generate(_IgnoresCache(vocab_size=48), ids, adapter=ADAPTER, max_new_tokens=4, **IDS)
    # use_cache=False runs the exact full-canvas session, which any bidirectional model takes
    out = dllm_edit.generate(bag, ids, adapter=ADAPTER, use_cache=False, max_new_tokens=4, **IDS)
    exact = dllm_edit.generate(bag, ids, adapter="bidirectional", max_new_tokens=4, **IDS)
    assert torch.equal(out.sequences, exact.sequences)


def test_flash_attention_is_refused_before_any_forward(llama_eager):
    calls = []
    hook = llama_eager.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    llama_eager.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ValueError, match="cannot take the block-causal 4-D mask"):
            dllm_edit.generate(llama_eager, torch.tensor([[5, 6]]), adapter=ADAPTER, max_new_tokens=4, **IDS)
    finally:
        llama_eager.config._attn_implementation = "eager"
        hook.remove()
    assert calls == []


def test_registered_by_name_never_auto_detected_and_compile_refused(llama_eager):
    assert dllm_edit.adapters.get_adapter_class(ADAPTER) is DualCacheBidirectionalAdapter
    assert ADAPTER not in dllm_edit.adapters.MODEL_TYPE_ADAPTERS.values()
    assert repr(DualCacheBidirectionalAdapter(3)) == "DualCacheBidirectionalAdapter(refresh_every=3)"
    with pytest.raises(ValueError, match="compile=True"):
        dllm_edit.generate(
            llama_eager, torch.tensor([[5, 6]]), adapter=ADAPTER, compile=True, max_new_tokens=4, **IDS
        )


@pytest.mark.parametrize("module", [dual_cache, cache])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_wino_shadow_block_is_refused_before_any_forward(llama_eager):
    # WINO's verification needs the shadow block over the whole canvas, which cached steps do not run
    calls = []
    hook = llama_eager.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    try:
        with pytest.raises(
            ValueError, match=r"shadow block .* 'bidirectional_dual_cache' adapter cannot build"
        ):
            dllm_edit.generate(
                llama_eager,
                torch.tensor([[5, 6]]),
                adapter=ADAPTER,
                unmasking="wino",
                block_start="prompt_end",
                max_new_tokens=4,
                block_length=4,
                **IDS,
            )
    finally:
        hook.remove()
    assert calls == []
