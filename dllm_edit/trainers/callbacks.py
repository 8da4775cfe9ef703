"""`DecodeEvalCallback`: decode held-out prompts during training and log accuracy and speed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

Scorer = Callable[[str, str], float]


def exact_match(completion: str, reference: str) -> float:
    """1.0 when the completion equals the reference after stripping surrounding whitespace."""
    return float(completion.strip() == reference.strip())


class DecodeEvalCallback(TrainerCallback):
    """Decode a few held-out prompts with dllm_edit presets while training; log accuracy and TPF.

    Every `every_n_steps` optimizer steps (and after each evaluation when `every_n_steps` is None),
    the prompts are decoded in batches with each mode of `modes` (`EditGenerationConfig.from_mode`)
    and the trainer logs `decode/<mode>/accuracy` (mean `scorer(completion, reference)`),
    `decode/<mode>/tokens_per_forward` and `decode/<mode>/num_forwards`.

    Args:
        prompts: prompt strings (rendered as they are; apply a chat template beforehand if needed).
        references: the expected completions, one per prompt.
        modes: preset names to decode with, e.g. `("speedy", "quality")`.
        every_n_steps: decode every this many optimizer steps; None: after each evaluation only.
        max_new_tokens: tokens generated per prompt.
        batch_size: prompts decoded together.
        scorer: `scorer(completion, reference) -> float`; default exact match.
        generation_overrides: extra `EditGenerationConfig` fields (e.g. `{"threshold": 0.6}`).

    Examples:
        >>> cb = DecodeEvalCallback(["1+1="], ["2"], every_n_steps=50, max_new_tokens=8)
        >>> cb.modes
        ('speedy', 'quality')
    """

    def __init__(
        self,
        prompts: Sequence[str],
        references: Sequence[str],
        *,
        modes: Sequence[str] = ("speedy", "quality"),
        every_n_steps: int | None = None,
        max_new_tokens: int = 64,
        batch_size: int = 16,
        scorer: Scorer = exact_match,
        generation_overrides: dict[str, Any] | None = None,
    ) -> None:
        from dllm_edit.config import MODES

        if len(prompts) != len(references) or not prompts:
            raise ValueError(
                f"`prompts` and `references` must be non-empty and of equal length, got {len(prompts)} and "
                f"{len(references)}."
            )
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            raise ValueError(f"`modes` must be among {sorted(MODES)}, got {unknown}.")
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"`every_n_steps` must be None or >= 1, got {every_n_steps!r}.")
        self.prompts = list(prompts)
        self.references = list(references)
        self.modes = tuple(modes)
        self.every_n_steps = every_n_steps
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.scorer = scorer
        self.generation_overrides = dict(generation_overrides or {})
        self.trainer: Any = None

    def bind(self, trainer: Any) -> None:
        """Attach the trainer (done by `EditSFTTrainer`): its tokenizer, mask token, block length and log."""
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_n_steps is not None and state.global_step % self.every_n_steps == 0:
            self._log(self.evaluate(kwargs["model"]))

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_n_steps is None:
            self._log(self.evaluate(kwargs["model"]))

    def _log(self, metrics: dict[str, float]) -> None:
        if self.trainer is not None:
            self.trainer.log_raw(metrics)

    @torch.no_grad()
    def evaluate(self, model: Any) -> dict[str, float]:
        """Decode every prompt with every mode; return the metrics (also used outside training)."""
        import dllm_edit

        if self.trainer is None:
            raise RuntimeError(
                "DecodeEvalCallback is not bound to a trainer; pass it in EditSFTTrainer(callbacks=[...])."
            )
        tokenizer = self.trainer._tokenizer
        was_training = model.training
        model.eval()
        metrics: dict[str, float] = {}
        try:
            for mode in self.modes:
                config = dllm_edit.EditGenerationConfig.from_mode(
                    mode,
                    max_new_tokens=self.max_new_tokens,
                    block_length=self.trainer.args.block_length,
                    mask_token_id=self.trainer.mask_token_id,
                    **self.generation_overrides,
                )
                scores: list[float] = []
                tpf: list[float] = []
                forwards: list[float] = []
                for start in range(0, len(self.prompts), self.batch_size):
                    chunk = self.prompts[start : start + self.batch_size]
                    encoded = tokenizer(chunk, return_tensors="pt", padding=True, padding_side="left")
                    device = next(model.parameters()).device
                    out = dllm_edit.generate(
                        model,
                        encoded["input_ids"].to(device),
                        attention_mask=encoded["attention_mask"].to(device),
                        generation_config=config,
                        tokenizer=tokenizer,
                        return_dict_in_generate=True,
                    )
                    if not isinstance(out, dllm_edit.EditGenerationOutput) or out.sequences is None:
                        raise TypeError(f"generate returned {type(out).__name__} without sequences")
                    width = encoded["input_ids"].shape[1]
                    texts = tokenizer.batch_decode(out.sequences[:, width:], skip_special_tokens=True)
                    refs = self.references[start : start + self.batch_size]
                    scores += [self.scorer(t, r) for t, r in zip(texts, refs, strict=True)]
                    if out.tokens_per_forward is not None and out.num_forwards is not None:
                        tpf += out.tokens_per_forward.tolist()
                        forwards += out.num_forwards.float().tolist()
                metrics[f"decode/{mode}/accuracy"] = sum(scores) / len(scores)
                metrics[f"decode/{mode}/tokens_per_forward"] = sum(tpf) / max(len(tpf), 1)
                metrics[f"decode/{mode}/num_forwards"] = sum(forwards) / max(len(forwards), 1)
        finally:
            model.train(was_training)
        return metrics
