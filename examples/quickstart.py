"""Quick start: editable decoding on a tiny random Llama, offline, on the CPU.

Until the shipped default model lands, this runs the decoder on a randomly initialised model, so the
text is meaningless; what it shows is the API, the S vs Q presets and the numbers each reports.

    python examples/quickstart.py
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import dllm_edit


def main() -> None:
    torch.manual_seed(0)
    vocab = 512
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            attn_implementation="sdpa",
        )
    ).eval()
    # a real checkpoint provides these ids through its tokenizer / generation_config.json
    ids = dict(mask_token_id=vocab - 1, eos_token_id=vocab - 2, pad_token_id=0)
    prompts = torch.tensor([[0, 0, 0, 11, 12, 13], [21, 22, 23, 24, 25, 26]])
    attention_mask = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])  # left padding
    for mode in ("speedy", "quality"):
        cfg = dllm_edit.EditGenerationConfig.from_mode(mode, max_new_tokens=64, block_length=16, **ids)
        out = dllm_edit.generate(model, prompts, attention_mask=attention_mask, generation_config=cfg)
        print(
            f"{mode:>8}: sequences {tuple(out.sequences.shape)}, forwards {out.num_forwards.tolist()}, "
            f"tokens/forward {[round(v, 2) for v in out.tokens_per_forward.tolist()]}, "
            f"edits {out.num_edits.tolist()}"
        )


if __name__ == "__main__":
    main()
