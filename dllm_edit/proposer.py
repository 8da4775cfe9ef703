"""The proposer: logits of a span -> a candidate token and its probability at every position.

It applies, in order, the adjacent-repeat (stutter) penalty, the processors the config asks for
(transformers' repetition penalty and token suppression), the user's transformers logits
processors, then the candidate kernel (temperature, top-k / top-p, mask-token suppression). When
the config sets one of transformers' other sampling warpers (min-p, typical, epsilon, eta), the
logits are scaled by the temperature and filtered in transformers' order (top-k, top-p, then those)
before the kernel samples at temperature 1. The kernel never keeps a `[B, S, V]` softmax alive.
The same pass computes the statistics the run's strategies declared (`Strategy.needs_stats`: the
current token's probability, the top-2 probabilities, the entropy, the KL to the previous step;
`dllm_edit.kernels.candidate_stats`), and nothing else.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from dllm_edit.config import EditGenerationConfig
from dllm_edit.kernels import CandidateStats, candidate_stats, candidates
from dllm_edit.kernels.candidates import filter_top_p
from dllm_edit.special_tokens import SpecialTokens
from dllm_edit.strategies import AdjacentRepeatPenalty


def config_processors(config: EditGenerationConfig, device: torch.device | str = "cpu") -> list[Any]:
    """transformers processors for the config's `repetition_penalty` and `suppress_tokens` (raw logits)."""
    out: list[Any] = []
    if config.repetition_penalty not in (None, 1.0):
        out.append(RepetitionPenaltyLogitsProcessor(penalty=float(config.repetition_penalty)))
    if config.suppress_tokens:
        out.append(SuppressTokensLogitsProcessor(list(config.suppress_tokens), device=str(device)))
    return out


def sampling_warpers(filters: dict[str, Any], device: torch.device | str = "cpu") -> list[Any]:
    """transformers' warpers, in transformers' order, when a filter beyond top-k / top-p is set.

    Empty when only top-k / top-p (or nothing) is set: the candidate kernel applies those itself.
    """
    if not set(filters) - {"top_k", "top_p"}:
        return []
    out: list[Any] = []
    if "top_k" in filters:
        out.append(TopKLogitsWarper(top_k=int(filters["top_k"])))
    if "top_p" in filters:
        out.append(TopPLogitsWarper(top_p=float(filters["top_p"])))
    if "min_p" in filters:
        out.append(MinPLogitsWarper(min_p=float(filters["min_p"])))
    if "typical_p" in filters:
        out.append(TypicalLogitsWarper(mass=float(filters["typical_p"])))
    if "epsilon_cutoff" in filters:
        out.append(EpsilonLogitsWarper(epsilon=float(filters["epsilon_cutoff"])))
    if "eta_cutoff" in filters:
        out.append(EtaLogitsWarper(epsilon=float(filters["eta_cutoff"]), device=str(device)))
    return out


class Proposer:
    """Build once per `generate` call; call once per step.

    Args:
        config: the decoding configuration.
        special: resolved special token ids.
        logits_processor: transformers `LogitsProcessorList` (or callable), or None.
        generator: torch.Generator for sampling.
        device: where the logits live (transformers' suppress / eta processors keep tensors there).
        stats: the statistics to compute besides the candidates (`dllm_edit.kernels.STAT_NAMES`).
    """

    def __init__(
        self,
        config: EditGenerationConfig,
        special: SpecialTokens,
        logits_processor: Any = None,
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
        stats: frozenset[str] = frozenset(),
        top_p_first: bool = False,
    ) -> None:
        self.mask = special.mask
        self.stats = frozenset(stats)
        self.temperature = float(config.temperature or 0.0)
        # greedy: the argmax and its full-softmax probability, whatever filters a config inherited
        filters = config.active_sampling_filters() if self.temperature > 0 else {}
        self.warpers = sampling_warpers(filters, device)
        # with transformers' warpers the kernel only samples; else it applies top-k / top-p itself
        self.top_k = None if self.warpers else filters.get("top_k")
        self.top_p = None if self.warpers else filters.get("top_p")
        # Dream's order (`Needs.top_p_first`): the nucleus is cut before top-k, here, not in the kernel
        self.top_p_first = bool(top_p_first and self.top_k and self.top_p)
        self.generator = generator
        self._scratch: torch.Generator | None = None  # draws of `keep`, never read
        self.suppress = (special.mask,) if config.suppress_mask_token else ()
        self.stutter = AdjacentRepeatPenalty(config.repeat_penalty) if config.repeat_penalty > 0 else None
        self.processors = [
            *config_processors(config, device),
            *([logits_processor] if logits_processor else []),
        ]

    def __call__(
        self,
        logits: torch.Tensor,
        canvas: torch.Tensor,
        span: slice,
        prev: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> CandidateStats:
        """Candidates for the span.

        Args:
            logits: `[B, S, V]` logits of the span.
            canvas: LongTensor `[B, T]`, the canvas at the top of the step.
            span: the canvas slots of the span.
            prev: the previous step's `(kept_logits [B, S, V], kept_lse [B, S])` when `"kl"` is
                asked for (None at a block's first step).

        Returns:
            `CandidateStats` with `[B, S]` fields (the statistics not asked for are None).

        The logits are the loop's own, from a forward under `torch.no_grad()`, so they are lent to
        the kernel (`in_place`, see `_lend`): greedy float32 logits need no working copy.
        """
        logits, options = self._prepare(logits, canvas, span)  # [B, S, V]
        if self.stats:
            return candidate_stats(
                logits, self.stats, canvas[:, span], prev, **options, in_place=self._lend()
            )  # [B, S] fields
        tokens, probs = candidates(logits, **options, in_place=self._lend())  # [B, S], [B, S]
        return CandidateStats(token=tokens, prob=probs)

    @staticmethod
    def _lend() -> bool:
        """Whether the span's logits may be lent to the kernel: only with grad off (`generate` runs
        under `torch.no_grad()`), where no autograd graph can have saved them."""
        return not torch.is_grad_enabled()

    def keep(
        self, logits: torch.Tensor, canvas: torch.Tensor, span: slice
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The distribution `"kl"` would compare the next forward with, for slots no strategy reads
        at this step (the block ahead, `Needs.across_blocks`): the same processing as `__call__`,
        kept as `(kept_logits [B, S, V], kept_lse [B, S])`. At temperature > 0 the pass draws from a
        scratch generator of its own, so the call's `generator` gives the same draws as without it.
        """
        logits, options = self._prepare(logits, canvas, span)  # [B, S, V]
        if options["temperature"] > 0:
            if self._scratch is None or self._scratch.device != logits.device:
                self._scratch = torch.Generator(device=logits.device)
            options["generator"] = self._scratch
        out = candidate_stats(logits, {"kl"}, None, None, **options, in_place=self._lend())
        assert out.kept_logits is not None and out.kept_lse is not None  # "kl" keeps them
        return out.kept_logits, out.kept_lse

    def _prepare(
        self, logits: torch.Tensor, canvas: torch.Tensor, span: slice
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The span's logits after the stutter guard, the processors and the warpers (`[B, S, V]`),
        and the candidate kernel's options."""
        if self.stutter is not None:
            tokens = canvas[:, span]  # [B, S]
            left = (
                canvas[:, span.start - 1] if span.start > 0 else torch.full_like(tokens[:, 0], self.mask)
            )  # [B]
            logits = self.stutter(logits, tokens, left, self.mask)  # [B, S, V]
        if self.processors:
            batch, width, vocab = logits.shape
            ids = canvas[:, : span.stop].repeat_interleave(width, dim=0)  # [B*S, stop]
            flat = logits.reshape(batch * width, vocab)  # [B*S, V]
            for processor in self.processors:
                flat = processor(ids, flat)
            logits = flat.reshape(batch, width, vocab)  # [B, S, V]
        temperature = self.temperature
        if self.warpers:
            batch, width, vocab = logits.shape
            flat = logits.reshape(batch * width, vocab) / temperature  # [B*S, V]
            for warper in self.warpers:
                flat = warper(None, flat)
            logits, temperature = flat.reshape(batch, width, vocab), 1.0  # [B, S, V], already scaled
        top_p = self.top_p
        if self.top_p_first:  # Dream: temperature, then top-p, then top-k (the kernel does top-k first)
            batch, width, vocab = logits.shape
            flat = logits.reshape(batch * width, vocab).to(torch.float32) / temperature  # [B*S, V]
            if self.suppress:
                flat = flat.index_fill(-1, torch.tensor(self.suppress, device=flat.device), -float("inf"))
            logits = filter_top_p(flat, float(top_p)).reshape(batch, width, vocab)  # type: ignore[arg-type]
            temperature, top_p = 1.0, None  # [B, S, V] already scaled
        options: dict[str, Any] = dict(
            temperature=temperature,
            top_k=self.top_k,
            top_p=top_p,
            generator=self.generator,
            suppress_ids=self.suppress,
        )
        return logits, options
