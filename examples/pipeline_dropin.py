"""Cookbook: drop dllm_edit into code that calls `model.generate` or `pipeline("text-generation")`.

`dllm_edit.patch_generate(model, cfg)` replaces the instance's `generate` with the editable decoder;
code written against transformers (a `generate` call with a plain `GenerationConfig`, a pipeline)
keeps working unchanged. Offline on the CPU with a small model trained for a few seconds (`--tiny`:
a tiny random model, CI).

    python examples/pipeline_dropin.py          # ~30 s on a 2-core CPU (training included)
    python examples/pipeline_dropin.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse

import torch
from cookbook_models import BLOCK_LENGTH, char_tokenizer, held_out, small_model
from transformers import GenerationConfig, pipeline

import dllm_edit


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    args = parser.parse_args()

    tokenizer = char_tokenizer()  # pads on the left, as batched generation needs
    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    prompts = [r["prompt"] for r in held_out(3)]

    cfg = dllm_edit.EditGenerationConfig.from_mode(
        "quality", max_new_tokens=16, block_length=BLOCK_LENGTH, mask_token_id=tokenizer.mask_token_id
    )
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    width = enc["input_ids"].shape[1]

    # 1. without patching: transformers' custom_generate hook on the model's own generate
    seq_hook = model.generate(**enc, custom_generate=dllm_edit.custom_generate, generation_config=cfg)

    # 2. patch the instance: model.generate and every pipeline built on it now decode with dllm_edit
    model = dllm_edit.patch_generate(model, cfg)

    # 3. model.generate, as transformers code calls it
    seq = model.generate(**enc)  # LongTensor [B, width + 16]: prompt (with padding) + completion
    direct = tokenizer.batch_decode(seq[:, width:], skip_special_tokens=True)
    print(f"model.generate: {seq.shape[0]} rows x {seq.shape[1]} columns -> {direct}")
    print(f"  custom_generate hook (before patching) gave the same tokens: {torch.equal(seq_hook, seq)}")

    # overrides are config fields; return_dict_in_generate gives the counters
    out = model.generate(**enc, threshold=0.5, editing_threshold=0.0, return_dict_in_generate=True)
    print(
        f"  with the S thresholds: forwards {out.num_forwards.tolist()}, "
        f"tokens/forward {[round(v, 2) for v in out.tokens_per_forward.tolist()]}"
    )

    # a plain GenerationConfig (what trainers and user code build) is laid over the patched config
    plain = GenerationConfig(max_new_tokens=16, do_sample=False)
    same = torch.equal(model.generate(**enc, generation_config=plain), seq)
    print(f"  plain GenerationConfig(do_sample=False) gives the same tokens: {same}")

    # 4. a text-generation pipeline on the patched model (batched: the tokenizer pads on the left)
    pipe = pipeline("text-generation", model=model, tokenizer=tokenizer)
    results = pipe(prompts, max_new_tokens=16, return_full_text=False)
    texts = [r[0]["generated_text"] for r in results]
    print(f"pipeline: {texts}")
    print(f"  pipeline == model.generate: {texts == direct}")


if __name__ == "__main__":
    main()
