"""`EBPOTrainer`: ELBO-based Block-level Policy Optimization (LLaDA2.1 section 3.2), TRL-style.

One training micro-step:

1. **Rollouts.** The micro-batch's prompts are repeated `num_generations` times and decoded with
   `dllm_edit.generate`, one call per prompt (its group of completions batched; the S or Q preset,
   any override such as multi-block editing), sampling with a generator seeded from
   `(seed, step, the prompt's dataset index)`: a prompt's rollouts do not depend on the other
   prompts of its batch, the process that holds it or the number of processes.
2. **Rewards and advantages.** Reward functions (TRL's calling convention, see
   `dllm_edit.trainers.rewards`) score the completions; advantages are group-relative. Each
   process holds whole groups; the rewards are gathered across processes first, so batch-wide
   statistics (`scale_rewards="batch"`, GDPO's batch normalisation, the logged metrics) are those
   of the global batch.
3. **Noise.** Each completion gets a noise seed from `(seed, step, dataset index, generation)`:
   the ELBO summands (`dllm_edit.trainers.elbo`) of any policy on that completion are computed on
   the noise drawn from it.
4. **Loss.** The ELBO summands under the current θ give the ratio of equation 5 and the clipped
   surrogate of equation 4 (`dllm_edit.trainers.ebpo_loss`). θ_old's summands are those of the
   first loss forward on the batch, detached: at that step θ *is* θ_old (the rollouts were just
   drawn from it), and one forward shares its dropout state with itself, so the first ratio is
   exactly 1 even with dropout on (`lora_dropout`, the model's own; `disable_dropout` switches
   it off entirely). They are stored with the batch for the later iterations. The loss is the mean
   over the global batch's ratio groups (each process's share scaled so that the data-parallel
   gradient average gives it).

With `num_iterations = μ > 1` a rollout batch is reused for μ optimizer steps (the dataloader's
prompts of the reused steps are skipped), which is when the ratio moves away from 1 and the clip acts.
The block-diffusion forward and its mask are the SFT trainer's (`DiffusionForward`).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer

import dllm_edit
from dllm_edit.special_tokens import completion_lengths, resolve_special_tokens

from .corruption import mix_seed
from .decoding_config import SavesDecodingConfig, special_ids
from .diffusion_forward import DiffusionForward, declare_decoding_adapter, resolve_attention_form, unwrap
from .distributed import gather_rows, global_mean_scale
from .ebpo_config import EBPOConfig
from .ebpo_loss import ebpo_surrogate
from .ebpo_rollouts import (
    _INDEX,
    Rollouts,
    _identity,
    _IndexedRows,
    log_rollouts,
    training_sequences,
    unwrap_peft,
)
from .elbo import elbo_token_logps
from .rewards import (
    check_reward_func,
    combine_rewards,
    compute_rewards,
    load_reward_func,
    policy_advantages,
    reward_name,
)
from .sft_trainer import resolve_mask_token_id


class EBPOTrainer(SavesDecodingConfig, Trainer):
    """Reinforcement learning of diffusion LMs with EBPO (see the module docstring).

    Args:
        model: a model or its name / path (loaded with `AutoModelForCausalLM`, `model_init_kwargs`).
        reward_funcs: one or several reward callables (or `"module:function"` strings).
        args: an `EBPOConfig`.
        train_dataset: a `datasets.Dataset` with a `prompt` column (text or chat messages); the other
            columns are passed to the reward functions.
        processing_class: the tokenizer (default: loaded from the model's name).
        peft_config: a PEFT config for LoRA training (only adapters change; the reference policy,
            when `beta > 0`, is the model with adapters disabled).
        callbacks: transformers callbacks.
        optimizers: `(optimizer, scheduler)` as for `Trainer`.

    Logged: `reward` (and `rewards/<function>`), `reward_std`, `ratio/mean`, `clip_ratio/low`,
    `clip_ratio/high`, `kl` (if `beta > 0`), `rollout/tokens_per_forward`, `rollout/num_forwards`,
    `rollout/num_edits`, `completions/mean_length`, `completions/empty_fraction`,
    `completions/unscored_fraction`.

    Examples:
        >>> from dllm_edit.trainers import EBPOTrainer
        >>> from transformers import Trainer
        >>> issubclass(EBPOTrainer, Trainer)
        True

        A run (see the cookbook, "EBPO with a verifiable reward"):

        >>> trainer = EBPOTrainer(model, reward_funcs=exact_match_reward,  # doctest: +SKIP
        ...     args=EBPOConfig(output_dir="out", num_generations=8), train_dataset=prompts,
        ...     processing_class=tokenizer)
        >>> trainer.train()  # doctest: +SKIP
    """

    args: EBPOConfig

    def __init__(
        self,
        model: Any,
        reward_funcs: Callable[..., Any] | str | Sequence[Callable[..., Any] | str],
        args: EBPOConfig | None = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        peft_config: Any = None,
        callbacks: list[Any] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
    ) -> None:
        if args is None:
            args = EBPOConfig(output_dir="ebpo")
        if not isinstance(args, EBPOConfig):
            raise TypeError(f"`args` must be an EBPOConfig, got {type(args).__name__}.")
        funcs = (
            [reward_funcs] if callable(reward_funcs) or isinstance(reward_funcs, str) else list(reward_funcs)
        )
        if not funcs:
            raise ValueError("`reward_funcs` is empty; pass at least one reward function.")
        self.reward_funcs = [load_reward_func(f) for f in funcs]
        for func in self.reward_funcs:
            check_reward_func(func)
        if args.reward_weights is not None and len(args.reward_weights) != len(self.reward_funcs):
            raise ValueError(
                f"`reward_weights` has {len(args.reward_weights)} values for {len(self.reward_funcs)} reward "
                "functions; give one weight per function."
            )
        if train_dataset is None:
            raise ValueError("`train_dataset` is required.")
        columns = getattr(train_dataset, "column_names", None) or list(next(iter(train_dataset)))
        if "prompt" not in columns:
            raise ValueError(
                f"`train_dataset` has columns {sorted(columns)}; EBPO needs a 'prompt' column (text or chat "
                "messages). The other columns are passed to the reward functions."
            )
        if isinstance(model, str):
            init_kwargs = dict(args.model_init_kwargs) if isinstance(args.model_init_kwargs, dict) else {}
            init_kwargs.setdefault("trust_remote_code", args.trust_remote_code)
            model = AutoModelForCausalLM.from_pretrained(model, **init_kwargs)
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(
                unwrap(model).config._name_or_path, trust_remote_code=args.trust_remote_code
            )
        if args.log_completions:
            from transformers.utils import is_rich_available

            if not is_rich_available():
                raise ValueError("`log_completions=True` prints a table with `rich`: pip install rich.")
        self.mask_token_id = resolve_mask_token_id(args, processing_class, model)  # type: ignore[arg-type]
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
            if args.activation_checkpointing:
                model.enable_input_require_grads()
        if args.disable_dropout:
            from trl.trainer.utils import disable_dropout_in_model

            disable_dropout_in_model(model)
        self.rollout_config = dllm_edit.EditGenerationConfig.from_mode(
            args.rollout_mode,
            max_new_tokens=args.max_completion_length,
            temperature=args.temperature,
            top_p=args.top_p if args.top_p < 1.0 else None,
            top_k=args.top_k if args.top_k else None,
            mask_token_id=self.mask_token_id,
            **({"block_length": args.block_length} if args.block_length else {}),
            **(args.rollout_overrides if isinstance(args.rollout_overrides, dict) else {}),
        )  # raises on an invalid override before any training
        self.block_length = int(self.rollout_config.block_length)
        self.group_size = int(args.num_generations or 1)
        self.attention_form = resolve_attention_form(model, args.diffusion_attention)
        declare_decoding_adapter(model, self.attention_form)  # checkpoints decode as trained
        super().__init__(
            model=model,
            args=args,
            data_collator=_identity,  # type: ignore[arg-type]
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
        )
        self._eos_ids()  # fail now if there is none
        self.ref_model = None
        if args.beta > 0 and peft_config is None:
            self.ref_model = copy.deepcopy(unwrap(self.model)).eval().requires_grad_(False)
        self._buffer: dict[int, Rollouts] = {}
        self._micro_step = 0
        self._micro_of: int | None = None
        self._metrics: dict[str, list[float]] = defaultdict(list)
        self._completion_log: dict[str, Any] = {}

    def _eos_ids(self) -> torch.Tensor:
        """EOS ids, resolved as decoding resolves them (transformers' Trainer may align the model's
        ids with the tokenizer's when training starts, so they are read at each use)."""
        special = resolve_special_tokens(unwrap(self.model), self.rollout_config, self.processing_class)
        if not special.eos:
            raise ValueError(
                "EBPO needs an EOS token id to end completions: set tokenizer.eos_token or "
                "model.generation_config.eos_token_id."
            )
        return torch.tensor(sorted(special.eos))  # [E]

    # ---- data ---------------------------------------------------------------------------------------------

    def get_train_dataloader(self) -> DataLoader:
        """Batches of `per_device_train_batch_size / num_generations` prompts (rows as dicts)."""
        args = self.args
        seed = args.seed if args.data_seed is None else args.data_seed
        workers = args.dataloader_num_workers
        options: dict[str, Any] = {"num_workers": workers, "pin_memory": args.dataloader_pin_memory}
        if workers > 0:
            options["persistent_workers"] = args.dataloader_persistent_workers
            options["prefetch_factor"] = args.dataloader_prefetch_factor
            options["multiprocessing_context"] = getattr(args, "dataloader_multiprocessing_context", None)
            options["in_order"] = getattr(args, "dataloader_in_order", True)
        loader = DataLoader(
            _IndexedRows(self.train_dataset),
            batch_size=args.per_device_train_batch_size // self.group_size,
            shuffle=bool(args.shuffle_dataset),
            generator=torch.Generator().manual_seed(seed),
            collate_fn=_identity,
            drop_last=args.dataloader_drop_last,
            **options,
        )
        return self.accelerator.prepare(loader)

    def _seed(self, *parts: int) -> int:
        return mix_seed(self.args.seed, *parts)

    # ---- rollouts -----------------------------------------------------------------------------------------

    def _prompt_texts(self, prompts: list[Any]) -> list[str]:
        tokenizer = self.processing_class
        if prompts and isinstance(prompts[0], list):
            extra: dict[str, Any] = dict(self.args.chat_template_kwargs or {})  # type: ignore[arg-type]
            return [
                str(tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True, **extra))  # type: ignore[union-attr]
                for p in prompts
            ]
        return [str(p) for p in prompts]

    @torch.no_grad()
    def generate_rollouts(self, model: Any, rows: list[dict[str, Any]]) -> Rollouts:
        """Decode, score and prepare one micro-batch of rollouts (steps 1-3 of the module docstring)."""
        args = self.args
        tokenizer: Any = self.processing_class
        group = self.group_size
        step = self.state.global_step
        indices = [int(row[_INDEX]) for row in rows]
        rows = [{k: v for k, v in row.items() if k != _INDEX} for row in rows for _ in range(group)]
        prompts = [row["prompt"] for row in rows]
        texts = self._prompt_texts(prompts)
        encoded = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        device = self.accelerator.device
        ids, attention = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)  # [B, W]
        eos_ids = self._eos_ids().to(device)  # [E]
        completion, out = self._decode_groups(model, texts[::group], indices, eos_ids)  # [B, N]
        first_eos, has_eos = completion_lengths(completion, eos_ids)  # [B], [B]
        completion_lists = [completion[i, : int(first_eos[i])].tolist() for i in range(completion.shape[0])]
        texts = tokenizer.batch_decode(completion_lists, skip_special_tokens=True)
        completions: list[Any] = texts
        if prompts and isinstance(prompts[0], list):
            completions = [[{"role": "assistant", "content": t}] for t in texts]
        columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
        rewards = compute_rewards(
            self.reward_funcs,
            prompts=prompts,
            completions=completions,
            completion_ids=completion_lists,
            columns=columns,
            trainer_state=self.state,
        )  # [B, F]
        total, unscored = combine_rewards(rewards, args.reward_weights)  # [B], [B]
        everyone, offset = gather_rows(rewards)  # [B_global, F]: whole groups, in rank order
        advantages = policy_advantages(
            everyone, args.reward_weights, group, args.scale_rewards, args.multi_objective_aggregation
        )[offset : offset + len(rows)].to(device)  # [B]

        clean, valid, supervised = training_sequences(
            ids,
            attention,
            completion,
            first_eos,
            has_eos,
            eos_ids[0],
            self.block_length,
            getattr(self.processing_class, "pad_token_id", None),
            self.mask_token_id,
        )
        seeds = torch.tensor(
            [self._seed(step, index, 2, j) % (2**31 - 1) for index in indices for j in range(group)],
            device=device,
        )  # [B], per completion
        ref_logp = None
        if args.beta > 0:
            if self.ref_model is not None:
                ref_logp = self.elbo_summands(self.ref_model, clean, valid, supervised, seeds)
            else:  # PEFT: the reference policy is the model without its adapters
                with unwrap_peft(model).disable_adapter():
                    ref_logp = self.elbo_summands(model, clean, valid, supervised, seeds)

        log_rollouts(self._metrics, self.reward_funcs, out, rewards, total, unscored, first_eos, has_eos)
        if args.log_completions:
            self._completion_log = {
                "prompt": self._prompt_texts(prompts),
                "completion": texts,
                "rewards": {reward_name(f): rewards[:, j].tolist() for j, f in enumerate(self.reward_funcs)},
                "advantages": advantages.tolist(),
            }
        return Rollouts(
            clean=clean,
            valid=valid,
            supervised=supervised,
            seeds=seeds,
            advantages=advantages,
            old_logp=None,
            ref_logp=ref_logp,
            created_step=self.state.global_step,
        )

    def _decode_groups(
        self, model: Any, prompt_texts: list[str], indices: list[int], eos_ids: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """Decode each prompt's group with its own generator (seeded from the step and its dataset index).

        Returns:
            `(completions [B, N] padded with EOS, {"tokens_per_forward", "num_forwards", "num_edits"}
            each [B] or None)`.
        """
        tokenizer: Any = self.processing_class
        device = self.accelerator.device
        completions: list[torch.Tensor] = []
        stats: dict[str, list[torch.Tensor]] = defaultdict(list)
        was_training = model.training
        model.eval()
        try:
            for text, index in zip(prompt_texts, indices, strict=True):
                ids = tokenizer([text] * self.group_size, return_tensors="pt", add_special_tokens=False)
                ids = ids["input_ids"].to(device)  # [G, W]
                out = dllm_edit.generate(
                    model,
                    ids,
                    generation_config=self.rollout_config,
                    generator=torch.Generator(device=device).manual_seed(
                        self._seed(self.state.global_step, index, 1)
                    ),
                    tokenizer=tokenizer,
                    return_dict_in_generate=True,
                )
                if not isinstance(out, dllm_edit.EditGenerationOutput) or out.sequences is None:
                    raise TypeError(f"generate returned {type(out).__name__} without sequences")
                completions.append(out.sequences[:, ids.shape[1] :])  # [G, N_g]
                for name in ("tokens_per_forward", "num_forwards", "num_edits"):
                    value = getattr(out, name)
                    if value is not None:
                        stats[name].append(value.float())
        finally:
            model.train(was_training)
        width = max(c.shape[1] for c in completions)
        padded = [
            torch.nn.functional.pad(c, (0, width - c.shape[1]), value=int(eos_ids[0])) for c in completions
        ]
        summary = {
            name: torch.cat(stats[name]) if len(stats[name]) == len(completions) else None
            for name in ("tokens_per_forward", "num_forwards", "num_edits")
        }
        return torch.cat(padded), summary

    def elbo_summands(
        self,
        model: Any,
        clean: torch.Tensor,
        valid: torch.Tensor,
        supervised: torch.Tensor,
        seeds: torch.Tensor,
    ) -> torch.Tensor:
        """ELBO token summands `[B, T]` of `model` on the noise of `seeds`."""
        args = self.args
        return elbo_token_logps(
            DiffusionForward(model, self.attention_form, self.block_length, fused_lm_head=args.fused_lm_head),
            clean,
            valid,
            supervised,
            seeds,
            mask_token_id=self.mask_token_id,
            num_timesteps=args.elbo_timesteps,
            t_min=args.timestep_min,
            t_max=args.timestep_max,
            weighting=args.elbo_weighting,
        )

    # ---- loss ---------------------------------------------------------------------------------------------

    def _rollouts_for(self, model: Any, rows: list[dict[str, Any]]) -> Rollouts:
        """Fresh rollouts, or the buffered ones of this micro-batch slot while `num_iterations` lasts."""
        step = self.state.global_step
        if step != self._micro_of:
            self._micro_of, self._micro_step = step, 0
        slot = self._micro_step
        buffered = self._buffer.get(slot)
        if buffered is None or step - buffered.created_step >= self.args.num_iterations:
            buffered = self.generate_rollouts(model, rows)
            self._buffer[slot] = buffered
        self._micro_step += 1
        return buffered

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """Rollouts (fresh or buffered) → ELBO summands under θ → clipped surrogate."""
        if return_outputs:
            raise ValueError("EBPOTrainer.compute_loss returns the loss only.")
        rollouts = inputs if isinstance(inputs, Rollouts) else self._rollouts_for(model, inputs)
        logp = self.elbo_summands(model, rollouts.clean, rollouts.valid, rollouts.supervised, rollouts.seeds)
        if rollouts.old_logp is None:  # first use: θ = θ_old, in this very forward (same dropout state)
            rollouts.old_logp = logp.detach()
        terms = ebpo_surrogate(
            logp,
            rollouts.old_logp,
            rollouts.advantages,
            rollouts.supervised,
            ratio_level=self.args.ratio_level,
            block_length=self.block_length,
            epsilon_low=self.args.epsilon,
            epsilon_high=float(
                self.args.epsilon_high if self.args.epsilon_high is not None else self.args.epsilon
            ),
            ref_logp=rollouts.ref_logp,
            beta=self.args.beta,
        )
        m = self._metrics
        kl = terms.kl.expand(terms.ratio.shape)  # the local mean, weighted by the local group count
        flags = torch.stack([terms.ratio, terms.clipped_low.float(), terms.clipped_high.float(), kl], dim=1)
        gathered, _ = gather_rows(flags.detach())  # [groups of the global batch, 4]
        if gathered.numel():
            ratio, low, high, kl_all = gathered.mean(dim=0).tolist()
            m["ratio/mean"].append(ratio)
            m["clip_ratio/low"].append(low)
            m["clip_ratio/high"].append(high)
            if self.args.beta > 0:
                m["kl"].append(kl_all)
        # the mean over the global batch's ratio groups once DDP averages the processes' gradients
        return terms.loss * global_mean_scale(int(terms.ratio.numel()))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer logs plus the averaged EBPO metrics since the last log."""
        logs.update({k: sum(v) / len(v) for k, v in self._metrics.items() if v})
        self._metrics.clear()
        super().log(logs, start_time)
        if self.args.log_completions and self._completion_log and self.accelerator.is_main_process:
            from trl.trainer.utils import print_prompt_completions_sample

            sample = self._completion_log
            print_prompt_completions_sample(
                sample["prompt"],
                sample["completion"],
                sample["rewards"],
                sample["advantages"],
                self.state.global_step,
                self.args.num_completions_to_print,  # type: ignore[arg-type]
            )
            self._completion_log = {}

    # ---- saving -------------------------------------------------------------------------------------------

    def decoding_config(self) -> dllm_edit.EditGenerationConfig:
        """The rollout decoding settings (preset, overrides, block length, mask / EOS / pad ids), greedy:
        what is saved with every checkpoint (see `dllm_edit.trainers.decoding_config`)."""
        eos = self._eos_ids()
        fields = special_ids(self.processing_class, int(eos[0]))
        if eos.numel() > 1:
            fields["eos_token_id"] = eos.tolist()  # type: ignore[assignment]
        return self.rollout_config.replace(temperature=0.0, top_p=None, top_k=None, **fields)


__all__ = ["EBPOTrainer", "Rollouts"]
