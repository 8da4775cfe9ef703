"""Streamer, logits processors and the stutter guard inside the loop."""

import pytest
import torch
from transformers import LogitsProcessorList, SuppressTokensLogitsProcessor
from transformers.generation.streamers import BaseStreamer

import dllm_edit
from tests.helpers import EOS, MASK, PAD

IDS = dict(mask_token_id=MASK, eos_token_id=EOS, pad_token_id=PAD)


class Collect(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, value):
        self.chunks.append(value.flatten().tolist())

    def end(self):
        self.ended = True


def test_streamer_gets_prompt_then_final_completion(llama_eager):
    for mbe in (False, True):
        streamer = Collect()
        ids = torch.tensor([[5, 6, 7]])
        out = dllm_edit.generate(
            llama_eager,
            ids,
            streamer=streamer,
            block_length=4,
            max_new_tokens=13,
            multi_block_edit=mbe,
            **IDS,
        )
        assert streamer.ended and streamer.chunks[0] == [5, 6, 7]
        streamed = [t for chunk in streamer.chunks[1:] for t in chunk]
        completion = out.sequences[0, 3:].tolist()
        if EOS in completion:
            completion = completion[: completion.index(EOS) + 1]
        assert streamed == completion


def test_logits_processor_is_applied(llama_eager):
    ids = torch.tensor([[5, 6, 7]])
    plain = dllm_edit.generate(
        llama_eager, ids, block_length=4, max_new_tokens=12, eos_early_stop=False, **IDS
    )
    banned = sorted(set(plain.sequences[0, 3:].tolist()))[:3]
    processors = LogitsProcessorList([SuppressTokensLogitsProcessor(banned, device="cpu")])
    out = dllm_edit.generate(
        llama_eager,
        ids,
        block_length=4,
        max_new_tokens=12,
        eos_early_stop=False,
        logits_processor=processors,
        **IDS,
    )
    assert not set(out.sequences[0, 3:].tolist()) & set(banned)


def test_adjacent_repeat_penalty_blocks_copying_the_left_neighbour(llama_eager):
    ids = torch.tensor([[5, 6, 7]])
    out = dllm_edit.generate(
        llama_eager,
        ids,
        block_length=4,
        max_new_tokens=16,
        repeat_penalty=1e4,
        output_trace=True,
        eos_early_stop=False,
        **IDS,
    )
    for rec in out.trace:
        left = torch.cat([torch.full((1, 1), -1), rec.before[:, :-1]], dim=1)
        written = rec.commit | rec.edit
        known = written & (left != MASK) & (left != -1)
        assert not (rec.after[known] == left[known]).any()


def test_trace_exports_to_json(llama_eager, tmp_path):
    import json

    out = dllm_edit.generate(
        llama_eager, torch.tensor([[5, 6, 7]]), block_length=4, max_new_tokens=8, output_trace=True, **IDS
    )
    data = json.loads(out.trace_to_json(str(tmp_path / "trace.json")))
    assert len(data["steps"]) == int(out.num_forwards[0]) == data["num_forwards"][0]
    assert (tmp_path / "trace.json").read_text() == json.dumps(data)
    plain = dllm_edit.generate(
        llama_eager, torch.tensor([[5, 6, 7]]), block_length=4, max_new_tokens=8, **IDS
    )

    with pytest.raises(ValueError, match="output_trace=True"):
        plain.trace_to_json()
