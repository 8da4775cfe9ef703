"""On-policy editing stream: train T2T on the model's own drafts, not only on random noise.

Random-token noise does not look like a model's own mistakes: a model trained only on it learns to
spot random tokens and to trust any fluent one, so it keeps its own wrong drafts (measured on the
shipped model: docs/research-log.md, "Training the model to edit its own drafts",
`benchmarks/verify_confidence.py`). The remedy of LLaDA2.1's
self-generated T2T data, DMax's on-policy training and ProSeCo is to show the model its own drafts.

For a fraction `on_policy_rate` of the examples of a micro-batch (after `on_policy_warmup_steps`
optimizer steps), the corrupted input `x_t` is drafted before the training forward:

1. a **draft forward** runs the model on `x_t` — in eval mode (no dropout: the draft a decoder
   would write), under `torch.no_grad()`, in the same training form as the training pass (block
   diffusion: each noisy block sees the clean earlier blocks and itself, never its own clean tokens;
   bidirectional / masked LM: `x_t` alone). It never sees the clean tokens of the masked positions;
2. at every masked response position it proposes a token — the argmax (`on_policy_draft="argmax"`)
   or a sample from the softmax at temperature 1 (`"sample"`), never the mask token or a special
   token — with its probability `p`;
3. the masked positions with `p > on_policy_confidence` (strict, as the decoder's M2T rule) are
   written with the proposal: one S-mode step (the S preset commits masks at `p > 0.5`). With
   `on_policy_confidence=0.0` every masked position is drafted; the others stay masked.

The training forward then sees that draft and the objective scores every position by what it saw
(`dllm_edit.trainers.objective`): a drafted position whose draft is wrong is an *editing* position
(T2T on a real mistake, weight `λ_edit`), a right draft a *clean* one (`λ_clean`), a position left
masked a *drafting* one (M2T, its example's `1/t` weight). The draft is a LongTensor of token ids,
so no gradient can flow through it.

Cost: one extra forward without gradient, over the on-policy examples only (the block-diffusion
form runs `[x_0 ⊕ x_t]`, as the training forward does). A forward is roughly a third of a training
forward + backward (a quarter with gradient checkpointing, which recomputes the forward), so
`on_policy_rate=r` adds about `r / 3` to the compute of a step; activations are not kept.

All randomness (which examples, the samples) comes from each example's own noise generator
(`dllm_edit.trainers.example_noise`), drawn after its corruption noise, so `on_policy_rate=0`
reproduces the noise of a run without the stream, a resumed run drafts what an uninterrupted one
does (the draft is a function of the weights), and the draws do not depend on the process count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dllm_edit.kernels import candidates

ON_POLICY_DRAFTS = ("argmax", "sample")


def check_on_policy_fields(rate: Any, warmup_steps: Any, draft: Any, confidence: Any) -> None:
    """Raise a ValueError / TypeError naming the field, the constraint, the value and the fix.

    Examples:
        >>> check_on_policy_fields(0.5, 0, "argmax", 0.5)
        >>> check_on_policy_fields(1.5, 0, "argmax", 0.5)
        Traceback (most recent call last):
        ...
        ValueError: `on_policy_rate` must lie in [0, 1], got 1.5: it is the fraction of examples whose masked positions are drafted by the model (e.g. 0.5).
    """  # noqa: E501
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise ValueError(
            f"`on_policy_rate` must lie in [0, 1], got {rate!r}: it is the fraction of examples whose masked "
            "positions are drafted by the model (e.g. 0.5)."
        )
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(
            f"`on_policy_warmup_steps` must be an int >= 0, got {warmup_steps!r}: the optimizer steps "
            "trained on ordinary noise before the model's drafts are used (e.g. 100)."
        )
    if draft not in ON_POLICY_DRAFTS:
        raise ValueError(f"`on_policy_draft` must be one of {list(ON_POLICY_DRAFTS)}, got {draft!r}.")
    number = isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
    if not number or not 0.0 <= confidence < 1.0:
        raise ValueError(
            f"`on_policy_confidence` must lie in [0, 1), got {confidence!r}: masked positions whose draft "
            "probability is above it are drafted (0.5 = one S-mode step, 0.0 = every masked position)."
        )


@dataclass(frozen=True)
class OnPolicyDraft:
    """A batch after the draft pass.

    Attributes:
        noisy: LongTensor `[B, T]`, the training input: `x_t` with the drafted positions written.
        drafted: BoolTensor `[B, T]`, positions written by the draft (masked in `x_t`).
        rows: BoolTensor `[B]`, the on-policy examples.
    """

    noisy: torch.Tensor
    drafted: torch.Tensor
    rows: torch.Tensor


def choose_rows(generators: Sequence[torch.Generator], rate: float, device: torch.device) -> torch.Tensor:
    """BoolTensor `[B]` on `device`: each example is on-policy with probability `rate`, drawn from its
    own generator (one per example, as `example_noise.noise_generators` gives them)."""
    draw = torch.stack([torch.rand((), generator=g, device=g.device).cpu() for g in generators])  # [B]
    return (draw < rate).to(device)


@torch.no_grad()
def draft_masked(
    forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    model: Any,
    noisy: torch.Tensor,
    clean: torch.Tensor,
    valid: torch.Tensor,
    response: torch.Tensor,
    rows: torch.Tensor,
    *,
    mask_token_id: int,
    draft: str = "argmax",
    confidence: float = 0.5,
    suppress_ids: tuple[int, ...] = (),
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> OnPolicyDraft:
    """Fill the masked response positions of the `rows` examples with the model's own draft.

    Args:
        forward: a `DiffusionForward` (or any callable `(noisy, clean, valid) -> [b, T, V]` logits).
        model: the model `forward` runs, put in eval mode for the draft and restored afterwards.
        noisy: LongTensor `[B, T]`, the corrupted input `x_t`.
        clean: LongTensor `[B, T]`, `x_0`; only the block-diffusion form reads it, as the clean
            *earlier* blocks each noisy block attends to (never a position's own block).
        valid: BoolTensor `[B, T]`, non-padding positions.
        response: BoolTensor `[B, T]`, the supervised positions (only those are drafted).
        rows: BoolTensor `[B]`, the examples to draft; the others are returned unchanged and do not
            enter the draft forward.
        mask_token_id: the mask token.
        draft: `"argmax"` or `"sample"` (temperature 1).
        confidence: draft a masked position only where its proposal's probability is `> confidence`.
        suppress_ids: ids never drafted (the mask token and the special tokens).
        generator: the sampling noise (`draft="sample"`): one generator, or one per example of the
            batch (each drafted row then samples with its own).

    Returns:
        An `OnPolicyDraft`.

    Examples:
        >>> import torch
        >>> logits = torch.tensor([[[0.0, 5.0, 0.0], [0.0, 0.0, 1.0]]])  # [1, 2, 3]: token 1 sure, 2 unsure
        >>> out = draft_masked(lambda n, c, v: logits[: n.shape[0]], torch.nn.Identity(),
        ...     noisy=torch.tensor([[0, 0]]), clean=torch.tensor([[1, 1]]),
        ...     valid=torch.ones(1, 2, dtype=torch.bool), response=torch.ones(1, 2, dtype=torch.bool),
        ...     rows=torch.tensor([True]), mask_token_id=0, confidence=0.5)
        >>> out.noisy.tolist(), out.drafted.tolist()  # only the confident position is drafted
        ([[1, 0]], [[True, False]])
    """
    if draft not in ON_POLICY_DRAFTS:
        raise ValueError(f"`draft` must be one of {list(ON_POLICY_DRAFTS)}, got {draft!r}.")
    index = rows.nonzero().flatten()  # [R]
    drafted = torch.zeros_like(noisy, dtype=torch.bool)  # [B, T]
    if index.numel() == 0:
        return OnPolicyDraft(noisy=noisy, drafted=drafted, rows=rows)
    sub_noisy = noisy.index_select(0, index)  # [R, T]
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        logits = forward(sub_noisy, clean.index_select(0, index), valid.index_select(0, index))  # [R, T, V]
    finally:
        model.train(was_training)
    temperature = 1.0 if draft == "sample" else 0.0
    if temperature > 0 and isinstance(generator, Sequence):  # each example samples with its own
        pairs = [
            candidates(
                logits[i].float(), temperature=1.0, generator=generator[row], suppress_ids=suppress_ids
            )
            for i, row in enumerate(index.tolist())
        ]
        tokens = torch.stack([t for t, _ in pairs])  # [R, T]
        probs = torch.stack([p for _, p in pairs])  # [R, T]
    else:
        single = None if isinstance(generator, Sequence) else generator
        tokens, probs = candidates(
            logits.float(), temperature=temperature, generator=single, suppress_ids=suppress_ids
        )  # [R, T], [R, T]
    masked = (sub_noisy == mask_token_id) & response.index_select(0, index)  # [R, T]
    fill = masked & (probs.to(masked.device) > confidence)  # [R, T]
    sub_new = torch.where(fill, tokens.to(noisy.device), sub_noisy)  # [R, T]
    drafted = drafted.index_copy(0, index, fill)  # [B, T]
    return OnPolicyDraft(noisy=noisy.index_copy(0, index, sub_new), drafted=drafted, rows=rows)
