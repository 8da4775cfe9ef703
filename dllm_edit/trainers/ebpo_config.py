"""`EBPOConfig`: TRL's `GRPOConfig` plus the fields of ELBO-based Block-level Policy Optimization."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig

from .checkpointing_names import (
    NEW_KWARGS_HELP,
    NEW_NAME_HELP,
    OLD_NAME_HELP,
    TRANSFORMERS_HAS_NEW_NAMES,
    resolve_checkpointing_names,
)
from .config_fields import EBPO_REFUSED, check_refused
from .diffusion_forward import ATTENTION_FORMS
from .ebpo_loss import RATIO_LEVELS
from .elbo import ELBO_WEIGHTINGS
from .rewards import MULTI_OBJECTIVE_AGGREGATIONS


@dataclass
class EBPOConfig(GRPOConfig):
    r"""Configuration of `EBPOTrainer`: TRL's `GRPOConfig` plus the fields below.

    The GRPO fields keep their meaning where EBPO has one: `num_generations` (group size),
    `max_completion_length`, `temperature` / `top_p` / `top_k` (rollout sampling), `epsilon` and
    `epsilon_high` (ε_low / ε_high of the clip, equation 4), `beta` (KL to the initial policy,
    default 0), `num_iterations` (optimizer steps per rollout batch), `scale_rewards`,
    `reward_weights`, `multi_objective_aggregation`, `disable_dropout`, `shuffle_dataset`,
    `chat_template_kwargs` (passed to the chat template of conversational prompts), `log_completions`
    / `num_completions_to_print`, `trust_remote_code` / `model_init_kwargs` (a model given by name),
    the `dataloader_*` fields. `per_device_train_batch_size` counts completions and must be a
    multiple of `num_generations` (each micro-batch holds whole groups). GRPO options with no EBPO
    meaning (vLLM, `importance_sampling_level`, `loss_type`, entropy terms, evaluation, ...) are
    refused with an error naming them when set, never silently ignored (the lists:
    `dllm_edit.trainers.config_fields`). `bf16` is on only when a CUDA device supports it.

    Attributes:
        elbo_timesteps (int): N, timesteps (forwards) per ELBO estimate (default 2).
        timestep_min (float): lowest timestep t (default 0.1).
        timestep_max (float): highest timestep t (default 1.0). Timesteps are stratified in
            [min, max], one per stratum.
        elbo_weighting (str): `"inverse_t"` (default, w_n = 1/(N t_n), the ELBO weighting) or
            `"uniform"` (w_n = 1/N).
        ratio_level (str): `"sequence"` (default; ρ(y|x) normalised by the completion's supervised
            tokens), `"block"` or `"token"`.
        rollout_mode (str): decoding preset of the rollouts, `"speedy"` (default) or `"quality"`.
        rollout_overrides (dict | str | None): `EditGenerationConfig` fields applied on top of the
            preset (a dict, or its JSON in YAML/CLI), e.g. `{"multi_block_edit": true}`.
        block_length (int | None): tokens per block, for rollouts and the ELBO forward (default:
            the preset's, 32).
        mask_token_id (int | None): the mask token (default: tokenizer, then model config).
        diffusion_attention (str): training forward form, as in `EditSFTConfig` (default `"auto"`).
        fused_lm_head (bool): compute the loss's log-likelihoods from the final hidden states and
            the output embedding, chunk by chunk over the vocabulary, instead of from `[B, T, V]`
            logits (default False). Same loss and gradients; at a 157k vocabulary it cuts the
            step's peak memory several-fold (docs/benchmarks.md, "Trainer peak memory"). Needs a
            model that takes `logits_to_keep`, has `get_decoder()` and a plain `nn.Linear` output
            embedding with unprocessed logits (no final-logit softcapping or scaling); other models
            are refused with an error at the first step. Applies to the reference model's
            ELBO too.

    Examples:
        >>> from dllm_edit.trainers import EBPOConfig
        >>> cfg = EBPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=8,
        ...                  report_to="none")
        >>> cfg.ratio_level, cfg.elbo_timesteps, cfg.epsilon_high
        ('sequence', 2, 0.2)
    """

    # activation checkpointing under transformers 5.25's name on every release (checkpointing_names)
    if TRANSFORMERS_HAS_NEW_NAMES:
        gradient_checkpointing: bool | None = field(  # type: ignore[assignment]
            default=None, metadata={"help": OLD_NAME_HELP, "nargs": "?", "const": True}
        )
    else:
        activation_checkpointing: bool | None = field(
            default=None, metadata={"help": NEW_NAME_HELP, "nargs": "?", "const": True}
        )
        activation_checkpointing_kwargs: dict[str, Any] | str | None = field(
            default=None, metadata={"help": NEW_KWARGS_HELP}
        )
    elbo_timesteps: int = field(default=2, metadata={"help": "N: timesteps (forwards) per ELBO estimate."})
    timestep_min: float = field(default=0.1, metadata={"help": "Lowest ELBO timestep t."})
    timestep_max: float = field(default=1.0, metadata={"help": "Highest ELBO timestep t."})
    elbo_weighting: str = field(
        default="inverse_t",
        metadata={
            "help": "ELBO weights: 'inverse_t' (1/(N t)) or 'uniform' (1/N).",
            "choices": list(ELBO_WEIGHTINGS),
        },
    )
    ratio_level: str = field(
        default="sequence",
        metadata={
            "help": "Probability ratio per 'sequence', 'block' or 'token'.",
            "choices": list(RATIO_LEVELS),
        },
    )
    rollout_mode: str = field(
        default="speedy", metadata={"help": "Decoding preset of the rollouts: 'speedy' or 'quality'."}
    )
    rollout_overrides: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "EditGenerationConfig fields for rollouts (dict or JSON string)."}
    )
    block_length: int | None = field(default=None, metadata={"help": "Tokens per block (default: preset's)."})
    mask_token_id: int | None = field(default=None, metadata={"help": "Mask token id (default: tokenizer)."})
    diffusion_attention: str = field(
        default="auto",
        metadata={"help": "Training forward form.", "choices": ["auto", *ATTENTION_FORMS]},
    )
    fused_lm_head: bool = field(
        default=False,
        metadata={"help": "Loss from the final hidden states and lm_head, chunked (no [B, T, V] logits)."},
    )

    def __post_init__(self) -> None:
        check_refused(self, GRPOConfig, EBPO_REFUSED, "EBPOTrainer")  # before anything is resolved or loaded
        resolve_checkpointing_names(self)
        if self.bf16 is None and not self.fp16:
            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        if isinstance(self.rollout_overrides, str):
            try:
                self.rollout_overrides = json.loads(self.rollout_overrides)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"`rollout_overrides` must be a JSON object, got {self.rollout_overrides!r}."
                ) from err
        super().__post_init__()
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        self.validate_ebpo_fields()

    def validate_ebpo_fields(self) -> None:
        """Check the EBPO fields; raise a ValueError naming the field, the constraint and the fix."""
        if self.per_device_train_batch_size % int(self.num_generations or 1):
            raise ValueError(
                f"`per_device_train_batch_size`={self.per_device_train_batch_size} (completions per "
                f"micro-batch) must be a multiple of `num_generations`={self.num_generations}, so that "
                "every group of completions of one prompt sits in one micro-batch."
            )
        if not isinstance(self.elbo_timesteps, int) or self.elbo_timesteps < 1:
            raise ValueError(f"`elbo_timesteps` must be an int >= 1, got {self.elbo_timesteps!r}.")
        if not 0.0 < self.timestep_min <= self.timestep_max <= 1.0:
            raise ValueError(
                f"Timesteps must satisfy 0 < timestep_min <= timestep_max <= 1, got {self.timestep_min!r}, "
                f"{self.timestep_max!r}."
            )
        if self.elbo_weighting not in ELBO_WEIGHTINGS:
            raise ValueError(
                f"`elbo_weighting` must be one of {list(ELBO_WEIGHTINGS)}, got {self.elbo_weighting!r}."
            )
        if self.multi_objective_aggregation not in MULTI_OBJECTIVE_AGGREGATIONS:
            raise ValueError(
                f"`multi_objective_aggregation` must be one of {list(MULTI_OBJECTIVE_AGGREGATIONS)}, got "
                f"{self.multi_objective_aggregation!r}."
            )
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(f"`ratio_level` must be one of {list(RATIO_LEVELS)}, got {self.ratio_level!r}.")
        if self.rollout_mode not in ("speedy", "quality"):
            raise ValueError(f"`rollout_mode` must be 'speedy' or 'quality', got {self.rollout_mode!r}.")
        if self.rollout_overrides is not None and not isinstance(self.rollout_overrides, dict):
            raise ValueError(
                f"`rollout_overrides` must be a dict (or JSON object), got {self.rollout_overrides!r}."
            )
        if self.block_length is not None and (
            not isinstance(self.block_length, int) or self.block_length < 1
        ):
            raise ValueError(f"`block_length` must be None or a positive int, got {self.block_length!r}.")
        if not isinstance(self.fused_lm_head, bool):
            raise ValueError(f"`fused_lm_head` must be True or False, got {self.fused_lm_head!r}.")
        if self.epsilon < 0 or (self.epsilon_high is not None and self.epsilon_high < 0):
            raise ValueError(
                f"`epsilon` / `epsilon_high` must be >= 0, got {self.epsilon!r} / {self.epsilon_high!r}."
            )
