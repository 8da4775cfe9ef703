"""Record the LLaDA reference logits of `tests/models/data/llada_tiny.pt` from the remote code.

Run from the repository root, in an environment where the checkpoints' `modeling_llada.py` builds
(transformers 4.x):

    DLLM_EDIT_REMOTE_CODE_DIR=/path/to/remote OMP_NUM_THREADS=1 python -m tests.models.record_llada

The remote `LLaDAModelLM` on `TINY_CONFIG` with `seeded_state_dict(model, SEED)` weights, float32
(its attention is always PyTorch's SDPA), on `INPUT_IDS`: the logits with no mask, with the 2-D
padding mask `PADDING_MASK`, and with the block-causal boolean mask `block_causal_mask()` (passed as
the remote's `attention_bias`).
"""

from __future__ import annotations

import torch

from tests.helpers.remote_code import require_remote, save_recording
from tests.models.test_llada import (
    DATA,
    INPUT_IDS,
    PADDING_MASK,
    SEED,
    TINY_CONFIG,
    block_causal_mask,
    remote_model,
)


def main() -> None:
    require_remote("llada", "modeling_llada")
    model = remote_model()
    with torch.no_grad():
        full = model(INPUT_IDS).logits  # [B, T, V]
        padded = model(INPUT_IDS, attention_mask=PADDING_MASK).logits  # [B, T, V]
        blocked = model(INPUT_IDS, attention_bias=block_causal_mask()).logits  # [B, T, V]
    save_recording(
        DATA,
        config=TINY_CONFIG,
        seed=SEED,
        input_ids=INPUT_IDS,
        padding_mask=PADDING_MASK,
        logits=full,
        logits_padding=padded,
        logits_block_causal=blocked,
        source="the checkpoints' modeling_llada.py (the dllm repository's copy), transformers 4.57",
    )


if __name__ == "__main__":
    main()
