"""`EditSFTTrainer`: TRL's `SFTTrainer` with the edit-aware diffusion objective.

Overridden: `compute_loss` (corruption → diffusion forward(s) → mixed objective, plus the MoE
router loss), `prediction_step` (loss only) and three private methods of the parents, which may
change between TRL / transformers releases (the tested version ranges are pinned in
pyproject.toml): `SFTTrainer._prepare_dataset` (EOS extension of responses to a block boundary and
the `example_index` column keying the noise, after TRL's own preparation),
`Trainer._set_signature_columns_if_needed` (keeps that column) and `Trainer._save` (the decoding
config written with each checkpoint). The loss terms are logged through TRL's `_metrics`.
Tokenization, chat templates, truncation, LoRA via `peft_config`, gradient checkpointing, accelerate / FSDP /
DeepSpeed and checkpointing are TRL's and transformers'.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer
from trl import SFTTrainer

from dllm_edit.config import EditGenerationConfig

from .callbacks import DecodeEvalCallback
from .decoding_config import SavesDecodingConfig, special_ids
from .diffusion_forward import (
    TWO_COPY_FORMS,
    DiffusionForward,
    declare_decoding_adapter,
    resolve_attention_form,
    unwrap,
)
from .example_noise import (
    EXAMPLE_INDEX,
    ExampleIndexCollator,
    add_example_index,
    corrupt_examples,
    example_generators,
    example_uniform,
    row_extents,
)
from .hidden_states import HiddenStates, greedy_tokens
from .objective import edit_objective
from .on_policy import choose_rows, draft_masked
from .router_loss import load_balancing_loss, moe_routing, record_router_logits, router_output_spec
from .sft_config import EditSFTConfig
from .sft_data import check_dataset_format, conversations_to_prompt_completion, needs_chat_template
from .token_ids import _vocab_size, extend_response_with_eos, resolve_mask_token_id, training_eos_id

_TERMS = ("drafting", "editing", "clean")


class EditSFTTrainer(SavesDecodingConfig, SFTTrainer):
    """Edit-aware SFT for diffusion LMs (LLaDA2.1 section 3.1), as a TRL `SFTTrainer`.

    Each batch is corrupted (response tokens only: a fraction `t` masked, a fraction of the rest
    replaced by random tokens), run through the model in its training form (vectorised block
    diffusion for block-causal models, full attention for bidirectional ones) and scored by the
    drafting + editing + clean objective (`dllm_edit.trainers.objective`). With `mtf_turns > 1` the
    model is run again on drafts built from its own predictions (Multi-turn Forward). With
    `on_policy_rate > 0`, that fraction of the examples is first drafted by the model itself in a
    no-gradient forward (`dllm_edit.trainers.on_policy`), so the editing term sees the model's own
    mistakes (logged as `draft_error_rate`, the share of drafted tokens that are wrong). The three terms
    are logged as `drafting_nll`, `editing_nll`, `clean_nll` (mean nll per position of each kind).

    Arguments are those of `trl.SFTTrainer` (model, args, data_collator, train_dataset, eval_dataset,
    processing_class, callbacks, optimizers, peft_config, ...) with `args` an `EditSFTConfig`.
    `compute_metrics` is refused (the logits of a random corruption are not a prediction); measure
    decoding with `DecodeEvalCallback` instead.

    Examples:
        >>> from dllm_edit.trainers import EditSFTConfig, EditSFTTrainer
        >>> from trl import SFTTrainer
        >>> issubclass(EditSFTTrainer, SFTTrainer)
        True

        A run (see the cookbook, "Edit-aware SFT with LoRA"):

        >>> trainer = EditSFTTrainer(  # doctest: +SKIP
        ...     model, args=EditSFTConfig(output_dir="out", edit_rate_max=0.2),
        ...     train_dataset=dataset, processing_class=tokenizer, peft_config=LoraConfig(r=16))
        >>> trainer.train()  # doctest: +SKIP
    """

    _tag_names = ["trl", "sft", "dllm-edit", "diffusion"]  # noqa: RUF012 (TRL declares it per instance)
    _name = "EditSFT"
    args: EditSFTConfig

    def __init__(
        self,
        model: Any,
        args: EditSFTConfig | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        compute_metrics: Any = None,
        callbacks: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = EditSFTConfig(output_dir="edit-sft")
        if not isinstance(args, EditSFTConfig):
            raise TypeError(
                f"`args` must be an EditSFTConfig, got {type(args).__name__}. Build one with "
                "EditSFTConfig(**your_sft_config.to_dict()) to keep your SFT settings."
            )
        if compute_metrics is not None:
            raise ValueError(
                "EditSFTTrainer does not take `compute_metrics`: the logits of a random corruption are not a "
                "prediction. Measure decoding with `DecodeEvalCallback(prompts, references)` in `callbacks`."
            )
        if args.max_length is not None and args.max_length % args.block_length:
            fixed = args.max_length - args.max_length % args.block_length
            raise ValueError(
                f"`max_length`={args.max_length} is not a multiple of `block_length`={args.block_length}: "
                "sequences are padded to whole blocks, so they would exceed max_length. Use "
                f"max_length={fixed} (or another multiple of the block length)."
            )
        if train_dataset is None:
            raise ValueError("`train_dataset` is required.")
        datasets = {"train_dataset": train_dataset}
        if isinstance(eval_dataset, dict):
            datasets.update({f"eval_dataset[{k!r}]": v for k, v in eval_dataset.items()})
        elif eval_dataset is not None:
            datasets["eval_dataset"] = eval_dataset
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        for name, dataset in datasets.items():
            check_dataset_format(dataset, name, args.dataset_text_field)
            if (
                tokenizer is not None
                and needs_chat_template(dataset)
                and getattr(tokenizer, "chat_template", None) is None
                and args.chat_template_path is None
            ):
                raise ValueError(
                    f"`{name}` is conversational but the tokenizer has no chat template. Set "
                    "`tokenizer.chat_template`, or `chat_template_path` in EditSFTConfig."
                )
        if tokenizer is not None and not isinstance(model, str):
            resolve_mask_token_id(args, tokenizer, model)  # fail before any tokenization
        train_dataset = conversations_to_prompt_completion(train_dataset, args.assistant_only_loss)
        if isinstance(eval_dataset, dict):
            eval_dataset = {
                k: conversations_to_prompt_completion(v, args.assistant_only_loss)
                for k, v in eval_dataset.items()
            }
        elif eval_dataset is not None:
            eval_dataset = conversations_to_prompt_completion(eval_dataset, args.assistant_only_loss)
        if args.pad_to_multiple_of is None:
            args.pad_to_multiple_of = args.block_length  # the collator pads whole blocks

        super().__init__(
            model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            **kwargs,
        )
        self.mask_token_id = resolve_mask_token_id(args, self._tokenizer, self.model)
        self.vocab_size = _vocab_size(self.model)
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(
                f"mask_token_id={self.mask_token_id} is outside the model's vocabulary of {self.vocab_size} "
                "rows. Resize the embeddings (model.resize_token_embeddings(len(tokenizer))) or fix the id."
            )
        self.attention_form = resolve_attention_form(self.model, args.diffusion_attention)
        declare_decoding_adapter(self.model, self.attention_form)  # checkpoints decode as trained
        # Saved checkpoints then decode with dllm_edit.generate without naming the mask token.
        generation_config = getattr(unwrap(self.model), "generation_config", None)
        if generation_config is not None and getattr(generation_config, "mask_token_id", None) is None:
            generation_config.mask_token_id = self.mask_token_id
        self.never_sample = tuple(sorted(set(self._tokenizer.all_special_ids) | {self.mask_token_id}))
        self.router = self._router_loss_setup()
        self.data_collator = ExampleIndexCollator(self.data_collator)  # the index keys the noise
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, DecodeEvalCallback):
                callback.bind(self)

    def _router_loss_setup(self) -> tuple[type[torch.nn.Module], int, int, int] | None:
        """`(router module class, output index, experts, top-k)` when the MoE router loss is on, else None.

        TRL's `SFTTrainer` decides whether it is on (`router_aux_loss_coef`, default: the model config's
        coefficient, on a model with `output_router_logits` in its config); the loss is computed here
        from hooks (see `dllm_edit.trainers.router_loss`), because the model's own computation cannot
        take the 4-D block-diffusion mask.
        """
        if not getattr(self, "aux_loss_enabled", False):
            return None
        inner = unwrap(self.model)
        spec = router_output_spec(inner)
        if spec is None:
            raise ValueError(
                f"{type(inner).__name__} is a Mixture-of-Experts model but declares no router-logit outputs "
                "(`_can_record_outputs['router_logits']`) to compute the router loss from. Set "
                "router_aux_loss_coef=0.0 to train without it."
            )
        text_config = inner.config.get_text_config()
        text_config.output_router_logits = False  # the model's own computation takes a 2-D mask only
        return (*spec, *moe_routing(text_config))

    def _router_loss(
        self, recorded: list[torch.Tensor], valid: torch.Tensor, experts: int, top_k: int
    ) -> torch.Tensor:
        """The load-balancing loss of one forward (`valid` `[B, T]`: non-padding positions of `x_t`)."""
        tokens = torch.cat([valid, valid], dim=1) if self.attention_form in TWO_COPY_FORMS else valid
        return load_balancing_loss(recorded, tokens, experts, top_k)  # over every token the forward ran

    # ---- dataset ------------------------------------------------------------------------------------------

    def _prepare_dataset(
        self,
        dataset: Any,
        processing_class: Any,
        args: Any,
        packing: bool,
        formatting_func: Any,
        dataset_name: str,
    ) -> Any:
        dataset = super()._prepare_dataset(
            dataset, processing_class, args, packing, formatting_func, dataset_name
        )
        if not args.pad_response_with_eos:
            return add_example_index(dataset)
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        eos_token_id = training_eos_id(args, tokenizer)
        if eos_token_id is None:
            raise ValueError(
                "`pad_response_with_eos=True` needs an EOS token: set the tokenizer's eos_token or "
                "`eos_token` in EditSFTConfig, or pass pad_response_with_eos=False."
            )
        extended = dataset.map(
            extend_response_with_eos,
            fn_kwargs={"eos_token_id": eos_token_id, "block_length": args.block_length},
        )
        return add_example_index(extended)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()  # type: ignore[misc]
        if self._signature_columns is not None and EXAMPLE_INDEX not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, EXAMPLE_INDEX]

    # ---- saving -------------------------------------------------------------------------------------------

    def decoding_config(self) -> EditGenerationConfig:
        """The decoding settings saved with every checkpoint (see `dllm_edit.trainers.decoding_config`).

        The Quality preset with the trained block length and mask / EOS / pad ids; editing
        (`editing_threshold`) is switched off when training had no random replacements
        (`edit_rate_max=0`), as T2T edits hurt a model never trained to make them.
        """
        fields: dict[str, Any] = {"block_length": self.args.block_length, "mask_token_id": self.mask_token_id}
        fields.update(special_ids(self._tokenizer, training_eos_id(self.args, self._tokenizer)))
        if self.args.edit_rate_max == 0:
            fields["editing_threshold"] = None
        return EditGenerationConfig.from_mode("quality", **fields)

    # ---- loss ---------------------------------------------------------------------------------------------

    def noise_generators(self, example_index: torch.Tensor, device: torch.device) -> list[torch.Generator]:
        """One generator per example of a micro-batch, for its corruption noise
        (`dllm_edit.trainers.example_noise`).

        Its seed depends only on `noise_seed` (default `seed`), the optimizer step and the example's
        index in the prepared dataset: not on the micro-batch, the process or the number of
        processes, so one process with a batch of 2N draws the noise two processes with N draw, and
        a run resumed from a checkpoint draws the noise an uninterrupted one draws. Evaluation uses
        step -1, so every evaluation scores the same corruption of the evaluation set.
        """
        training = bool(getattr(self.model, "training", True))
        step = self.state.global_step if training else -1  # every evaluation scores the same corruption
        base = self.args.seed if self.args.noise_seed is None else self.args.noise_seed
        return example_generators(base, step, example_index, training, device)

    def _block_aligned(
        self, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(input_ids, labels, valid)` `[B, T]` right-padded to a whole number of blocks."""
        ids = inputs["input_ids"]  # [B, T]
        labels = inputs.get("labels", ids)  # [B, T]
        valid = inputs.get("attention_mask", torch.ones_like(ids)).bool()  # [B, T]
        short = (-ids.shape[1]) % self.args.block_length
        if short:
            pad_id = self._tokenizer.pad_token_id
            pad = self.mask_token_id if pad_id is None else pad_id  # never attended to or scored
            ids = torch.nn.functional.pad(ids, (0, short), value=pad)
            labels = torch.nn.functional.pad(labels, (0, short), value=-100)
            valid = torch.nn.functional.pad(valid, (0, short), value=False)
        return ids, labels, valid

    def _next_draft(
        self,
        scores: torch.Tensor | HiddenStates,
        noisy: torch.Tensor,
        rate: torch.Tensor,
        generators: list[torch.Generator],
        extents: list[int],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Multi-turn Forward: fill a fraction of the still-masked positions with the model's argmax."""
        predicted = greedy_tokens(scores, suppress_ids=(self.mask_token_id,))  # [B, T]
        still = noisy == self.mask_token_id  # [B, T]
        draw = example_uniform(generators, extents, noisy.shape[1], noisy.device)  # [B, T]
        fill = still & (draw < self.args.mtf_fill_rate)  # [B, T]
        rate = (rate * (1.0 - self.args.mtf_fill_rate)).clamp_min(1e-3)  # [B, T] expected mask rate left
        return torch.where(fill, predicted, noisy), rate

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> Any:
        """Corrupt the batch, run the diffusion forward(s), return the mixed M2T + T2T loss."""
        if return_outputs:
            raise ValueError(
                "EditSFTTrainer.compute_loss returns the loss only: the logits of a random corruption are "
                "not a prediction. Use DecodeEvalCallback to measure decoding."
            )
        args = self.args
        mode = "train" if getattr(self.model, "training", True) else "eval"
        ids, labels, valid = self._block_aligned(inputs)
        response = labels != -100  # [B, T]
        clean = torch.where(response, labels, ids)  # [B, T]
        if EXAMPLE_INDEX not in inputs:
            raise ValueError(
                f"The batch has no `{EXAMPLE_INDEX}`, which keys each example's corruption noise: the "
                "trainer's data collator adds it (`dllm_edit.trainers.example_noise.ExampleIndexCollator`); "
                "keep it when replacing `trainer.data_collator`."
            )
        generators = self.noise_generators(inputs[EXAMPLE_INDEX], ids.device)
        extents = row_extents(valid, args.block_length)
        corruption = corrupt_examples(
            clean,
            response,
            extents,
            generators,
            mask_token_id=self.mask_token_id,
            vocab_size=self.vocab_size,
            mask_rate=(args.mask_rate_min, args.mask_rate_max),
            edit_rate=(args.edit_rate_min, args.edit_rate_max),
            block_length=args.block_length if args.noise_granularity == "block" else None,
            never_sample=self.never_sample,
            editing_stream_rate=args.editing_stream_rate,
            in_context_rate=args.edit_noise_in_context,
            shift_rate=args.edit_noise_shift,
            semi_ar_rate=args.semi_ar_noise,
            semi_ar_block_length=args.block_length,
        )
        forward = DiffusionForward(
            model, self.attention_form, args.block_length, fused_lm_head=args.fused_lm_head
        )
        normalizer = response.sum() if num_items_in_batch is None else num_items_in_batch
        noisy, rate = corruption.noisy, corruption.mask_rate
        if args.on_policy_rate > 0 and self.state.global_step >= args.on_policy_warmup_steps:
            noisy = self._on_policy(model, forward, noisy, clean, valid, response, generators, mode)
        loss = torch.zeros((), device=ids.device)
        nll_sums = torch.zeros(3, device=ids.device)
        counts = torch.zeros(3, device=ids.device)
        aux_total = torch.zeros((), device=ids.device)
        for turn in range(args.mtf_turns):
            if self.router is None:
                scores = forward.scores(noisy, clean, valid)  # [B, T, V] logits, or HiddenStates
            else:
                target, index, experts, top_k = self.router
                with record_router_logits(model, target, index) as recorded:
                    scores = forward.scores(noisy, clean, valid)  # [B, T, V] logits, or HiddenStates
                aux_total = aux_total + self._router_loss(recorded, valid, experts, top_k) / args.mtf_turns
            terms = edit_objective(
                scores,
                noisy,
                clean,
                response,
                mask_token_id=self.mask_token_id,
                mask_rate=rate,
                mask_loss_weighting=args.mask_loss_weighting,
                edit_loss_weight=args.edit_loss_weight,
                clean_loss_weight=args.clean_loss_weight,
                normalizer=normalizer,
            )
            loss = loss + terms.loss / args.mtf_turns
            nll_sums += terms.nll_sums.float()
            counts += terms.counts.float()
            if turn + 1 < args.mtf_turns:
                noisy, rate = self._next_draft(scores, noisy, rate, generators, extents)
        if args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        if self.router is not None:  # a per-micro-batch mean, averaged over accumulation steps as in TRL
            steps = (
                getattr(self, "current_gradient_accumulation_steps", 1)
                if num_items_in_batch is not None
                else 1
            )
            loss = loss + self.router_aux_loss_coef * aux_total / steps
            aux = self.accelerator.gather_for_metrics(aux_total.detach()[None]).mean().item()
            self._metrics[mode]["aux_loss"].append(aux)
        self._record_terms(mode, nll_sums, counts, valid)
        return loss

    def _on_policy(
        self,
        model: Any,
        forward: DiffusionForward,
        noisy: torch.Tensor,
        clean: torch.Tensor,
        valid: torch.Tensor,
        response: torch.Tensor,
        generators: list[torch.Generator],
        mode: str,
    ) -> torch.Tensor:
        """The on-policy editing stream (`dllm_edit.trainers.on_policy`): `noisy` `[B, T]` with the
        masked positions of the chosen examples drafted by the model; logs how often the draft is wrong."""
        args = self.args
        rows = choose_rows(generators, args.on_policy_rate, noisy.device)  # [B]
        out = draft_masked(
            forward,
            model,
            noisy,
            clean,
            valid,
            response,
            rows,
            mask_token_id=self.mask_token_id,
            draft=args.on_policy_draft,
            confidence=args.on_policy_confidence,
            suppress_ids=self.never_sample,
            generator=generators,
        )
        wrong = (out.drafted & (out.noisy != clean)).sum()
        totals = self.accelerator.gather_for_metrics(torch.stack([out.drafted.sum(), wrong])[None]).sum(0)
        drafted, wrong_total = totals.tolist()
        if drafted > 0:
            self._metrics[mode]["draft_error_rate"].append(wrong_total / drafted)
        return out.noisy

    def _record_terms(
        self, mode: str, nll_sums: torch.Tensor, counts: torch.Tensor, valid: torch.Tensor
    ) -> None:
        totals = self.accelerator.gather_for_metrics(torch.cat([nll_sums, counts])[None]).sum(0)  # [6]
        sums, counts = totals[:3].tolist(), totals[3:].tolist()
        for name, total, count in zip(_TERMS, sums, counts, strict=True):
            if count > 0:
                self._metrics[mode][f"{name}_nll"].append(total / count)
        seen = sum(counts)
        if seen > 0:
            self._metrics[mode]["edited_fraction"].append(counts[1] / seen)
        if mode == "train":
            tokens = self.accelerator.gather_for_metrics(valid.sum()[None]).sum().item()
            self._total_train_tokens += int(tokens)
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

    def prediction_step(
        self,
        model: Any,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor, None, None]:
        """Evaluation loss on a corrupted batch (no logits: see `compute_metrics` above)."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def log_raw(self, logs: dict[str, float]) -> None:
        """Log `logs` as they are (without folding in the running training metrics)."""
        Trainer.log(self, logs)
