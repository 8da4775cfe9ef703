"""Shared test helpers: the tiny vocabulary's special ids, left padding, the tiny random decoders and
tokenizer (built in memory, never downloaded), and the dummy denoisers with known logits.

Test files import them from here (`from tests.helpers import MASK, tiny_llama, BagDenoiser`); the
fixtures that wrap them live in `tests/conftest.py`. Helpers of one family of tests have their own
module: `unmasking` (Fast-dLLM, EB-Sampler, Dream, LLaDA random, Prophet), `llada1` (KLASS,
PC-Sampler, WINO under LLaDA-1's settings), `registry` (a registered strategy with its defaults),
`traces` (reading a decoding trace), `training` (the trainers'), `reference_decoder` (the LLaDA2.x
and LLaDA-1 reference decoders), `denoisers`.
"""

import torch

from tests.helpers.denoisers import BagDenoiser, ScriptedDenoiser, one_hot_table

__all__ = [
    "EOS",
    "MASK",
    "PAD",
    "VOCAB",
    "BagDenoiser",
    "ScriptedDenoiser",
    "left_pad",
    "one_hot_table",
    "tiny_llama",
    "tiny_qwen3",
    "tiny_tokenizer",
]

VOCAB = 48
MASK = VOCAB - 1
EOS = 1
PAD = 0


def left_pad(prompts):
    """LongTensors `(ids, mask)` `[B, W]` of left-padded prompts (lists of ids), padding with PAD."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


# the shared shape of the tiny decoders used across the tests
_TINY = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)


def _tiny(config_cls, model_cls, attn, seed, vocab, **extra):
    torch.manual_seed(seed)
    model = model_cls(config_cls(vocab_size=vocab, attn_implementation=attn, **_TINY, **extra)).eval()
    _sharpen(model, vocab)
    return model


def tiny_llama(attn: str = "eager", seed: int = 0, vocab: int = VOCAB):
    from transformers import LlamaConfig, LlamaForCausalLM

    return _tiny(LlamaConfig, LlamaForCausalLM, attn, seed, vocab)


def tiny_qwen3(attn: str = "sdpa", seed: int = 1, vocab: int = VOCAB):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _tiny(Qwen3Config, Qwen3ForCausalLM, attn, seed, vocab, head_dim=8)


def _sharpen(model, vocab):
    """Spread the output distribution so thresholds change decisions, and make the mask token
    (id vocab - 1) never the argmax, so the reference decoder (no mask guard) always terminates."""
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight * 8.0)
        head.bias.zero_()
        head.bias[vocab - 1] = -1e4
    model.lm_head = head


def tiny_tokenizer(chat: bool = False):
    """A word-level tokenizer over VOCAB ids (`<pad>`=PAD, `<eos>`=EOS, `w2`…, `<mask>`=MASK), built in
    memory. With `chat=True`, ids 44 and 45 read `user` / `assistant`, and a whitespace chat template
    is set."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<eos>"] + [f"w{i}" for i in range(2, VOCAB - 1)] + ["<mask>"]
    if chat:
        words[44], words[45] = "user", "assistant"
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", mask_token="<mask>", padding_side="left"
    )
    if chat:
        fast.chat_template = (
            "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant {% endif %}"
        )
    return fast
