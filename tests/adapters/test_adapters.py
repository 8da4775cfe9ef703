"""Model adapters: shifted logits (Dream and block-causal), masked LMs, the registry and its entry
points, bad models.

Every model is a tiny random one built here from a config; nothing is downloaded.
"""

from __future__ import annotations

import copy
import doctest
import importlib
import inspect
import warnings
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from types import SimpleNamespace

import pytest
import torch

import dllm_edit
from dllm_edit import adapters
from dllm_edit.adapters import (
    BidirectionalAdapter,
    BlockCausalAdapter,
    BlockCausalShiftedAdapter,
    MaskedLMAdapter,
    ModelAdapter,
    ShiftedLogitsAdapter,
    available_adapters,
    detect_adapter,
    register_adapter,
    resolve_adapter,
)
from dllm_edit.layout import build_canvas
from tests.helpers import EOS, MASK, PAD, VOCAB, left_pad

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40]]


# ----------------------------------------------------------------------------------------------
# tiny models


def _sharpen_head(model, scale: float) -> None:
    """Untie and scale the output projection so thresholds change decisions, and make the mask token
    never the argmax (as conftest._sharpen does for decoders)."""
    old = model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight * scale)
        head.bias.zero_()
        head.bias[MASK] = -1e4
    model.set_output_embeddings(head)


def _masked_lm(kind: str):
    import transformers as tf

    torch.manual_seed(3)
    small = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    if kind == "bert":
        model = tf.BertForMaskedLM(tf.BertConfig(**small, pad_token_id=PAD))
    elif kind == "roberta":  # positions start at padding_idx + 1 = 2: 130 positions hold 128
        model = tf.RobertaForMaskedLM(tf.RobertaConfig(**{**small, "max_position_embeddings": 130}))
    elif kind == "xlm-roberta":
        model = tf.XLMRobertaForMaskedLM(tf.XLMRobertaConfig(**{**small, "max_position_embeddings": 130}))
    elif kind == "modernbert":  # local attention of 8 tokens: the sliding-window layers matter here
        model = tf.ModernBertForMaskedLM(
            tf.ModernBertConfig(
                **{**small, "num_hidden_layers": 3},
                local_attention=8,
                pad_token_id=PAD,
                eos_token_id=EOS,
                bos_token_id=2,
                cls_token_id=2,
                sep_token_id=EOS,
            )
        )
    elif kind == "distilbert":
        model = tf.DistilBertForMaskedLM(
            tf.DistilBertConfig(
                vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128
            )
        )
    elif kind == "electra":
        model = tf.ElectraForMaskedLM(tf.ElectraConfig(**small, embedding_size=16))
    else:  # pragma: no cover
        raise ValueError(kind)
    model.eval()
    _sharpen_head(model, 30.0)
    return model


MASKED_LMS = ["bert", "roberta", "xlm-roberta", "modernbert", "distilbert", "electra"]


@pytest.fixture(scope="module")
def masked_lms():
    return {kind: _masked_lm(kind) for kind in MASKED_LMS}


@pytest.fixture(scope="module")
def bert(masked_lms):
    return masked_lms["bert"]


@pytest.fixture(scope="module")
def dream_qwen2():
    """A tiny Qwen2ForCausalLM posing as Dream (Dream is a Qwen2.5 network run with full attention)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    model = Qwen2ForCausalLM(cfg).eval()
    model.config.model_type = "Dream"  # what Dream's config.json says
    _sharpen_head(model, 20.0)
    return model


@dataclass
class _Out:
    logits: torch.Tensor


class PositionModel(torch.nn.Module):
    """logits[..., 0] = the position id, logits[..., 1] = the input slot; nothing else."""

    def __init__(self, model_type: str = "dream"):
        super().__init__()
        self.config = SimpleNamespace(model_type=model_type)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        batch, length = input_ids.shape
        logits = torch.zeros(batch, length, VOCAB)
        logits[..., 0] = position_ids.float()
        logits[..., 1] = torch.arange(length, dtype=torch.float32)
        return _Out(logits)


class PositionTokenModel(torch.nn.Module):
    """Proposes, with certainty, token `token_of(p)` at the output of position `p`."""

    def __init__(self, model_type: str):
        super().__init__()
        self.config = SimpleNamespace(model_type=model_type)

    @staticmethod
    def token_of(position):
        return 2 + (position + 10) % 40  # never PAD, EOS or MASK

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        logits = torch.full((*input_ids.shape, VOCAB), -30.0)
        logits.scatter_(-1, self.token_of(position_ids)[..., None], 30.0)
        return _Out(logits)


def assert_batch_equals_rows_alone(model, cfg, adapter=None, prompts=PROMPTS):
    ids, mask = left_pad(prompts)
    batch = dllm_edit.generate(model, ids, attention_mask=mask, generation_config=cfg, adapter=adapter)
    width = ids.shape[1]
    for i, prompt in enumerate(prompts):
        alone = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter=adapter)
        assert torch.equal(batch.sequences[i, width:], alone.sequences[0, len(prompt) :]), i
        assert torch.equal(batch.sequences[i, :width], ids[i])
        assert batch.num_forwards[i] == alone.num_forwards[0]
    return batch


# ----------------------------------------------------------------------------------------------
# detection


@pytest.mark.parametrize("kind", MASKED_LMS)
def test_masked_lms_are_detected(masked_lms, kind):
    model = masked_lms[kind]
    assert model.config.model_type == kind
    assert isinstance(resolve_adapter(model, None), MaskedLMAdapter)


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        ("dream", "shifted"),
        ("Dream", "shifted"),
        ("llada", "bidirectional"),
        ("LLaDA", "bidirectional"),
        ("bert", "masked_lm"),
        ("llama", "block_causal"),
        ("llada2_moe", "block_causal"),
        (None, "block_causal"),
    ],
)
def test_detection_by_model_type(model_type, expected):
    model = SimpleNamespace(config=SimpleNamespace(model_type=model_type))
    assert detect_adapter(model) == expected


def test_detection_by_masked_lm_class_name():
    class MyTinyForMaskedLM(PositionModel):
        pass

    assert detect_adapter(MyTinyForMaskedLM(model_type="not_a_known_type")) == "masked_lm"
    # the model_type wins over the class name
    assert detect_adapter(MyTinyForMaskedLM(model_type="dream")) == "shifted"


def test_a_declared_adapter_wins_over_detection_and_an_unknown_one_is_refused(llama_eager):
    declared = SimpleNamespace(config=SimpleNamespace(model_type="llama", dllm_edit_adapter="shifted"))
    assert detect_adapter(declared) == "shifted"
    typo = SimpleNamespace(config=SimpleNamespace(model_type="llama", dllm_edit_adapter="shfited"))
    with pytest.raises(ValueError, match=r"dllm_edit_adapter = 'shfited' names no adapter.*available"):
        detect_adapter(typo)
    assert detect_adapter(llama_eager) == "block_causal"  # nothing declared: detection as before


def test_decoders_stay_block_causal(llama_eager, dream_qwen2):
    assert isinstance(resolve_adapter(llama_eager, None), BlockCausalAdapter)
    assert isinstance(resolve_adapter(dream_qwen2, None), ShiftedLogitsAdapter)


# ----------------------------------------------------------------------------------------------
# shifted logits


def test_shifted_slot_reads_the_previous_output():
    # row 0: prompt of 2 tokens; row 1: empty prompt, so its own slot 0 is generated (the edge)
    ids = torch.tensor([[5, 6], [PAD, PAD]])
    mask = torch.tensor([[1, 1], [0, 0]])
    layout, canvas = build_canvas(ids, mask, 2, 4, MASK, PAD)
    assert layout.offsets.tolist() == [0, 2]  # row 1 is shifted by one block
    session = ShiftedLogitsAdapter().open(PositionModel(), layout, use_cache=False)
    logits = session.logits(canvas, block=1, window=1)  # slots 0..3
    source = logits[..., 1].long()  # the output slot each canvas slot reads
    # row 0: slot j reads j - 1; slot 0 (its first slot, prompt) reads itself
    # row 1: its own slot 0 is canvas slot 2 and reads itself; slot 3 reads 2; padding is clamped
    assert source.tolist() == [[0, 0, 1, 2], [2, 2, 2, 2]]
    assert logits[1, 2:, 0].tolist() == [0.0, 0.0]  # both read position 0 of row 1
    logits = session.logits(canvas, block=2, window=0)  # slots 4, 5
    assert logits[..., 1].long().tolist() == [[3, 4], [3, 4]]
    assert logits[..., 0].tolist() == [[3.0, 4.0], [1.0, 2.0]]
    session.select_rows(torch.tensor([1]))
    assert session.logits(canvas, block=2, window=0)[..., 0].tolist() == [[1.0, 2.0]]


def test_shifted_generation_writes_the_prediction_of_the_previous_position():
    model = PositionTokenModel("dream")
    prompt = [5, 6, 7]
    cfg = dllm_edit.EditGenerationConfig.from_mode("quality", block_length=4, max_new_tokens=6, **IDS)
    out = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg)  # detected
    positions = torch.arange(len(prompt), len(prompt) + 6)
    assert out.sequences[0, 3:].tolist() == model.token_of(positions - 1).tolist()
    plain = dllm_edit.generate(model, torch.tensor([prompt]), generation_config=cfg, adapter="bidirectional")
    assert plain.sequences[0, 3:].tolist() == model.token_of(positions).tolist()


def test_shifted_equals_bidirectional_read_one_to_the_left(dream_qwen2):
    ids, mask = left_pad(PROMPTS)
    layout, canvas = build_canvas(ids, mask, 4, 8, MASK, PAD)
    canvas[:, -6:] = torch.arange(3, 9)  # some written tokens in the last block
    full = BidirectionalAdapter().open(dream_qwen2, layout, False)
    last = layout.num_blocks - 1
    reference = full.logits(canvas, last, last)  # [B, T, V]
    shifted = ShiftedLogitsAdapter().open(dream_qwen2, layout, False)
    block, window = last, 1
    got = shifted.logits(canvas, block, window)  # [B, 8, V]
    start = (block - window) * 4
    torch.testing.assert_close(got, reference[:, start - 1 : start + 7])


@pytest.mark.parametrize("block_start", ["absolute", "prompt_end"])
@pytest.mark.parametrize("mode", ["speedy", "quality"])
def test_shifted_batch_equals_rows_alone(dream_qwen2, mode, block_start):
    # in float64: a real attention kernel sums in an order that depends on the sequence length, so
    # in float32 the logits of a padded row differ from the row alone by ~1e-6, enough to flip the
    # near-ties speedy's "edit whenever the argmax differs" meets; float64 keeps them below the
    # float32 resolution the decisions are taken at
    model = copy.deepcopy(dream_qwen2).double()
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        mode, block_length=4, max_new_tokens=8, block_start=block_start, **IDS
    )
    out = assert_batch_equals_rows_alone(model, cfg)
    assert not (out.sequences == MASK).any()


# ----------------------------------------------------------------------------------------------
# block-causal shifted logits


@pytest.mark.parametrize("max_window", [0, 1])
@pytest.mark.parametrize("use_cache", [False, True])
def test_block_causal_shifted_reads_the_block_causal_output_one_slot_to_the_left(
    llama_eager, use_cache, max_window
):
    """Slot j of the active block reads the block-causal output at j - 1; a block's first slot reads
    the previous block's last output, kept from the block's first step when the cache holds the
    previous block (the later steps run the active block alone). With multi-block editing, the
    window's slot j reads the review copy's output at j - 1: the review copy starts one slot before
    the window, so its first slot reads that slot under the review's view (the block-causal
    adapter's review of one block more gives the reference)."""
    ids, mask = left_pad(PROMPTS)
    layout, canvas = build_canvas(ids, mask, 4, 12, MASK, PAD)  # [B, T]
    reference = BlockCausalAdapter().open(llama_eager, layout, use_cache=False)
    session = BlockCausalShiftedAdapter().open(llama_eager, layout, use_cache=use_cache)
    gen = torch.Generator().manual_seed(0)
    for block in range(layout.first_block, layout.num_blocks):
        window = min(max_window, block - layout.first_block)
        span = slice((block - window) * 4, (block + 1) * 4)
        for step in range(3):  # the block's first step, then two steps writing more of it
            if step:
                written = torch.randint(3, VOCAB - 2, canvas[:, span].shape, generator=gen)
                fill = (canvas[:, span] == MASK) & (torch.rand(canvas[:, span].shape, generator=gen) < 0.5)
                canvas[:, span] = torch.where(fill, written, canvas[:, span])
            with torch.no_grad():
                got = session.logits(canvas, block, window)  # [B, (W + 1) * 4, V]
                wider = reference.logits(canvas, block, window + 1)  # [B, (W + 2) * 4, V]
                previous = reference.logits(canvas, block - 1, 0)[:, -1:]  # [B, 1, V] (main view)
                current = reference.logits(canvas, block, 0)[:, :-1]  # [B, 3, V]
            expected = torch.cat([wider[:, 3 : 3 + window * 4], previous, current], dim=1)
            decoded = layout.generated[:, span]  # [B, (W + 1) * 4] (a row's first slot reads itself)
            torch.testing.assert_close(
                got[decoded], expected[decoded], atol=1e-5, rtol=1e-5, msg=f"block {block} step {step}"
            )
        canvas[:, span] = torch.where(canvas[:, span] == MASK, 3 + block, canvas[:, span])  # finished


def test_block_causal_shifted_first_slot_of_a_row_reads_itself():
    ids = torch.tensor([[5, 6], [PAD, PAD]])  # row 1: empty prompt, its slot 0 is generated
    mask = torch.tensor([[1, 1], [0, 0]])
    layout, canvas = build_canvas(ids, mask, 2, 4, MASK, PAD)
    session = BlockCausalShiftedAdapter().open(PositionModel("llama"), layout, use_cache=False)
    assert layout.offsets.tolist() == [0, 2]
    source = session.logits(canvas, block=1, window=0)[..., 1].long()  # the output slot read
    assert source.tolist() == [[1, 2], [2, 2]]  # row 1's own slot 0 (canvas slot 2) reads itself
    session.select_rows(torch.tensor([1]))
    assert session.logits(canvas, block=2, window=0)[..., 0].tolist() == [[1.0, 2.0]]


def test_block_causal_shifted_generation_writes_the_prediction_of_the_previous_position():
    model = PositionTokenModel("llama")
    prompt = [5, 6, 7]
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=4, max_new_tokens=6, use_cache=False, **IDS
    )
    ids = torch.tensor([prompt])
    out = dllm_edit.generate(model, ids, generation_config=cfg, adapter="block_causal_shifted")
    positions = torch.arange(len(prompt), len(prompt) + 6)
    assert out.sequences[0, 3:].tolist() == model.token_of(positions - 1).tolist()
    model.config.dllm_edit_adapter = "block_causal_shifted"  # a checkpoint declaring it
    assert isinstance(resolve_adapter(model, None), BlockCausalShiftedAdapter)
    assert torch.equal(dllm_edit.generate(model, ids, generation_config=cfg).sequences, out.sequences)


@pytest.mark.parametrize("multi_block_edit", [False, True])
def test_block_causal_shifted_cache_on_equals_cache_off(llama_eager, multi_block_edit):
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "speedy", block_length=4, max_new_tokens=10, multi_block_edit=multi_block_edit, **IDS
    )
    for prompt in PROMPTS:
        runs = [
            dllm_edit.generate(
                llama_eager,
                torch.tensor([prompt]),
                generation_config=cfg,
                use_cache=use_cache,
                adapter="block_causal_shifted",
            )
            for use_cache in (False, True)
        ]
        assert torch.equal(runs[0].sequences, runs[1].sequences)
        assert torch.equal(runs[0].num_forwards, runs[1].num_forwards)


@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize("multi_block_edit", [False, True])
def test_block_causal_shifted_batch_equals_rows_alone(llama_eager, use_cache, multi_block_edit):
    model = copy.deepcopy(llama_eager).double()  # float64: see test_shifted_batch_equals_rows_alone
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "speedy",
        block_length=4,
        max_new_tokens=8,
        use_cache=use_cache,
        multi_block_edit=multi_block_edit,
        **IDS,
    )
    out = assert_batch_equals_rows_alone(model, cfg, adapter="block_causal_shifted")
    assert not (out.sequences == MASK).any()


# ----------------------------------------------------------------------------------------------
# masked LMs


@pytest.mark.parametrize("mode", ["speedy", "quality"])
def test_bert_generates_with_presets_and_auto_detection(bert, mode):
    cfg = dllm_edit.EditGenerationConfig.from_mode(mode, block_length=4, max_new_tokens=10, **IDS)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    out = dllm_edit.generate(bert, ids, generation_config=cfg, adapter=None)
    assert out.sequences.shape == (1, 15)
    assert torch.equal(out.sequences[0, :5], ids[0])
    assert not (out.sequences == MASK).any()
    assert int(out.num_forwards[0]) >= 3  # three blocks, at least one forward each
    explicit = dllm_edit.generate(bert, ids, generation_config=cfg, adapter="masked_lm")
    assert torch.equal(explicit.sequences, out.sequences)


@pytest.mark.parametrize("kind", MASKED_LMS)
def test_masked_lm_reads_what_the_model_reads_by_default(masked_lms, kind):
    # one unpadded row: the adapter's arguments (padding mask, position ids + offset) must give the
    # logits of a plain forward, so RoBERTa's positions start at padding_idx + 1 as it expects
    model = masked_lms[kind]
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    layout, canvas = build_canvas(ids, torch.ones_like(ids), 4, 6, MASK, PAD)
    session = MaskedLMAdapter().open(model, layout, use_cache=False)
    with torch.no_grad():
        got = session.logits(canvas, block=2, window=1)
        plain = model(input_ids=canvas).logits
    torch.testing.assert_close(got, plain[:, 4:12])
    assert MaskedLMAdapter().position_offset(model) == (2 if "roberta" in kind else 0)


@pytest.mark.parametrize("kind", MASKED_LMS)
def test_masked_lm_batch_equals_rows_alone(masked_lms, kind):
    if "position_ids" not in inspect.signature(masked_lms[kind].forward).parameters:
        pytest.skip(
            f"{kind}'s forward takes no position_ids in this transformers version (a warning says so)"
        )
    cfg = dllm_edit.EditGenerationConfig.from_mode("quality", block_length=4, max_new_tokens=10, **IDS)
    assert_batch_equals_rows_alone(masked_lms[kind], cfg)


@pytest.mark.parametrize(
    "case",
    [
        dict(mode="speedy", block_length=3, max_new_tokens=7, eos_early_stop=False),
        dict(mode="quality", block_length=4, max_new_tokens=8, multi_block_edit=True),
    ],
    ids=["speedy-bl3", "quality-mbe"],
)
def test_bert_batch_equals_rows_alone_more_cases(bert, case):
    case = dict(case)
    cfg = dllm_edit.EditGenerationConfig.from_mode(case.pop("mode"), **IDS, **case)
    assert_batch_equals_rows_alone(bert, cfg)


def test_masked_lm_one_block(bert):
    # blocks start after the prompt (the masked LM's default): block_length >= max_new_tokens makes
    # the whole completion a single block, starting right after the prompt
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", block_length=16, max_new_tokens=12, output_trace=True, **IDS
    )
    out = dllm_edit.generate(bert, torch.tensor([[5, 6, 7]]), generation_config=cfg)
    assert len({record.block for record in out.trace}) == 1
    assert out.trace[0].masked.sum() == 12  # the first block: all 12 masks, no prompt token
    assert not (out.sequences == MASK).any()


@pytest.mark.parametrize("adapter", ["masked_lm", "shifted"])
def test_full_attention_adapters_refuse_the_cache(bert, adapter):
    with pytest.raises(ValueError, match="use_cache=False"):
        dllm_edit.generate(bert, torch.tensor([[5, 6]]), adapter=adapter, use_cache=True, **IDS)


def test_roberta_position_limit_counts_the_offset(masked_lms):
    model = masked_lms["roberta"]  # 130 positions, the first 2 reserved
    fits, _ = build_canvas(torch.ones(1, 120, dtype=torch.long), torch.ones(1, 120), 8, 8, MASK, PAD)
    MaskedLMAdapter().check_positions(model, fits)  # position ids 0..127 -> 2..129
    with pytest.raises(ValueError, match="reserved by the embeddings"):
        dllm_edit.generate(
            model, torch.ones(1, 120, dtype=torch.long), max_new_tokens=9, block_length=8, **IDS
        )


def test_masked_lm_without_position_ids_warns_on_left_padding():
    class NoPositions(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return _Out(torch.zeros(*input_ids.shape, VOCAB))

    ids, mask = left_pad([[5, 6, 7, 8, 9], [5]])
    with pytest.warns(UserWarning, match="position_ids"):
        dllm_edit.generate(
            NoPositions(),
            ids,
            attention_mask=mask,
            adapter="masked_lm",
            max_new_tokens=2,
            block_length=2,
            **IDS,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no padding offset: no warning
        dllm_edit.generate(
            NoPositions(), ids[:1], adapter="masked_lm", max_new_tokens=2, block_length=2, **IDS
        )


# ----------------------------------------------------------------------------------------------
# registry and entry points


class ThirdPartyAdapter(BidirectionalAdapter):
    name = "third_party"
    model_types = ("thirdparty_lm",)


class NotAnAdapter:
    name = "nope"


@pytest.fixture
def registry(monkeypatch):
    """An isolated copy of the registry, with fake entry points (set `eps.items`)."""
    eps = SimpleNamespace(items=[], calls=0)

    def fake_entry_points(*, group):
        eps.calls += 1
        return [ep for ep in eps.items if ep.group == group]

    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "MODEL_TYPE_ADAPTERS", dict(adapters.MODEL_TYPE_ADAPTERS))
    monkeypatch.setattr(adapters, "_all_entry_points_loaded", False)
    monkeypatch.setattr(adapters, "entry_points", fake_entry_points)
    return eps


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=adapters.ENTRY_POINT_GROUP)


def test_unknown_name_lists_the_available_adapters(registry):
    registry.items = [_ep("from_a_plugin", f"{__name__}:ThirdPartyAdapter")]
    with pytest.raises(ValueError, match="Unknown adapter 'nope'") as info:
        resolve_adapter(None, "nope")
    for name in ["bidirectional", "block_causal", "masked_lm", "shifted", "from_a_plugin"]:
        assert repr(name) in str(info.value)
    assert "from_a_plugin" not in adapters._ADAPTERS  # listed, not loaded


def test_entry_point_is_loaded_lazily_by_name(registry):
    registry.items = [
        _ep("third_party", f"{__name__}:ThirdPartyAdapter"),
        _ep("broken", "no_such_module_for_dllm_edit:Adapter"),
    ]
    assert isinstance(resolve_adapter(None, "masked_lm"), MaskedLMAdapter)
    assert registry.calls == 0  # known names never look at entry points
    assert isinstance(resolve_adapter(None, "third_party"), ThirdPartyAdapter)
    assert adapters._ADAPTERS["third_party"] is ThirdPartyAdapter
    assert adapters.MODEL_TYPE_ADAPTERS["thirdparty_lm"] == "third_party"
    with pytest.raises(ValueError, match=r"Could not load the adapter.*'broken'") as info:
        resolve_adapter(None, "broken")
    assert isinstance(info.value.__cause__, ImportError)


def test_entry_point_must_name_an_adapter(registry):
    registry.items = [_ep("nope", f"{__name__}:NotAnAdapter")]
    with pytest.raises(TypeError, match=r"ModelAdapter subclass.*entry point 'nope'"):
        resolve_adapter(None, "nope")


def test_entry_point_model_types_take_part_in_detection(registry):
    registry.items = [
        _ep("broken", "no_such_module_for_dllm_edit:Adapter"),
        _ep("third_party", f"{__name__}:ThirdPartyAdapter"),
    ]
    model = SimpleNamespace(config=SimpleNamespace(model_type="ThirdParty_LM"))
    with pytest.warns(UserWarning, match=r"Skipping a dllm_edit adapter plugin.*'broken'"):
        assert detect_adapter(model) == "third_party"
    llama_like = SimpleNamespace(config=SimpleNamespace(model_type="llama"))
    assert detect_adapter(llama_like) == "block_causal"
    assert registry.calls == 1  # loaded once


def test_register_adapter_validates(registry):
    with pytest.raises(TypeError, match="ModelAdapter subclass"):
        register_adapter(NotAnAdapter)  # type: ignore[arg-type]

    class Nameless(ModelAdapter):
        pass

    with pytest.raises(TypeError, match="name"):
        register_adapter(Nameless)

    class Clash(BidirectionalAdapter):
        name = "masked_lm"

    with pytest.raises(ValueError, match=r"already registered.*overwrite=True"):
        register_adapter(Clash)
    assert register_adapter(MaskedLMAdapter) is MaskedLMAdapter  # the same class again is fine
    register_adapter(Clash, model_types=("clash_lm",), overwrite=True)
    assert isinstance(resolve_adapter(None, "masked_lm"), Clash)
    assert detect_adapter(SimpleNamespace(config=SimpleNamespace(model_type="CLASH_LM"))) == "masked_lm"
    assert "third_party" not in available_adapters()


def test_adapter_class_instead_of_instance_gets_a_hint():
    with pytest.raises(TypeError, match=r"Pass an instance, MaskedLMAdapter\(\)"):
        resolve_adapter(None, MaskedLMAdapter)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# bad models


class TupleModel(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return (torch.zeros(*input_ids.shape, VOCAB),)


@pytest.mark.parametrize("adapter", ["block_causal", "shifted", "masked_lm"])
def test_output_without_logits(adapter):
    with pytest.raises(TypeError, match=r"TupleModel\.forward returned tuple with no `\.logits`"):
        dllm_edit.generate(
            TupleModel(), torch.tensor([[5, 6]]), adapter=adapter, use_cache=False, max_new_tokens=2, **IDS
        )


def test_base_model_without_lm_head():
    from transformers import BertConfig, BertModel

    model = BertModel(
        BertConfig(
            vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    ).eval()
    with pytest.raises(TypeError, match=r"BertModel.*AutoModelForMaskedLM"):
        dllm_edit.generate(model, torch.tensor([[5, 6]]), max_new_tokens=2, **IDS)


def test_block_causal_first_forward_rejecting_arguments():
    class InputIdsOnly(torch.nn.Module):
        def forward(self, input_ids):
            return _Out(torch.zeros(*input_ids.shape, VOCAB))

    with pytest.raises(ValueError, match=r'adapter="masked_lm".*adapter="bidirectional"') as info:
        dllm_edit.generate(InputIdsOnly(), torch.tensor([[5, 6]]), max_new_tokens=2, **IDS)
    assert isinstance(info.value.__cause__, TypeError)
    assert "InputIdsOnly" in str(info.value)


def test_block_causal_first_forward_rejecting_the_4d_mask():
    class TwoDMaskOnly(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, **kwargs):
            attention_mask.view(*input_ids.shape)  # a 2-D padding mask only
            return _Out(torch.zeros(*input_ids.shape, VOCAB))

    with pytest.raises(ValueError, match="4-D attention mask") as info:
        dllm_edit.generate(
            TwoDMaskOnly(), torch.tensor([[5, 6]]), adapter="block_causal", max_new_tokens=2, **IDS
        )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_errors_after_the_first_forward_are_not_rewritten():
    class FailsLater(PositionTokenModel):
        calls = 0

        def forward(self, *args, **kwargs):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("boom at a later forward")
            return super().forward(*args, **kwargs)

    with pytest.raises(RuntimeError, match="boom at a later forward"):
        dllm_edit.generate(
            FailsLater("llama"),
            torch.tensor([[5, 6]]),
            max_new_tokens=8,
            block_length=2,
            use_cache=False,
            **IDS,
        )


# ----------------------------------------------------------------------------------------------
# docstring examples of the new modules


@pytest.mark.parametrize(
    "name",
    [
        "dllm_edit.adapters",
        "dllm_edit.adapters.shifted",
        "dllm_edit.adapters.block_causal_shifted",
        "dllm_edit.adapters.masked_lm",
    ],
)
def test_doctests(name, monkeypatch):
    monkeypatch.setattr(adapters, "_ADAPTERS", dict(adapters._ADAPTERS))
    monkeypatch.setattr(adapters, "MODEL_TYPE_ADAPTERS", dict(adapters.MODEL_TYPE_ADAPTERS))
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
