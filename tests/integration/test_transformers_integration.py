"""model.generate / pipelines / custom_generate / streamers with dllm_edit's decoder."""

import io

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    NoRepeatNGramLogitsProcessor,
    StoppingCriteriaList,
    TextIteratorStreamer,
    pipeline,
)
from transformers.generation.streamers import TextDiffusionStreamer

import dllm_edit
from tests.helpers import EOS, MASK, PAD, VOCAB, BagDenoiser, tiny_llama, tiny_tokenizer

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


def cfg(**kw):
    return dllm_edit.EditGenerationConfig.from_mode(
        "quality", **{"block_length": 4, "max_new_tokens": 8, **IDS, **kw}
    )


@pytest.fixture
def model():
    return tiny_llama(seed=5)


def test_patch_generate_follows_transformers_conventions(model):
    ids = torch.tensor([[5, 6, 7]])
    reference = dllm_edit.generate(model, ids, generation_config=cfg())
    dllm_edit.patch_generate(model, cfg())
    seq = model.generate(ids)
    assert isinstance(seq, torch.Tensor) and torch.equal(seq, reference.sequences)
    out = model.generate(input_ids=ids, return_dict_in_generate=True)
    assert torch.equal(out.sequences, reference.sequences) and out.num_forwards is not None
    assert model.generate(ids, max_new_tokens=5).shape == (1, 8)  # overrides go through replace()
    with pytest.raises(TypeError, match="Unknown generation option"):
        model.generate(ids, treshold=0.3)
    with pytest.raises(ValueError, match="num_beams"):
        model.generate(ids, num_beams=4)


def test_plain_generation_config_is_converted(model):
    from transformers import GenerationConfig

    dllm_edit.patch_generate(model, cfg())
    plain = GenerationConfig(max_new_tokens=5, do_sample=False)
    assert model.generate(torch.tensor([[5, 6, 7]]), generation_config=plain).shape == (1, 8)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(torch.tensor([[5, 6, 7]]), generation_config=GenerationConfig(max_length=30))
    # fields without meaning for parallel decoding are refused, not ignored
    with pytest.raises(ValueError, match="length_penalty"):
        model.generate(
            torch.tensor([[5, 6, 7]]),
            generation_config=GenerationConfig(max_new_tokens=5, length_penalty=2.0),
        )


def test_plain_config_fields_become_processors(model):
    from transformers import GenerationConfig

    dllm_edit.patch_generate(model, cfg(eos_early_stop=False))
    ids = torch.tensor([[5, 6, 7]])
    plain = dllm_edit.generate(model, ids, generation_config=cfg(eos_early_stop=False, max_new_tokens=8))
    banned = sorted(set(plain.sequences[0, 3:].tolist()))[:2]
    out = model.generate(
        ids, generation_config=GenerationConfig(max_new_tokens=8, do_sample=False, suppress_tokens=banned)
    )
    assert not set(out[0, 3:].tolist()) & set(banned)
    fields = dict(max_new_tokens=8, temperature=0.9, min_p=0.3, repetition_penalty=3.0)

    def direct(**kw):
        gen = torch.Generator().manual_seed(0)
        return dllm_edit.generate(
            model, ids, generation_config=cfg(eos_early_stop=False, **kw), generator=gen
        )

    sampled = model.generate(
        ids,
        generator=torch.Generator().manual_seed(0),
        generation_config=GenerationConfig(do_sample=True, **fields),
    )
    # the plain config's fields are applied exactly as the same fields of an EditGenerationConfig
    assert torch.equal(sampled, direct(**fields).sequences)
    unfiltered = direct(max_new_tokens=8, temperature=0.9).sequences
    assert not torch.equal(sampled, unfiltered)  # and they do something


def test_pipeline_text_generation(model):
    tok = tiny_tokenizer()
    dllm_edit.patch_generate(model, cfg(eos_early_stop=False))
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    out = pipe(["w5 w6 w7", "w9"], max_new_tokens=6, return_full_text=False)
    assert len(out) == 2 and all(isinstance(o[0]["generated_text"], str) for o in out)
    # the pipeline's batch decodes like the rows alone
    alone = dllm_edit.generate(
        model,
        tok("w9", return_tensors="pt").input_ids,
        generation_config=cfg(eos_early_stop=False, max_new_tokens=6),
    )
    text = tok.decode(alone.sequences[0, 1:], skip_special_tokens=True)
    assert out[1][0]["generated_text"].strip() == text.strip()


def test_custom_generate_callable_and_folder(model):
    ids = torch.tensor([[5, 6, 7]])
    reference = dllm_edit.generate(model, ids, generation_config=cfg())
    seq = model.generate(ids, custom_generate=dllm_edit.custom_generate, generation_config=cfg())
    assert torch.equal(seq, reference.sequences)
    seq = model.generate(
        ids, custom_generate=dllm_edit.CUSTOM_GENERATE_DIR, trust_remote_code=True, generation_config=cfg()
    )
    assert torch.equal(seq, reference.sequences)


def test_mixin_class(model):
    class MyDLM(dllm_edit.EditGenerationMixin, type(model)):
        pass

    mine = MyDLM(model.config).eval()
    mine.load_state_dict(model.state_dict(), strict=False)
    mine.lm_head = model.lm_head
    mine.generation_config = cfg()
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(mine.generate(ids), dllm_edit.generate(model, ids, generation_config=cfg()).sequences)


def test_refused_processors_and_stopping_criteria(model):
    dllm_edit.patch_generate(model, cfg())
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="NoRepeatNGramLogitsProcessor"):
        model.generate(ids, logits_processor=LogitsProcessorList([NoRepeatNGramLogitsProcessor(2)]))
    from transformers import MaxTimeCriteria

    with pytest.raises(ValueError, match="stopping_criteria"):
        model.generate(ids, stopping_criteria=StoppingCriteriaList([MaxTimeCriteria(10.0)]))


def test_iterator_streamer_is_ended_even_on_error(model):
    tok = tiny_tokenizer()
    # a timeout: a regression that never calls end() fails (queue.Empty) instead of hanging the suite
    streamer = TextIteratorStreamer(tok, skip_prompt=True, timeout=30)
    dllm_edit.patch_generate(model, cfg())
    out = model.generate(torch.tensor([[5, 6, 7]]), streamer=streamer, return_dict_in_generate=True)
    streamed = "".join(streamer)  # the iterator terminates: end() was called
    assert streamed == tok.decode(out.completions(3)[0])

    class Broken(BagDenoiser):
        def forward(self, *args, **kwargs):
            if self.calls >= 2:
                raise RuntimeError("boom")
            return super().forward(*args, **kwargs)

    streamer = TextIteratorStreamer(tok, skip_prompt=True, timeout=30)
    with pytest.raises(RuntimeError, match="boom"):
        dllm_edit.generate(
            Broken(vocab_size=VOCAB),
            torch.tensor([[5, 6, 7]]),
            streamer=streamer,
            adapter="block_causal",
            use_cache=False,
            editing_threshold=None,
            **IDS,
        )
    assert "".join(streamer) == ""  # ended: iteration stops instead of blocking


class Recorder(TextDiffusionStreamer):
    def __init__(self, tok):
        super().__init__(tok, skip_prompt=True)
        self.drafts, self.kwargs = [], []

    def put_draft(self, value, **kwargs):
        self.drafts.append(value.tolist())
        self.kwargs.append(kwargs)


def test_diffusion_streamer_gets_every_draft(model):
    tok = tiny_tokenizer()
    rec = Recorder(tok)
    out = dllm_edit.generate(
        model, torch.tensor([[5, 6, 7]]), streamer=rec, generation_config=cfg(), output_trace=True
    )
    assert len(rec.drafts) == len(out.trace) == int(out.num_forwards[0])
    assert all(len(k["masked"]) == len(d) == len(k["edited"]) for d, k in zip(rec.drafts, rec.kwargs))


def test_terminal_streamer_highlights_edits(model):
    tok = tiny_tokenizer()

    class Tty(io.StringIO):
        def isatty(self):
            return True

    screen = Tty()
    streamer = dllm_edit.TerminalEditStreamer(
        tok, skip_prompt=True, stream=screen, display="live", color=True
    )
    out = dllm_edit.generate(
        model,
        torch.tensor([[5, 6, 7]]),
        streamer=streamer,
        generation_config=dllm_edit.EditGenerationConfig.from_mode(
            "speedy", block_length=4, max_new_tokens=12, **IDS
        ),
    )
    text = screen.getvalue()
    assert "\033[33m" in text  # drafts drawn
    if int(out.num_edits[0]) > 0:
        assert "\033[31m" in text  # edits in red
    assert text.endswith("\n")


def test_trl_style_generation_call(model):
    """The call TRL's GRPOTrainer makes (transformers path): a plain GenerationConfig built from its
    generation kwargs, `input_ids` + `attention_mask` keywords, prompt + completion returned."""
    from transformers import GenerationConfig

    dllm_edit.patch_generate(model, cfg())
    trl_config = GenerationConfig(
        max_new_tokens=8,
        do_sample=True,
        pad_token_id=PAD,
        bos_token_id=None,
        eos_token_id=[EOS],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        cache_implementation=None,
        disable_compile=True,
    )
    ids = torch.tensor([[PAD, 5, 6, 7], [8, 9, 10, 11]])
    out = model.generate(input_ids=ids, attention_mask=(ids != PAD).long(), generation_config=trl_config)
    assert out.shape == (2, 12) and torch.equal(out[:, :4], ids)


def test_mask_id_from_tokenizer_or_a_clear_error(model):
    tok = tiny_tokenizer()
    ids = torch.tensor([[5, 6, 7]])
    out = dllm_edit.generate(model, ids, tokenizer=tok, max_new_tokens=4, block_length=4)  # <mask> from tok
    assert out.sequences.shape == (1, 7)

    class NoMask:
        mask_token_id = None
        eos_token_id = EOS
        pad_token_id = PAD

    with pytest.raises(ValueError, match="tokenizer"):
        dllm_edit.generate(model, ids, tokenizer=NoMask(), max_new_tokens=4, block_length=4)


def test_patched_generate_accepts_its_own_custom_generate(model):
    ids = torch.tensor([[5, 6, 7]])
    dllm_edit.patch_generate(model, cfg())
    plain = model.generate(ids)
    assert torch.equal(model.generate(ids, custom_generate=dllm_edit.custom_generate), plain)
    with pytest.raises(ValueError, match="another decoding loop"):
        model.generate(ids, custom_generate="someone/else")
