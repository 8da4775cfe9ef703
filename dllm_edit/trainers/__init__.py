"""Trainers that teach diffusion LMs to edit (installed as `dllm_edit.trainers`).

- `EditSFTConfig` / `EditSFTTrainer`: edit-aware SFT (LLaDA2.1 section 3.1), a TRL `SFTTrainer`.
- `EBPOConfig` / `EBPOTrainer`: ELBO-based Block-level Policy Optimization (section 3.2), RL with
  rollouts from the editable decoder and TRL-style reward functions.
- `DecodeEvalCallback`: decode held-out prompts with the S / Q presets during training.
- Torch-only building blocks, shared with other trainers: `corrupt_response` (the mask + random-token
  corruption), `DiffusionForward` / `block_diffusion_allowed` (the vectorised block-diffusion forward
  and its attention rule; with `fused_lm_head=True` it returns `HiddenStates`, read by
  `token_logprob` without the `[B, T, V]` logits), `shift_to_predictions` and
  `block_shifted_sources` (the shifted forms' re-indexing), `declare_decoding_adapter` (the adapter
  a trained checkpoint decodes with), `edit_objective` (the drafting + editing + clean loss),
  `elbo_token_logps` and `ebpo_surrogate` (EBPO's ELBO and clipped surrogate), `group_advantages`,
  `exact_match_reward`.

The TRL-based classes need the `train` extra (`pip install "dllm-edit[train]"`); they are imported
on first use, so the building blocks work without TRL.
"""

from __future__ import annotations

from typing import Any

from .corruption import Corruption, corrupt_response
from .diffusion_forward import (
    DiffusionForward,
    block_diffusion_allowed,
    block_shifted_sources,
    declare_decoding_adapter,
    resolve_attention_form,
    shift_to_predictions,
)
from .ebpo_loss import SurrogateTerms, ebpo_surrogate
from .elbo import counter_uniform, elbo_token_logps
from .hidden_states import HiddenStates, token_logprob
from .objective import ObjectiveTerms, edit_objective
from .on_policy import OnPolicyDraft, draft_masked
from .rewards import exact_match_reward, group_advantages

_LAZY = {
    "EditSFTConfig": ".sft_config",
    "EditSFTTrainer": ".sft_trainer",
    "DecodeEvalCallback": ".callbacks",
    "EBPOConfig": ".ebpo_config",
    "EBPOTrainer": ".ebpo_trainer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(_LAZY[name], __name__)
        except ImportError as err:
            raise ImportError(
                f'dllm_edit.trainers.{name} needs the training extra: pip install "dllm-edit[train]" ({err}).'
            ) from err
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Corruption",
    "DecodeEvalCallback",
    "DiffusionForward",
    "EBPOConfig",
    "EBPOTrainer",
    "EditSFTConfig",
    "EditSFTTrainer",
    "HiddenStates",
    "ObjectiveTerms",
    "OnPolicyDraft",
    "SurrogateTerms",
    "block_diffusion_allowed",
    "block_shifted_sources",
    "corrupt_response",
    "counter_uniform",
    "declare_decoding_adapter",
    "draft_masked",
    "ebpo_surrogate",
    "edit_objective",
    "elbo_token_logps",
    "exact_match_reward",
    "group_advantages",
    "resolve_attention_form",
    "shift_to_predictions",
    "token_logprob",
]
