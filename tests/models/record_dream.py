"""Record the Dream reference logits of `tests/models/data/dream_tiny.pt` from the remote code.

Run from the repository root, in an environment where the checkpoints' `modeling_dream.py` builds
(transformers 4.x):

    DLLM_EDIT_REMOTE_CODE_DIR=/path/to/remote OMP_NUM_THREADS=1 python -m tests.models.record_dream

The remote `DreamModel` on `TINY_CONFIG` with `seeded_state_dict(model, SEED)` weights, float32,
SDPA (the attention its code always runs), on `INPUT_IDS`: the logits with no mask and with the
block-causal boolean mask `block_causal_mask()`.
"""

from __future__ import annotations

import torch

from tests.helpers.remote_code import require_remote, save_recording, seeded_state_dict
from tests.models.test_dream import DATA, INPUT_IDS, SEED, TINY_CONFIG, block_causal_mask, remote_classes


def main() -> None:
    require_remote("dream", "modeling_dream")
    config_class, model_class = remote_classes()
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
        source="the checkpoints' modeling_dream.py (the dllm repository's copy), transformers 4.57",
    )


if __name__ == "__main__":
    main()
