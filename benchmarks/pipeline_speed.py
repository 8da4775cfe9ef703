"""S vs Q presets through `pipeline("text-generation")` on a patched tiny model, per adapter family.

For each adapter family available (block-causal Llama, bidirectional Llama, and — when registered —
shifted-logits Qwen2 and a masked-LM BERT), the same prompts run through a text-generation pipeline
whose model was given dllm_edit's `generate` by `patch_generate` (masked LMs, which the
text-generation pipeline refuses, go through the patched `model.generate` on the same batch).
Printed per (family, preset): completion tokens per second (median of `--repeats` runs) and
tokens per forward (completion tokens / row forwards, counted with a forward hook). Random tiny
models: the numbers measure the integration's overhead and the presets' step counts, not text
quality.

    python benchmarks/pipeline_speed.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, pipeline

import dllm_edit

VOCAB = 512


def tokenizer() -> PreTrainedTokenizerFast:
    words = ["<pad>", "<eos>"] + [f"w{i}" for i in range(2, VOCAB - 1)] + ["<mask>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", mask_token="<mask>", padding_side="left"
    )


def families() -> list[tuple[str, str, torch.nn.Module]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            attn_implementation="sdpa",
        )
    ).eval()
    out = [
        ("block-causal Llama", "block_causal", llama),
        ("bidirectional Llama", "bidirectional", llama),
        ("bidirectional, approx. cache", "bidirectional_approx_cache", llama),
    ]
    available = set(dllm_edit.adapters.__dict__.get("_ADAPTERS", {}))
    if "shifted" in available:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        qwen = Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=VOCAB,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=4,
                attn_implementation="sdpa",
            )
        ).eval()
        out.append(("shifted (Dream-style) Qwen2", "shifted", qwen))
    if "masked_lm" in available:
        from transformers import BertConfig, BertForMaskedLM

        bert = BertForMaskedLM(
            BertConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                max_position_embeddings=512,
            )
        ).eval()
        out.append(("masked-LM BERT", "masked_lm", bert))
    return out


def rows_of(args: tuple, kwargs: dict) -> int:
    """Rows in one forward: tokens per forward is counted per row, batched or not."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    return int(ids.shape[0])


def text_generation(model, tok, prompts):
    """A pipeline call; masked LMs, which transformers' text-generation pipeline refuses to build,
    go through the patched `model.generate` with the same left-padded batch instead."""
    try:
        pipe = pipeline("text-generation", model=model, tokenizer=tok)
        return lambda: pipe(prompts, return_full_text=False)
    except (AttributeError, ValueError, KeyError):
        batch = tok(prompts, return_tensors="pt", padding=True)
        return lambda: tok.batch_decode(model.generate(**batch), skip_special_tokens=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--block-length", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    tok = tokenizer()
    prompts = [" ".join(f"w{3 + (7 * i + j) % 400}" for j in range(5 + 3 * i)) for i in range(4)]
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; {len(prompts)} prompts, "
        f"{args.new_tokens} new tokens, block {args.block_length}; median of {args.repeats}"
    )
    print(f"| {'family':<28} | {'preset':<8} | {'tokens/s':>9} | {'tokens/forward':>14} |")
    print(f"|{'-' * 30}|{'-' * 10}|{'-' * 11}|{'-' * 16}|")
    calls: list[int] = []
    for name, adapter, model in families():
        hook = model.register_forward_pre_hook(lambda m, a, k: calls.append(rows_of(a, k)), with_kwargs=True)
        for mode in ("speedy", "quality"):
            cfg = dllm_edit.EditGenerationConfig.from_mode(
                mode,
                max_new_tokens=args.new_tokens,
                block_length=args.block_length,
                eos_early_stop=False,
                mask_token_id=tok.mask_token_id,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
            run = text_generation(dllm_edit.patch_generate(model, cfg, adapter=adapter), tok, prompts)
            times = []
            for _ in range(args.repeats):
                calls.clear()
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            tokens = len(prompts) * args.new_tokens
            print(
                f"| {name:<28} | {mode:<8} | {tokens / statistics.median(times):9.1f} | "
                f"{tokens / sum(calls):14.2f} |"
            )
        hook.remove()


if __name__ == "__main__":
    main()
