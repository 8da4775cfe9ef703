"""Record the LLaDA2.x reference logits of `tests/models/data/llada2_moe_tiny.pt` from the remote code.

Run from the repository root, in an environment where the checkpoints' `modeling_llada2_moe.py`
builds (transformers 4.x):

    DLLM_EDIT_REMOTE_CODE_DIR=/path/to/remote OMP_NUM_THREADS=1 python -m tests.models.record_llada2_moe

The remote `LLaDA2MoeModelLM` (LLaDA2.0's hub file) on `TINY_CONFIG` with `seeded_state_dict(model,
SEED)` weights, float32, SDPA, eval mode, on `INPUT_IDS`: the logits with full attention (no mask:
its SDPA path is bidirectional without padding or cache) and with the block-causal boolean mask
`block_causal_mask()`.
"""

from __future__ import annotations

import torch

from tests.helpers.remote_code import require_remote, save_recording, seeded_state_dict
from tests.models.test_llada2_moe import DATA, INPUT_IDS, SEED, TINY_CONFIG, block_causal_mask, remote_classes


def main() -> None:
    require_remote("llada2_moe", "modeling_llada2_moe")
    config_class, model_class = remote_classes("llada2_moe")
    model = model_class(config_class(**TINY_CONFIG, attn_implementation="sdpa")).eval()
    model.load_state_dict(seeded_state_dict(model, SEED))
    with torch.no_grad():
        full = model(INPUT_IDS).logits  # [B, T, V]
        blocked = model(INPUT_IDS, attention_mask=block_causal_mask()).logits  # [B, T, V]
    save_recording(
        DATA,
        config=TINY_CONFIG,
        seed=SEED,
        input_ids=INPUT_IDS,
        logits=full,
        logits_block_causal=blocked,
        source="LLaDA2.0's hub modeling_llada2_moe.py (the dllm repository's copy), transformers 4.57",
    )


if __name__ == "__main__":
    main()
