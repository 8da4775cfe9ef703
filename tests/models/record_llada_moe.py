"""Record the LLaDA-MoE reference logits of `tests/models/data/llada_moe_tiny.pt` from the remote code.

Run from the repository root, in an environment where the published `modeling_lladamoe.py` runs
(transformers 4.x):

    DLLM_EDIT_REMOTE_CODE_DIR=/path/to/remote OMP_NUM_THREADS=1 python -m tests.models.record_llada_moe

The published `LLaDAMoEModelLM` on `TINY_CONFIG` with `seeded_state_dict(model, SEED)` weights,
float32, eager attention, on `INPUT_IDS`: the logits with no mask and with the 2-D padding mask
`PADDING`, and the names of its state dict (the checkpoints' parameter names).
"""

from __future__ import annotations

import torch
import transformers

from tests.helpers.remote_code import require_remote, save_recording
from tests.models.test_llada_moe import DATA, FAMILY, INPUT_IDS, PADDING, SEED, TINY_CONFIG, remote_model


def main() -> None:
    require_remote(FAMILY, "modeling_lladamoe")
    model = remote_model("eager")  # seeded with SEED
    with torch.no_grad():
        full = model(INPUT_IDS).logits  # [B, T, V]
        padded = model(INPUT_IDS, attention_mask=PADDING).logits  # [B, T, V]
    save_recording(
        DATA,
        config=TINY_CONFIG,
        seed=SEED,
        input_ids=INPUT_IDS.clone(),
        padding=PADDING.clone(),
        logits=full,
        logits_padded=padded,
        state_dict_keys=list(model.state_dict()),
        source="modeling_lladamoe.py (the dllm repository's copy of the hub files), transformers "
        + transformers.__version__,
    )


if __name__ == "__main__":
    main()
