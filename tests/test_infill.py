"""Infilling: masks placed in the prompt are decoded (layout, every algorithm, editing, refusals)."""

from __future__ import annotations

import pytest
import torch

import dllm_edit
from dllm_edit.algorithm_bench import unmasking_strategies
from dllm_edit.layout import build_canvas
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, left_pad, tiny_llama, tiny_tokenizer
from tests.helpers.registry import build

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
M = MASK


def _config(**fields):
    return dllm_edit.EditGenerationConfig(**{"block_length": 4, "max_new_tokens": 4, **IDS, **fields})


# ----------------------------------------------------------------------------------------------
# the layout


def test_layout_marks_prompt_masks_as_decoded_and_starts_at_their_block():
    ids, mask = left_pad([[5, M, 6, 7, 8, 9]])
    layout, canvas = build_canvas(ids, mask, 2, 2, MASK, PAD, "prompt_end")
    assert canvas.tolist() == [[5, M, 6, 7, 8, 9, M, M]]
    assert layout.first_block == 3 and layout.first_decoded_block == 0
    assert layout.decoded.long().tolist() == [[0, 1, 0, 0, 0, 0, 1, 1]]
    assert layout.generated.long().tolist() == [[0, 0, 0, 0, 0, 0, 1, 1]]
    assert layout.decodes.tolist() == [[True, False, False, True]]  # block 1 and 2 hold no mask
    assert layout.prompt_index.tolist() == [[0, 1, 2, 3, 4, 5]]


def test_layout_of_a_batch_keeps_each_row_s_blocks():
    ids, mask = left_pad([[5, M, 6], [7, 8, 9, 10, M]])
    layout, canvas = build_canvas(ids, mask, 2, 2, MASK, PAD, "absolute")
    # absolute: row 0 is shifted by a block, so its mask sits in block 1; row 1's mask in block 2
    assert canvas.tolist() == [[PAD, PAD, 5, M, 6, M, M, M], [7, 8, 9, 10, M, M, M, M]]
    assert layout.first_block == 2 and layout.first_decoded_block == 1
    assert layout.decodes.tolist() == [[False, True, True, True], [False, False, True, True]]
    assert layout.prompt_index.tolist() == [[0, 0, 2, 3, 4], [0, 1, 2, 3, 4]]
    alone, _ = build_canvas(*left_pad([[5, M, 6]]), 2, 2, MASK, PAD, "absolute")
    assert alone.decoded.long().tolist() == [[0, 1, 0, 1, 1, 1]]  # the same blocks, unshifted


def test_layout_without_prompt_masks_is_unchanged():
    ids, mask = left_pad([[5, 6, 7]])
    layout, _ = build_canvas(ids, mask, 2, 4, MASK, PAD, "prompt_end")
    assert layout.first_decoded_block == layout.first_block
    assert torch.equal(layout.decoded, layout.generated)


# ----------------------------------------------------------------------------------------------
# decoding


@pytest.mark.parametrize("rule", unmasking_strategies())
@pytest.mark.parametrize("max_new_tokens", [0, 4])
def test_every_unmasking_rule_fills_prompt_masks_on_the_bidirectional_adapter(rule, max_new_tokens):
    ids, mask = left_pad([[3, M, M, 5, 6, M, 7], [6, M, 7]])
    model = BagDenoiser(VOCAB, exact=True)
    config = _config(strategies=[build(rule, 4)], max_new_tokens=max_new_tokens)
    out = dllm_edit.generate(
        model,
        ids,
        attention_mask=mask,
        generation_config=config,
        adapter="bidirectional",
        generator=torch.Generator().manual_seed(0),
    )
    prompt = out.sequences[:, : ids.shape[1]]
    fixed = (ids != MASK) & mask.bool()
    assert torch.equal(prompt[fixed], ids[fixed]), rule
    assert not (out.sequences == MASK).any(), rule
    assert out.sequences.shape == (2, ids.shape[1] + max_new_tokens)


@pytest.mark.parametrize("adapter", ["shifted", "masked_lm", "bidirectional_dual_cache"])
def test_other_full_attention_adapters_fill_prompt_masks(adapter):
    ids, mask = left_pad([[3, M, M, 5, 6, M, 7]])
    config = _config(use_cache=False)
    out = dllm_edit.generate(
        BagDenoiser(VOCAB, exact=True), ids, attention_mask=mask, generation_config=config, adapter=adapter
    )
    assert not (out.sequences == MASK).any()
    assert out.sequences[0, [0, 3, 4, 6]].tolist() == [3, 5, 6, 7]


def test_editing_never_rewrites_a_token_the_user_fixed():
    """editing_threshold=0 edits wherever the argmax differs: only decoder-written slots change."""
    ids, mask = left_pad([[3, M, M, 5, 6, M, 7, 8, 9]])
    config = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=8, editing_threshold=0.0, output_trace=True, **IDS
    )
    model = BagDenoiser(VOCAB, sharpness=0.5, exact=True)
    out = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=config, adapter="bidirectional"
    )
    fixed = ids != MASK
    assert torch.equal(out.sequences[:, : ids.shape[1]][fixed], ids[fixed])
    edited_slots = set()
    for record in out.trace:
        for slot in record.edit[0].nonzero().flatten().tolist():
            edited_slots.add(record.span_start + slot)
    assert out.num_edits.sum() > 0  # the run does edit, so the claim is not vacuous
    layout, _ = build_canvas(ids, mask, 4, 8, MASK, PAD, "prompt_end")
    assert all(bool(layout.decoded[0, s]) for s in edited_slots)


def test_sequences_of_a_run_without_prompt_masks_are_unchanged():
    ids, mask = left_pad([[3, 4, 5]])
    model = BagDenoiser(VOCAB, exact=True)
    out = dllm_edit.generate(
        model, ids, attention_mask=mask, generation_config=_config(), adapter="bidirectional"
    )
    assert torch.equal(out.sequences[:, :3], ids)


# ----------------------------------------------------------------------------------------------
# refusals, before any forward


def test_max_new_tokens_zero_without_masks_is_refused():
    model = BagDenoiser(VOCAB, exact=True)
    with pytest.raises(ValueError, match=r"`max_new_tokens`=0 decodes nothing: no prompt holds the mask"):
        dllm_edit.generate(
            model,
            torch.tensor([[3, 4]]),
            generation_config=_config(max_new_tokens=0),
            adapter="bidirectional",
        )
    assert model.calls == 0


@pytest.mark.parametrize("adapter", ["block_causal", "block_causal_shifted"])
def test_block_causal_adapters_refuse_prompt_masks_with_the_reason(adapter):
    model = BagDenoiser(VOCAB, exact=True)
    with pytest.raises(
        ValueError,
        match=rf"infilling, which the '{adapter}' adapter refuses: its attention is "
        r"block-causal.*suffix of a fill-in-the-middle",
    ):
        dllm_edit.generate(
            model, torch.tensor([[3, M, 4]]), generation_config=_config(use_cache=False), adapter=adapter
        )
    assert model.calls == 0


@pytest.mark.parametrize("adapter", ["bidirectional_approx_cache", "bidirectional_dual_cache"])
def test_approximate_caches_refuse_prompt_masks_with_the_cache_on(adapter):
    model = tiny_llama("eager", seed=0)
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    with pytest.raises(ValueError, match=r"rows would have to rejoin the cached batch\. Set use_cache=False"):
        dllm_edit.generate(model, torch.tensor([[3, M, 4]]), generation_config=_config(), adapter=adapter)
    assert not calls


# ----------------------------------------------------------------------------------------------
# dllm_edit.infill and templates


def test_parse_template_expands_tags():
    tok = tiny_tokenizer()
    ids = dllm_edit.parse_template("w2 <mask:3> w4", tok, MASK)
    assert ids.count(MASK) == 3 and ids[0] == tok("w2", add_special_tokens=False)["input_ids"][0]


@pytest.mark.parametrize(
    "template, message",
    [
        ("w2 w3", r"holds no <mask:N> tag, so there is nothing to fill in"),
        ("w2 <mask> w3", r"malformed mask tag '<mask>'"),
        ("w2 <mask:x> w3", r"malformed mask tag '<mask:x>'"),
        ("w2 <mask:0> w3", r"N must be in \[1, 4096\], got 0"),
    ],
)
def test_bad_templates_are_refused(template, message):
    with pytest.raises(ValueError, match=message):
        dllm_edit.parse_template(template, tiny_tokenizer(), MASK)


def test_infill_fills_a_template_batch_and_matches_each_alone():
    tok = tiny_tokenizer()
    model = BagDenoiser(VOCAB, exact=True)
    config = _config(max_new_tokens=0)
    templates = ["w2 <mask:3> w4", "w5 w6 w7 <mask:2> w3 w9"]
    both = dllm_edit.infill(model, templates, tok, generation_config=config, adapter="bidirectional")
    assert not (both.sequences == MASK).any()
    for i, template in enumerate(templates):
        alone = dllm_edit.infill(model, template, tok, generation_config=config, adapter="bidirectional")
        width = alone.sequences.shape[1]
        assert both.sequences[i, -width:].tolist() == alone.sequences[0].tolist()


def test_infill_refuses_inputs_without_masks():
    model = BagDenoiser(VOCAB, exact=True)
    with pytest.raises(ValueError, match=r"`inputs` rows \[1\] hold no mask token"):
        dllm_edit.infill(
            model, torch.tensor([[3, M], [3, 4]]), generation_config=_config(), adapter="bidirectional"
        )
    with pytest.raises(TypeError, match="`tokenizer` is needed to encode templates"):
        dllm_edit.infill(model, "w2 <mask:2>", generation_config=_config(), adapter="bidirectional")
    assert model.calls == 0


def test_a_pipeline_infills_a_prompt_holding_the_mask_token():
    """`patch_generate` + transformers' text-generation pipeline: a prompt whose text holds the
    tokenizer's mask token is infilled, as `dllm_edit.generate` infills the same ids."""
    from transformers import pipeline

    from dllm_edit.models import LLaDAConfig, LLaDAModelLM

    torch.manual_seed(0)  # the test's own weights: the library never seeds
    model = LLaDAModelLM(
        LLaDAConfig(
            d_model=32,
            n_heads=4,
            n_kv_heads=4,
            n_layers=1,
            mlp_hidden_size=64,
            vocab_size=VOCAB,
            embedding_size=VOCAB,
            **IDS,
        )
    ).eval()  # full attention: the prompt's masks see the text after them
    tok = tiny_tokenizer()
    config = _config(max_new_tokens=4, eos_early_stop=False)
    dllm_edit.patch_generate(model, config)
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    ids = tok("w5 <mask> w7", return_tensors="pt").input_ids
    assert (ids == MASK).any()
    direct = dllm_edit.generate(model, ids, generation_config=config).sequences
    assert bool((direct != MASK).all())  # the prompt's mask is filled
    # the pipeline's token ids carry the filled prompt (its text output re-uses the prompt's text)
    out = pipe("w5 <mask> w7", max_new_tokens=4, return_tensors=True)[0]["generated_token_ids"]
    assert list(out) == direct[0].tolist()
