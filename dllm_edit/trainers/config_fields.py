"""Which fields of TRL's `SFTConfig` / `GRPOConfig` our trainers honour, and which they refuse.

Every field of the parent config (TRL's own fields and every inherited transformers
`TrainingArguments` field, on transformers 4.57 and 5.x) is in exactly one list:

- **honoured**: read by our trainer, or by the transformers / TRL machinery the trainer keeps
  (optimizer, scheduler, logging, saving, accelerate, ...);
- **refused**: `EditSFTConfig` / `EBPOConfig` raise a ValueError in `__post_init__` (before any
  model is loaded) when the field differs from the value that means "off" (the parent's default,
  or one of the listed equivalents), naming the field, its value and the fix.

`tests/test_config_fields.py` enumerates `dataclasses.fields(SFTConfig)` / `fields(GRPOConfig)` at
run time and fails on any field in neither list, so a new TRL or transformers release cannot add an
option that is silently ignored. Listing a field as honoured is a claim the same file checks: some
code that runs for the trainer must read it (our trainer code, or a transformers / TRL method our
trainer does not override, or calls through `super()`). `EBPOTrainer` extends transformers'
`Trainer`, not TRL's `GRPOTrainer`, so no `GRPOConfig` field is read unless our code reads it; and a
`Trainer` method we replace (`get_train_dataloader`) no longer reads anything. Fields that exist
only in some versions may be listed here anyway.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# ---- TrainingArguments fields both trainers honour (transformers' Trainer machinery) ----------------------
TRAINER_HONOURED: frozenset[str] = frozenset(
    {
        # optimizer, scheduler, precision
        "adam_beta1", "adam_beta2", "adam_epsilon", "adafactor", "learning_rate", "weight_decay",
        "lr_scheduler_type", "lr_scheduler_kwargs", "max_grad_norm", "optim", "optim_args",
        "optim_target_modules", "warmup_ratio", "warmup_steps", "bf16", "fp16", "fp16_backend",
        "fp16_opt_level", "half_precision_backend", "tf32",
        # the loop
        "num_train_epochs", "max_steps", "per_device_train_batch_size", "per_gpu_train_batch_size",
        "gradient_accumulation_steps", "gradient_checkpointing", "gradient_checkpointing_kwargs",
        "activation_checkpointing", "activation_checkpointing_kwargs", "enable_jit_checkpoint",
        "seed", "data_seed", "full_determinism", "ignore_data_skip", "torch_empty_cache_steps",
        "torch_compile", "torch_compile_backend", "torch_compile_mode", "torchdynamo",
        # devices and distribution (accelerate)
        "use_cpu", "no_cuda", "use_mps_device", "_n_gpu", "local_rank", "accelerator_config",
        "parallelism_config", "ddp_backend", "ddp_broadcast_buffers", "ddp_bucket_cap_mb",
        "ddp_find_unused_parameters", "ddp_static_graph", "ddp_timeout", "deepspeed", "fsdp",
        "fsdp_config", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap", "tpu_num_cores",
        "tpu_metrics_debug", "mp_parameters", "ray_scope", "debug",
        # logging
        "logging_dir", "logging_first_step", "logging_nan_inf_filter", "logging_steps", "logging_strategy",
        "log_level", "log_level_replica", "log_on_each_node", "report_to", "run_name", "project",
        "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "disable_tqdm",
        "skip_memory_metrics",
        # saving and the Hub
        "output_dir", "overwrite_output_dir", "save_on_each_node", "save_only_model", "save_safetensors",
        "save_steps", "save_strategy", "save_total_limit", "restore_callback_states_from_checkpoint",
        "push_to_hub", "hub_always_push", "hub_model_id", "hub_private_repo", "hub_revision",
        "hub_strategy", "hub_token", "push_to_hub_model_id", "push_to_hub_organization",
        "push_to_hub_token",
        # flags for the user's launch script (the Trainer never reads them, by transformers' design)
        "do_train", "do_eval", "do_predict", "resume_from_checkpoint",
    }
)  # fmt: skip

# ---- TrainingArguments fields refused by both (our compute_loss replaces the Trainer's loss) -------------
TRAINER_REFUSED: dict[str, str] = {
    "label_smoothing_factor": "the diffusion objective is ours; the Trainer's label smoother never runs",
    "use_liger_kernel": "Liger's fused cross-entropy needs the Trainer's causal-LM loss, not ours",
    "liger_kernel_config": "Liger kernels are not supported (see use_liger_kernel)",
    "label_names": "the trainers read the `labels` column (SFT) or none at all (EBPO)",
    "past_index": "the diffusion forward keeps no memory across batches",
    "use_cache": "the diffusion forward never uses a KV cache in training",
    "batch_eval_metrics": "no `compute_metrics` (a random corruption's logits are no prediction)",
    "include_for_metrics": "`compute_metrics` is not supported (see batch_eval_metrics)",
    "include_inputs_for_metrics": "`compute_metrics` is not supported (see batch_eval_metrics)",
}

# ---- EditSFTConfig (parent: TRL SFTConfig) ---------------------------------------------------------------
SFT_HONOURED: frozenset[str] = TRAINER_HONOURED | frozenset(
    {
        # evaluation and data loading: the Trainer's own, EditSFTTrainer keeps them
        "eval_strategy", "eval_steps", "eval_delay", "eval_on_start", "eval_accumulation_steps",
        "eval_do_concat_batches", "eval_use_gather_object", "per_device_eval_batch_size",
        "per_gpu_eval_batch_size", "bf16_full_eval", "fp16_full_eval", "prediction_loss_only",
        "metric_for_best_model", "greater_is_better", "load_best_model_at_end", "jit_mode_eval",
        "use_legacy_prediction_loop", "auto_find_batch_size", "average_tokens_across_devices",
        "include_num_input_tokens_seen", "include_tokens_per_second", "neftune_noise_alpha",
        "remove_unused_columns", "train_sampling_strategy", "group_by_length", "length_column_name",
        "dataloader_drop_last", "dataloader_in_order", "dataloader_multiprocessing_context",
        "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_pin_memory",
        "dataloader_prefetch_factor",
        # TRL's SFT fields: model loading and dataset preparation are TRL's
        "model_init_kwargs", "trust_remote_code", "chat_template_path", "dataset_text_field",
        "dataset_kwargs", "dataset_num_proc", "eos_token", "pad_token", "max_length", "truncation_mode",
        "shuffle_dataset", "pad_to_multiple_of", "completion_only_loss", "assistant_only_loss",
        "activation_offloading",
        # ours: the MoE router loss is added to the edit objective (EditSFTTrainer.compute_loss)
        "router_aux_loss_coef",
    }
)  # fmt: skip

SFT_REFUSED: dict[str, str] = {
    **TRAINER_REFUSED,
    "packing": "block-diffusion attention needs one example per row",
    "padding_free": "block-diffusion attention needs one example per row (see packing)",
    "packing_strategy": "packing is not supported (see packing)",
    "eval_packing": "packing is not supported (see packing)",
    "loss_type": "the edit objective is its own loss (weights: edit_loss_weight, clean_loss_weight)",
}

# ---- EBPOConfig (parent: TRL GRPOConfig) -----------------------------------------------------------------
EBPO_HONOURED: frozenset[str] = TRAINER_HONOURED | frozenset(
    {
        # data loading: EBPOTrainer.get_train_dataloader
        "dataloader_drop_last", "dataloader_in_order", "dataloader_multiprocessing_context",
        "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_pin_memory",
        "dataloader_prefetch_factor", "shuffle_dataset",
        # The loss is a mean over completions and every device holds whole groups: there is no token
        # count to average, so both values give the same (correct) loss.
        "average_tokens_across_devices",
        # model loading, rollouts, rewards, loss, logging
        "model_init_kwargs", "trust_remote_code", "disable_dropout", "num_generations",
        "max_completion_length", "temperature", "top_p", "top_k", "chat_template_kwargs", "beta",
        "num_iterations", "epsilon", "epsilon_high", "reward_weights", "multi_objective_aggregation",
        "scale_rewards", "log_completions", "num_completions_to_print",
    }
)  # fmt: skip

_NO_EVAL = "EBPOTrainer has no evaluation loop (it takes no eval_dataset)"
_NO_VLLM = "rollouts come from dllm_edit.generate; vLLM is not supported"
_NO_LOSS = "EBPO has its own surrogate (see ratio_level, epsilon, epsilon_high)"
_NO_SAMPLING = "rollout decoding reads temperature, top_p and top_k only; other sampling options do not apply"

EBPO_REFUSED: dict[str, str] = {
    **TRAINER_REFUSED,
    # Trainer fields that EBPO's own data loading and loop do not read
    "auto_find_batch_size": "EBPO's dataloader is sized by per_device_train_batch_size / num_generations",
    "train_sampling_strategy": "EBPO samples prompts by itself; use shuffle_dataset",
    "group_by_length": "EBPO samples prompts by itself; use shuffle_dataset",
    "length_column_name": "EBPO samples prompts by itself (see group_by_length)",
    "remove_unused_columns": "EBPO passes every dataset column to the reward functions",
    "neftune_noise_alpha": "embedding noise would differ between θ_old's and θ's ELBO forwards",
    "include_num_input_tokens_seen": "EBPO batches are prompts; see completions/mean_length",
    "include_tokens_per_second": "EBPO batches are prompts; see rollout/tokens_per_forward",
    **{
        name: _NO_EVAL
        for name in (
            "eval_strategy",
            "eval_steps",
            "eval_delay",
            "eval_on_start",
            "eval_accumulation_steps",
            "eval_do_concat_batches",
            "eval_use_gather_object",
            "per_device_eval_batch_size",
            "per_gpu_eval_batch_size",
            "bf16_full_eval",
            "fp16_full_eval",
            "prediction_loss_only",
            "metric_for_best_model",
            "greater_is_better",
            "load_best_model_at_end",
            "jit_mode_eval",
            "use_legacy_prediction_loop",
            "num_generations_eval",
        )
    },
    # GRPO fields with no EBPO meaning
    "router_aux_loss_coef": "EBPO adds no MoE router loss; leave it unset (EditSFTTrainer honours it)",
    "cast_lm_head_to_fp32": "the ELBO forward runs the model in its own dtype",
    "ds3_gather_for_generation": "rollouts run the training model as it is (ZeRO-3 gathers layer by layer)",
    "pad_to_multiple_of": "EBPO pads every sequence to a whole number of blocks (block_length)",
    "generation_batch_size": "EBPO generates rollouts per micro-batch; num_iterations reuses them",
    "steps_per_generation": "EBPO generates rollouts per micro-batch; num_iterations reuses them",
    "min_p": _NO_SAMPLING,
    "repetition_penalty": _NO_SAMPLING + " (EditGenerationConfig.repeat_penalty via rollout_overrides)",
    "generation_kwargs": "rollout decoding is configured by rollout_mode and rollout_overrides",
    "cache_implementation": "the decoder manages its own exact cache of finished blocks",
    "use_vllm": _NO_VLLM,
    "importance_sampling_level": "the ratio level is `ratio_level`",
    "loss_type": _NO_LOSS,
    "delta": _NO_LOSS,
    "sapo_temperature_neg": _NO_LOSS,
    "sapo_temperature_pos": _NO_LOSS,
    "vespo_k_pos": _NO_LOSS,
    "vespo_lambda_pos": _NO_LOSS,
    "vespo_k_neg": _NO_LOSS,
    "vespo_lambda_neg": _NO_LOSS,
    "mask_truncated_completions": "truncated completions are kept (unextended by EOS) and scored",
    "sync_ref_model": "the reference policy is fixed (the initial model, or the model without adapters)",
    "ref_model_mixup_alpha": "the reference policy is fixed (see sync_ref_model)",
    "ref_model_sync_steps": "the reference policy is fixed (see sync_ref_model)",
    "top_entropy_quantile": "EBPO has no token entropy (the ELBO is not a per-token likelihood)",
    "entropy_coef": "EBPO has no entropy bonus",
    "use_adaptive_entropy": "EBPO has no entropy bonus",
    "entropy_coef_min": "EBPO has no entropy bonus",
    "entropy_coef_max": "EBPO has no entropy bonus",
    "entropy_coef_delta": "EBPO has no entropy bonus",
    "entropy_target": "EBPO has no entropy bonus",
    "max_tool_calling_iterations": "tool calling is not supported in diffusion rollouts",
    "off_policy_mask_threshold": "not implemented: EBPO's θ_old is the rollout policy itself",
    "use_bias_correction_kl": "rollouts come from θ_old itself, so there is no sampling bias to correct",
    "log_multimodal": "EBPO prompts are text only",
    "log_unique_prompts": "not implemented; log_completions prints every sampled completion",
    "log_completions_hub_repo": "not implemented; log_completions prints to the console / report_to",
    "use_transformers_continuous_batching": _NO_VLLM,
    "transformers_continuous_batching_config": _NO_VLLM,
    "use_transformers_paged": _NO_VLLM,
    "vllm_importance_sampling_cap": _NO_VLLM,
}
EBPO_REFUSED.update(
    {
        name: _NO_VLLM
        for name in (
            "vllm_mode",
            "vllm_model_impl",
            "vllm_enable_sleep_mode",
            "vllm_structured_outputs_regex",
            "vllm_server_base_url",
            "vllm_server_host",
            "vllm_server_port",
            "vllm_server_timeout",
            "vllm_group_port",
            "vllm_gpu_memory_utilization",
            "vllm_max_model_length",
            "vllm_tensor_parallel_size",
            "vllm_importance_sampling_correction",
            "vllm_importance_sampling_mode",
            "vllm_importance_sampling_clip_max",
            "vllm_importance_sampling_clip_min",
        )
    }
)

# Values that also mean "off", besides the parent class's default.
ALSO_OFF: dict[str, tuple[Any, ...]] = {
    "label_names": (None, ["labels"]),
    "liger_kernel_config": (None, {}),
    "include_for_metrics": ([], None),
    "eval_packing": (None, False),
    "router_aux_loss_coef": (None, 0.0),
    "pad_to_multiple_of": (None, "auto"),
    "eval_strategy": ("no",),
    "log_unique_prompts": (False,),
    "include_num_input_tokens_seen": ("no", False),  # 5.x default "no"; 4.57 (and argument parsers) False
}


def off_values(parent: type, name: str) -> list[Any]:
    """The values of field `name` that mean "off": the parent dataclass's default and `ALSO_OFF[name]`."""
    values = list(ALSO_OFF.get(name, ()))
    for f in dataclasses.fields(parent):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                values.append(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                values.append(f.default_factory())
    return values


def check_refused(config: Any, parent: type, refused: dict[str, str], trainer: str) -> None:
    """Raise a ValueError for the first refused field of `config` that is not at an "off" value.

    Args:
        config: the config dataclass, before its parent's `__post_init__` normalises values.
        parent: the TRL config class whose defaults mean "off" (`SFTConfig`, `GRPOConfig`).
        refused: field name → one-line reason (`SFT_REFUSED`, `EBPO_REFUSED`).
        trainer: the trainer's name, for the message.
    """
    for name, reason in refused.items():
        if not hasattr(config, name):
            continue  # a field of another transformers / TRL version
        value = getattr(config, name)
        allowed = off_values(parent, name)
        if any(_same(value, off) for off in allowed):
            continue
        shown = " or ".join(repr(v) for v in _unique(allowed))
        raise ValueError(
            f"`{name}`={value!r} is not supported by {trainer}: {reason}. Leave it at {shown} (its default), "
            "or remove it from your config."
        )


def _same(value: Any, off: Any) -> bool:
    try:
        return bool(value == off) and (value is None) == (off is None)
    except Exception:
        return False


def _unique(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(_same(v, u) and type(v) is type(u) for u in out):
            out.append(v)
    return out


__all__ = [
    "EBPO_HONOURED",
    "EBPO_REFUSED",
    "SFT_HONOURED",
    "SFT_REFUSED",
    "check_refused",
    "off_values",
]
