"""Behaviours 2 and 3: the KV cache is exact, and batching equals decoding rows one by one."""

import pytest
import torch

import dllm_edit
from tests.helpers import EOS, MASK, PAD, left_pad
from tests.helpers.denoisers import _Out

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40]]
CASES = [
    dict(mode="speedy", block_length=4, max_new_tokens=10),
    dict(mode="quality", block_length=3, max_new_tokens=7, eos_early_stop=False),
    dict(mode="quality", block_length=5, max_new_tokens=9, editing_threshold=None, max_post_steps=0),
    dict(mode="speedy", block_length=4, max_new_tokens=8, steps=2, editing_threshold=None),
]


@pytest.mark.parametrize(
    "model_name, adapter",
    [
        ("llama_eager", "block_causal"),
        ("llama_sdpa", "block_causal"),
        ("qwen3_sdpa", "block_causal"),
        ("llama_eager", "block_causal_shifted"),
        ("qwen3_sdpa", "block_causal_shifted"),
    ],
)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['mode']}-bl{c['block_length']}")
def test_cache_on_equals_cache_off(request, model_name, adapter, case):
    model = request.getfixturevalue(model_name)
    case = dict(case)
    cfg = dllm_edit.EditGenerationConfig.from_mode(case.pop("mode"), **IDS, **case)
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        off = dllm_edit.generate(model, ids, generation_config=cfg, use_cache=False, adapter=adapter)
        on = dllm_edit.generate(model, ids, generation_config=cfg, use_cache=True, adapter=adapter)
        assert torch.equal(on.sequences, off.sequences)
        assert torch.equal(on.num_forwards, off.num_forwards)


@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['mode']}-bl{c['block_length']}")
def test_batch_equals_rows_alone(llama_eager, case, use_cache):
    case = dict(case)
    cfg = dllm_edit.EditGenerationConfig.from_mode(case.pop("mode"), use_cache=use_cache, **IDS, **case)
    ids, mask = left_pad(PROMPTS)
    batch = dllm_edit.generate(llama_eager, ids, attention_mask=mask, generation_config=cfg)
    width = ids.shape[1]
    for i, prompt in enumerate(PROMPTS):
        alone = dllm_edit.generate(llama_eager, torch.tensor([prompt]), generation_config=cfg)
        assert torch.equal(batch.sequences[i, width:], alone.sequences[0, len(prompt) :])
        assert torch.equal(batch.sequences[i, :width], ids[i])  # the prompt and its padding are kept
        assert batch.num_forwards[i] == alone.num_forwards[0]
        assert torch.allclose(batch.tokens_per_forward[i], alone.tokens_per_forward[0])


def test_finished_rows_stop_counting_forwards(llama_eager):
    # a row whose completion ends early (EOS) must not keep counting forwards
    from tests.helpers import ScriptedDenoiser  # noqa: F401  (documentation pointer)

    cfg = dllm_edit.EditGenerationConfig.from_mode("quality", block_length=2, max_new_tokens=12, **IDS)
    ids, mask = left_pad([[5, 6], [7, 8]])
    out = dllm_edit.generate(llama_eager, ids, attention_mask=mask, generation_config=cfg)
    for i in range(2):
        alone = dllm_edit.generate(llama_eager, ids[i : i + 1], generation_config=cfg)
        assert out.num_forwards[i] == alone.num_forwards[0]


def test_sampling_is_reproducible_with_generator(llama_eager):
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=8, temperature=0.8, top_k=10, top_p=0.9, **IDS
    )
    ids = torch.tensor([[5, 6, 7]])
    a = dllm_edit.generate(
        llama_eager, ids, generation_config=cfg, generator=torch.Generator().manual_seed(3)
    )
    b = dllm_edit.generate(
        llama_eager, ids, generation_config=cfg, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(a.sequences, b.sequences)


@pytest.mark.parametrize("use_cache", [False, True])
def test_rows_without_work_leave_the_forward_batch(llama_eager, use_cache):
    # P=4 needs one block of 4, P=3 needs two (its prompt tail shares the first): the last global
    # block runs on one row only
    sizes = []
    hook = llama_eager.model.embed_tokens.register_forward_pre_hook(
        lambda m, args: sizes.append(args[0].shape[0])
    )
    try:
        ids, mask = left_pad([[5, 6, 7, 8], [9, 10, 11]])
        cfg = dllm_edit.EditGenerationConfig.from_mode("quality", block_length=4, max_new_tokens=4, **IDS)
        out = dllm_edit.generate(
            llama_eager, ids, attention_mask=mask, generation_config=cfg, use_cache=use_cache
        )
    finally:
        hook.remove()
    assert sizes[0] == 2 and sizes[-1] == 1
    for i in range(2):
        alone = dllm_edit.generate(
            llama_eager, ids[i : i + 1, mask[i].bool()], generation_config=cfg, use_cache=use_cache
        )
        assert torch.equal(out.sequences[i, 4:], alone.sequences[0, int(mask[i].sum()) :])


@pytest.mark.parametrize("adapter", ["block_causal", "block_causal_shifted"])
@pytest.mark.parametrize("use_cache", [False, True])
def test_rows_done_mid_block_leave_the_forward_batch_at_once(llama_eager, adapter, use_cache):
    # One block of 8 for both rows: P=6 leaves 2 masks, P=1 leaves 7. τ_mask 1.0 is never passed
    # (strict), so M2T writes one token a forward: the short row is done after 2 drafts + 1
    # verification, the long one after 7 + 1. The short row has no later block, so it must leave the
    # forward batch as soon as its block ends, not when the long row's does.
    sizes: list[int] = []
    hook = llama_eager.model.embed_tokens.register_forward_pre_hook(
        lambda m, args: sizes.append(args[0].shape[0])
    )
    prompts = [[5, 6, 7, 8, 9, 10], [11]]
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality",
        block_length=8,
        max_new_tokens=2,
        threshold=1.0,
        editing_threshold=None,
        max_post_steps=1,
        **IDS,
    )
    ids, mask = left_pad(prompts)
    try:
        out = dllm_edit.generate(
            llama_eager, ids, attention_mask=mask, generation_config=cfg, use_cache=use_cache, adapter=adapter
        )
    finally:
        hook.remove()
    assert out.num_forwards.tolist() == [3, 8]
    assert sizes == [2, 2, 2] + [1] * 5  # the short row's 3 forwards, then the long row alone
    width = ids.shape[1]
    for i, prompt in enumerate(prompts):
        alone = dllm_edit.generate(
            llama_eager, torch.tensor([prompt]), generation_config=cfg, use_cache=use_cache, adapter=adapter
        )
        assert torch.equal(out.sequences[i, width:], alone.sequences[0, len(prompt) :])
        assert out.num_forwards[i] == alone.num_forwards[0]


class _EosIfKeyed(torch.nn.Module):
    """Rows whose input holds token `key` predict EOS everywhere (p ~ 1); the others a spread
    distribution whose top token (10) is far below any threshold, so M2T writes one token a forward."""

    def __init__(self, key: int, vocab: int):
        super().__init__()
        self.key, self.vocab = key, vocab

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        batch, length = input_ids.shape
        keyed = (input_ids == self.key).any(-1)  # [B]
        logits = torch.zeros(batch, length, self.vocab)  # [B, T, V]
        logits[:, :, 10] = 1.0
        logits[keyed, :, EOS] = 30.0
        logits[:, :, MASK] = -30.0
        return _Out(logits)


def test_rows_done_by_the_eos_stop_leave_the_forward_batch_mid_block():
    # Two blocks of 4 per row. Row 0 writes EOS in one forward and verifies it: the EOS stop will end
    # it after this block, so it leaves the batch at once; row 1 drafts one token a forward.
    from tests.helpers import VOCAB

    model = _EosIfKeyed(key=5, vocab=VOCAB)
    sizes: list[int] = []
    model.register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=6, max_post_steps=1, use_cache=False, **IDS
    )
    out = dllm_edit.generate(
        model, torch.tensor([[5, 6], [7, 8]]), generation_config=cfg, adapter="block_causal"
    )
    assert out.sequences[0, 2:].tolist() == [EOS] + [PAD] * 5
    assert out.num_forwards.tolist() == [2, 8]
    assert sizes == [2, 2] + [1] * 6  # block 0: row 0 leaves after its verification forward


@pytest.mark.parametrize("seed", range(6))
def test_rows_finishing_in_the_first_block_leave_an_empty_cache(seed):
    # Regression: prompts shorter than a block finish in the block they share with the prompt, while
    # nothing is cached yet (but the cache layers exist, sized for all rows). Sampling makes some rows
    # emit EOS there; decoding must go on with the others, identically with and without the cache.
    from tests.helpers import tiny_llama

    model = tiny_llama("sdpa", seed=7)
    ids = torch.tensor([[2 + i // 4, 3 + i // 4] for i in range(8)])
    outs = []
    for use_cache in (True, False):
        cfg = dllm_edit.EditGenerationConfig.from_mode(
            "speedy", block_length=4, max_new_tokens=8, temperature=1.0, use_cache=use_cache, **IDS
        )
        outs.append(
            dllm_edit.generate(
                model, ids, generation_config=cfg, generator=torch.Generator().manual_seed(seed)
            )
        )
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    assert torch.equal(outs[0].num_forwards, outs[1].num_forwards)
