"""`EditSFTConfig`: TRL's `SFTConfig` plus the fields of edit-aware diffusion SFT."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from trl import SFTConfig

from .checkpointing_names import (
    NEW_KWARGS_HELP,
    NEW_NAME_HELP,
    OLD_NAME_HELP,
    TRANSFORMERS_HAS_NEW_NAMES,
    resolve_checkpointing_names,
)
from .config_fields import SFT_REFUSED, check_refused
from .corruption import SEMI_AR_MEANING, SHIFT_MEANING, check_fraction, check_rate_range
from .diffusion_forward import ATTENTION_FORMS
from .objective import MASK_LOSS_WEIGHTINGS
from .on_policy import ON_POLICY_DRAFTS, check_on_policy_fields

NOISE_GRANULARITIES = ("sequence", "block")


@dataclass
class EditSFTConfig(SFTConfig):
    r"""Configuration of `EditSFTTrainer`: every field of TRL's `SFTConfig` plus the ones below.

    It parses with `TrlParser` / `HfArgumentParser` and loads from YAML like any TRL config. Defaults
    that differ from `SFTConfig`: `bf16` is on only when a CUDA device supports it (TRL turns it on
    everywhere), and `packing` / `padding_free` are refused (block-diffusion attention needs one
    example per row). Every other `SFTConfig` / `TrainingArguments` field is honoured or refused with
    an error naming it (the lists: `dllm_edit.trainers.config_fields`): e.g. `loss_type="dft"`,
    `use_liger_kernel` and `label_smoothing_factor` are refused; `router_aux_loss_coef` is honoured
    (MoE models add the router load-balancing loss, as in TRL's SFT).

    Attributes:
        mask_rate_min (float): lowest mask rate `t` (default 0.1). `t ~ U[min, max]` is drawn per
            example (or per block): the fraction of response tokens replaced by the mask token
            (drafting stream, M2T; LLaDA2.1 section 3.1).
        mask_rate_max (float): highest mask rate `t` (default 1.0).
        edit_rate_min (float): lowest fraction `e` of the response tokens left unmasked that are
            replaced by random tokens (editing stream, T2T; default 0.0).
        edit_rate_max (float): highest such fraction (default 0.2). Both 0 (with
            `clean_loss_weight=0` and `editing_stream_rate=0`) gives plain masked-diffusion SFT.
        editing_stream_rate (float): fraction of the examples (or blocks, with `noise_granularity=
            "block"`) corrupted by random replacements only, nothing masked (default 0.25): fully
            written blocks with some wrong tokens, the state T2T editing judges at every post step.
            0 trains only on blocks that still hold masks (see `dllm_edit.trainers.corrupt_response`).
        noise_granularity (str): draw `t` and `e` per `"sequence"` (default) or per `"block"`.
        mask_loss_weighting (str): weight of the drafting term: `"inverse_t"` (default; `1/t`, the
            masked-diffusion ELBO weighting) or `"none"`.
        edit_loss_weight (float): `λ_edit`, weight of the editing term (positions holding a wrong
            token; default 1.0).
        clean_loss_weight (float): `λ_clean`, weight of the clean term (positions holding the right
            token; default 1.0). `> 0` calibrates confidence on right tokens, which the T2T
            threshold rule needs; with editing noise on, 0 teaches the model that every visible
            token is suspect.
        edit_noise_in_context (float): fraction of the random replacements that copy another token
            of the same response instead of a uniform vocabulary token (default 0): plausible errors,
            the kind a drafter makes, which uniform noise never shows the model.
        edit_noise_shift (float): fraction of the examples given one shifted span (default 0): the
            tokens of 2-8 response positions move one position right (a token inserted) or left
            (one deleted), the duplicated / dropped tokens of parallel drafting (edit-based
            corruption, `dllm_edit.trainers.corruption`). Shifted tokens are editing positions.
        semi_ar_noise (float): fraction of the examples laid out as block-wise decoding of a
            full-attention model sees them (default 0): a block of the response drawn uniformly,
            the blocks before it unmasked (their replacement noise kept), every block after it fully
            masked. For the `"bidirectional"` and `"shifted"` forms, whose decoding reads the masked
            future; the block-diffusion forms never see it.
        mtf_turns (int): forwards per example (default 1 = Multi-turn Forward off); `k > 1` adds
            `k - 1` turns, each on a draft built from the previous turn's detached argmax
            predictions, trained to recover the clean tokens.
        mtf_fill_rate (float): fraction of the still-masked positions each extra MTF turn fills
            with the model's predictions (default 0.5).
        on_policy_rate (float): fraction of the examples whose masked positions are drafted by the
            model itself before the training forward (default 0 = off; the on-policy editing stream,
            `dllm_edit.trainers.on_policy`): the training pass then learns to rewrite the model's own
            wrong drafts (T2T on real mistakes) and to fill the masks left. Costs one extra forward
            without gradient per on-policy example.
        on_policy_warmup_steps (int): optimizer steps trained on ordinary noise before drafts are
            used (default 0); a model at initialisation drafts noise.
        on_policy_draft (str): `"argmax"` (default, the greedy decoder's draft) or `"sample"`
            (temperature 1).
        on_policy_confidence (float): draft a masked position only where the proposal's probability
            is `> on_policy_confidence` (default 0.5, what one S-mode step commits; 0.0 drafts
            every masked position). Positions below it stay masked (M2T).
        mask_token_id (int | None): the mask token; default: the tokenizer's `mask_token_id`, then
            the model config's.
        block_length (int): tokens per block (default 32, as LLaDA2.x). Sequences are padded to a
            multiple of it.
        diffusion_attention (str): `"block_diffusion"`, `"block_diffusion_shifted"` (block diffusion
            keeping a next-token head, as Fast-dLLM v2's conversions of autoregressive models),
            `"bidirectional"`, `"shifted"` (Dream-style and converted autoregressive models: position
            `j` is predicted at `j - 1`), `"masked_lm"`, or `"auto"` (default: from the model's
            decoding adapter, see `dllm_edit.adapters`). A form whose adapter differs from the
            detected one is recorded in `config.dllm_edit_adapter`, so checkpoints decode as trained.
        fused_lm_head (bool): compute the loss's log-likelihoods from the final hidden states and
            the output embedding, chunk by chunk over the vocabulary, instead of from `[B, T, V]`
            logits (default False). Same loss and gradients; at a 157k vocabulary it cuts the
            step's peak memory several-fold (docs/benchmarks.md, "Trainer peak memory"). Needs a
            model that takes `logits_to_keep`, has `get_decoder()` and a plain `nn.Linear` output
            embedding with unprocessed logits (no final-logit softcapping or scaling); other models
            are refused with an error at the first step. The on-policy draft keeps its logits.
        pad_response_with_eos (bool): extend each response with supervised EOS tokens to the end
            of its last block, as block decoding fills a block after the answer ends (default
            True).
        noise_seed (int | None): seed of the corruption noise; default `seed`. The noise of an
            example depends only on this seed, the optimizer step and the example's index in the
            dataset (not on the batch, the process or the number of processes), so resuming from a
            checkpoint, or training on more processes with the same global batch, reproduces it.

    Examples:
        >>> from dllm_edit.trainers import EditSFTConfig
        >>> cfg = EditSFTConfig(output_dir="out", edit_rate_max=0.3, report_to="none")
        >>> cfg.edit_rate_max, cfg.clean_loss_weight
        (0.3, 1.0)
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
    mask_token_id: int | None = field(
        default=None,
        metadata={"help": "Mask token id. Default: the tokenizer's mask_token_id, then the model config's."},
    )
    block_length: int = field(default=32, metadata={"help": "Tokens per block (LLaDA2.x use 32)."})
    diffusion_attention: str = field(
        default="auto",
        metadata={
            "help": "Training attention: 'block_diffusion' (block-causal models, vectorised [x_0 ⊕ x_t]), "
            "'block_diffusion_shifted' (the same, with a next-token head), 'bidirectional', 'shifted' "
            "(Dream-style: position j predicted at j - 1), 'masked_lm', or 'auto' (from the model's "
            "decoding adapter).",
            "choices": ["auto", *ATTENTION_FORMS],
        },
    )
    fused_lm_head: bool = field(
        default=False,
        metadata={"help": "Loss from the final hidden states and lm_head, chunked (no [B, T, V] logits)."},
    )
    mask_rate_min: float = field(default=0.1, metadata={"help": "Lowest mask rate t (drafting stream)."})
    mask_rate_max: float = field(default=1.0, metadata={"help": "Highest mask rate t (drafting stream)."})
    edit_rate_min: float = field(
        default=0.0, metadata={"help": "Lowest fraction of unmasked response tokens replaced by noise."}
    )
    edit_rate_max: float = field(
        default=0.2, metadata={"help": "Highest fraction of unmasked response tokens replaced by noise."}
    )
    editing_stream_rate: float = field(
        default=0.25,
        metadata={"help": "Fraction of examples corrupted by random replacements only (no mask)."},
    )
    noise_granularity: str = field(
        default="sequence",
        metadata={
            "help": "Draw the rates per 'sequence' or per 'block'.",
            "choices": list(NOISE_GRANULARITIES),
        },
    )
    mask_loss_weighting: str = field(
        default="inverse_t",
        metadata={
            "help": "Weight of the drafting term: 'inverse_t' (1/t, the ELBO weighting) or 'none'.",
            "choices": list(MASK_LOSS_WEIGHTINGS),
        },
    )
    edit_loss_weight: float = field(default=1.0, metadata={"help": "λ_edit: weight of the editing term."})
    clean_loss_weight: float = field(
        default=1.0, metadata={"help": "λ_clean: weight of the term on positions already right."}
    )
    edit_noise_in_context: float = field(
        default=0.0,
        metadata={
            "help": "Fraction of random replacements that copy another token of the same response "
            "(plausible errors) instead of a uniform vocabulary token; 0 = uniform noise only."
        },
    )
    edit_noise_shift: float = field(
        default=0.0,
        metadata={
            "help": "Fraction of examples given one shifted span (a token inserted or deleted, 2-8 "
            "positions moved by one): edit-based corruption; 0 = none."
        },
    )
    semi_ar_noise: float = field(
        default=0.0,
        metadata={
            "help": "Fraction of examples laid out as block-wise decoding of a full-attention model sees "
            "them: finished blocks, one noisy block, fully masked blocks after it; 0 = none."
        },
    )
    mtf_turns: int = field(
        default=1, metadata={"help": "Forwards per example; 1 = Multi-turn Forward off, 2 = one extra turn."}
    )
    mtf_fill_rate: float = field(
        default=0.5,
        metadata={"help": "Fraction of still-masked positions each extra MTF turn fills with predictions."},
    )
    on_policy_rate: float = field(
        default=0.0,
        metadata={"help": "Fraction of examples whose masked positions the model drafts itself (0 = off)."},
    )
    on_policy_warmup_steps: int = field(
        default=0, metadata={"help": "Optimizer steps on ordinary noise before the model's drafts are used."}
    )
    on_policy_draft: str = field(
        default="argmax",
        metadata={"help": "How the model drafts: 'argmax' or 'sample'.", "choices": list(ON_POLICY_DRAFTS)},
    )
    on_policy_confidence: float = field(
        default=0.5,
        metadata={"help": "Draft a masked position only where p > this (0.5: one S-mode step; 0: all)."},
    )
    pad_response_with_eos: bool = field(
        default=True,
        metadata={"help": "Extend responses with supervised EOS tokens to the end of their last block."},
    )
    noise_seed: int | None = field(
        default=None, metadata={"help": "Seed of the corruption noise (default: seed)."}
    )

    def __post_init__(self) -> None:
        check_refused(self, SFTConfig, SFT_REFUSED, "EditSFTTrainer")  # before anything is resolved or loaded
        resolve_checkpointing_names(self)
        if self.bf16 is None and not self.fp16:
            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        super().__post_init__()
        self.validate_edit_fields()

    def validate_edit_fields(self) -> None:
        """Check the edit-SFT fields; raise a ValueError naming the field, the constraint and the fix."""
        if not isinstance(self.fused_lm_head, bool):
            raise ValueError(f"`fused_lm_head` must be True or False, got {self.fused_lm_head!r}.")
        check_rate_range("mask_rate", self.mask_rate_min, self.mask_rate_max)
        check_rate_range("edit_rate", self.edit_rate_min, self.edit_rate_max)
        if not 0.0 <= self.editing_stream_rate < 1.0:
            raise ValueError(
                f"`editing_stream_rate` must lie in [0, 1), got {self.editing_stream_rate!r}: it is the "
                "fraction of examples with random replacements and no mask; 1 would leave no drafting stream."
            )
        if self.editing_stream_rate > 0 and self.edit_rate_max == 0 and self.clean_loss_weight == 0:
            raise ValueError(
                f"`editing_stream_rate`={self.editing_stream_rate!r} with no random replacements "
                "(`edit_rate_max`=0) and no clean term (`clean_loss_weight`=0): those examples would carry "
                "no loss. For plain masked-diffusion SFT set editing_stream_rate=0."
            )
        if self.mask_rate_max <= 0:
            raise ValueError(
                "`mask_rate_max` must be > 0: with no masked token the drafting stream (M2T) has nothing to "
                f"learn, got {self.mask_rate_max!r}."
            )
        check_fraction(
            "edit_noise_in_context",
            self.edit_noise_in_context,
            "the fraction of replacements drawn from the response's own tokens (e.g. 0.5)",
        )
        check_fraction("edit_noise_shift", self.edit_noise_shift, SHIFT_MEANING)
        check_fraction("semi_ar_noise", self.semi_ar_noise, SEMI_AR_MEANING)
        check_on_policy_fields(
            self.on_policy_rate, self.on_policy_warmup_steps, self.on_policy_draft, self.on_policy_confidence
        )
        if not 0.0 <= self.mtf_fill_rate <= 1.0:
            raise ValueError(f"`mtf_fill_rate` must lie in [0, 1], got {self.mtf_fill_rate!r}.")
        if not isinstance(self.block_length, int) or self.block_length < 1:
            raise ValueError(f"`block_length` must be a positive int, got {self.block_length!r}.")
        if not isinstance(self.mtf_turns, int) or self.mtf_turns < 1:
            raise ValueError(f"`mtf_turns` must be an int >= 1 (1 = MTF off), got {self.mtf_turns!r}.")
        for name, allowed in (
            ("diffusion_attention", ("auto", *ATTENTION_FORMS)),
            ("noise_granularity", NOISE_GRANULARITIES),
            ("mask_loss_weighting", MASK_LOSS_WEIGHTINGS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {list(allowed)}, got {getattr(self, name)!r}.")
        for name in ("edit_loss_weight", "clean_loss_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"`{name}` must be >= 0, got {getattr(self, name)!r}.")
        if isinstance(self.pad_to_multiple_of, int) and self.pad_to_multiple_of % self.block_length:
            raise ValueError(
                f"`pad_to_multiple_of`={self.pad_to_multiple_of} is not a multiple of `block_length`="
                f"{self.block_length}; sequences must end on a block boundary. Leave it unset (the trainer "
                "pads to the block length) or use a multiple of the block length."
            )
