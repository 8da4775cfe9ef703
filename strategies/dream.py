"""Dream's unmasking orders (`diffusion_generate`, Ye et al., arXiv 2508.15487): how many masks a step
fills from the timestep schedule, and which ones by `alg`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .base import StepContext, StepResult, Strategy
from .unmask import rank_descending

#: Dream's `alg` values: `origin` (each mask independently with probability 1 - s/t), and three
#: confidence orders (`maskgit_plus`: top-1 probability, `topk_margin`: top-1 minus top-2,
#: `entropy`: minus the entropy).
DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")


@functools.lru_cache(maxsize=16)
def _timestep_table(size: int, eps: float, device: torch.device) -> torch.Tensor:
    """FloatTensor `[size + 1, size + 1]`: row `n` is `torch.linspace(1, eps, n + 1)`, zero-padded.

    Built with `torch.linspace` itself so the values are the reference's bit for bit on this device.
    """
    table = torch.zeros(size + 1, size + 1, device=device)
    for n in range(1, size + 1):
        table[n, : n + 1] = torch.linspace(1, eps, n + 1, device=device)
    return table


def dream_fraction(steps: int | torch.Tensor, step: torch.Tensor, eps: float, size: int) -> torch.Tensor:
    """`1 - s / t` of Dream's schedule at each row's step, `t, s` = `linspace(1, eps, steps + 1)[j : j + 2]`.

    Args:
        steps: the number of steps, an int or a LongTensor `[B]` (per row, each in `[1, size]`).
        step: LongTensor `[B]`, the step `j` (clamped to `steps - 1`).
        eps: the final timestep.
        size: the largest per-row `steps` (the width of the table).

    Returns:
        FloatTensor `[B]` (float32, as the reference computes it).

    Examples:
        >>> import torch
        >>> [round(v, 4) for v in dream_fraction(4, torch.tensor([0, 3]), 1e-3, 4).tolist()]
        [0.2498, 0.996]
    """
    if isinstance(steps, int):
        ts = torch.linspace(1, eps, steps + 1, device=step.device)  # [steps + 1]
        j = step.clamp(max=steps - 1)  # [B]
        return 1 - ts[j + 1] / ts[j]  # [B]
    table = _timestep_table(size, eps, step.device)  # [size + 1, size + 1]
    j = torch.minimum(step, steps - 1)  # [B]
    return 1 - table[steps, j + 1] / table[steps, j]  # [B]


def dream_confidence(ctx: StepContext, alg: str) -> torch.Tensor:
    """FloatTensor `[B, S]`: Dream's confidence for `alg` (larger is committed first)."""
    if alg == "topk_margin":
        if ctx.top_probs is None or ctx.second_probs is None:
            raise ValueError(
                "alg='topk_margin' needs StepContext.top_probs/second_probs (needs_stats 'second')."
            )
        return ctx.top_probs - ctx.second_probs  # [B, S]
    if alg == "entropy":
        if ctx.entropy is None:
            raise ValueError("alg='entropy' needs StepContext.entropy (needs_stats 'entropy').")
        return -ctx.entropy  # [B, S]
    return ctx.cand_probs  # [B, S] maskgit_plus


@dataclass(frozen=True)
class DreamUnmask(Strategy):
    """Dream's `diffusion_generate` unmasking, applied to each block.

    With timesteps `t_j = linspace(1, eps, steps + 1)[j]`, step `j` of a block holding `m` masks
    fills `k_j = floor(m * (1 - t_{j+1} / t_j))` of them, and all the rest at the last step
    (`j = steps - 1`), so a block takes exactly `steps` forwards (a step may fill none). Which ones:

    * `alg="origin"`: each mask independently with probability `1 - t_{j+1} / t_j` (1 at the last
      step), drawn from `ctx.generator`;
    * otherwise the `k_j` masks of highest confidence `c` (`maskgit_plus`: the candidate's
      probability; `topk_margin`: top-1 minus top-2 probability; `entropy`: minus the entropy),
      ties to the lower slot; with `alg_temp > 0`, `k_j` masks drawn without replacement from
      `softmax(c / alg_temp)` (`torch.multinomial`'s draw: the top-`k_j` of `p / E`, `E ~ Exp(1)`
      from `ctx.generator`).

    Matches `Dream-org/Dream-v0-*-7B:generation_utils.py` `DreamGenerationMixin._sample`, as copied
    in `ZHZisZZ/dllm:dllm/pipelines/dream/models/generation_utils.py` (@ca17675) and
    `NVlabs/Fast-dLLM:dream/model/generation_utils.py` (@24cc59e), which decode the whole
    completion as one block: `block_length = max_new_tokens` reproduces it. Differences: the
    reference counts the masks of the whole batch divided by its size (equal to each row's count
    when every row has the same number of new tokens, as in Dream); here each row counts its own.
    The reference draws from the global RNG (only at masked slots for `origin`, over the canvas for
    `alg_temp`); here from `ctx.generator`, one draw per slot of the span. `torch.multinomial`
    raises when fewer masks than `k_j` have a non-zero probability; here they are taken by slot.

    Args:
        alg: one of `DREAM_ALGS` (default `"entropy"`, Dream's README setting; its code defaults to
            `"origin"`).
        alg_temp: None or 0: deterministic top-`k_j`; > 0: sample positions (not with `origin`).
        steps: forwards per block (>= 1); None: the block's masks at its first step (one token per
            step on average: Dream's `steps = max_new_tokens` setting).
        eps: the final timestep, in (0, 1) (default 1e-3, Dream's).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import DreamUnmask, StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9, 9]]), masked=torch.ones(1, 4, dtype=torch.bool),
        ...     editable=torch.zeros(1, 4, dtype=torch.bool), in_block=torch.ones(4, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3, 4]]), cand_probs=torch.tensor([[0.5, 0.9, 0.8, 0.1]]),
        ...     step=torch.tensor([1]), block_index=0, active=torch.tensor([True]))
        >>> # steps=4, j=1: floor(4 * (1 - 0.5005 / 0.75025)) = 1, the most confident
        >>> DreamUnmask(alg="maskgit_plus", steps=4).step(ctx).commit.tolist()
        [[False, True, False, False]]
        >>> DreamUnmask(alg="maskgit_plus", steps=2).step(ctx).commit.tolist()  # the last step: all
        [[True, True, True, True]]
    """

    alg: str = "entropy"
    alg_temp: float | None = None
    steps: int | None = None
    eps: float = 1e-3

    unmasks = True
    sweep = ("steps", (None, 16, 8, 4))

    def __post_init__(self) -> None:
        if self.alg not in DREAM_ALGS:
            raise ValueError(
                f"`alg` must be one of {list(DREAM_ALGS)} (Dream's unmasking orders), got {self.alg!r}."
            )
        t = self.alg_temp
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise TypeError(f"`alg_temp` must be None or a float >= 0, got {type(t).__name__} {t!r}.")
            if not (t >= 0) or t == float("inf"):
                raise ValueError(
                    f"`alg_temp` must be None, 0 (deterministic) or a finite float > 0 (sampled order), "
                    f"got {t!r}."
                )
            object.__setattr__(self, "alg_temp", float(t))
            if t > 0 and self.alg == "origin":
                raise ValueError(
                    f"`alg_temp`={t} has no effect with alg='origin' (each mask is drawn independently); "
                    "use a confidence order (alg='maskgit_plus', 'topk_margin' or 'entropy') "
                    "or alg_temp=None."
                )
        if self.steps is not None and (
            isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1
        ):
            raise ValueError(
                f"`steps` must be None (one per mask) or an int >= 1 (forwards per block), "
                f"got {self.steps!r}."
            )
        e = self.eps
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not (0 < e < 1):
            raise ValueError(
                f"`eps` must be a float in (0, 1) (Dream's final timestep, 1e-3 by default), got {e!r}."
            )
        object.__setattr__(self, "eps", float(e))

    @property
    def needs_stats(self) -> frozenset[str]:
        return {"topk_margin": frozenset({"second"}), "entropy": frozenset({"entropy"})}.get(
            self.alg, frozenset()
        )

    @property
    def extra_forwards_per_block(self) -> int:
        """A block takes exactly `steps` forwards, possibly more than its masks."""
        return self.steps or 0

    @property
    def progress_every_step(self) -> bool:
        """False: the schedule can fill no mask at a step (e.g. the first of `steps = masks`: floor(n *
        (1 - eps) / n) = 0); the block still ends after `steps` forwards."""
        return False

    @property
    def batch_independent(self) -> bool:
        """False for the drawn orders (`origin`, `alg_temp > 0`): the draws cover the batch's `[B, S]`."""
        return self.alg != "origin" and not self.alg_temp

    def step(self, ctx: StepContext) -> StepResult:
        masked = ctx.masked & ctx.in_block  # [B, S]
        if self.steps is None:
            if ctx.block_masked is None:
                raise ValueError(
                    "DreamUnmask(steps=None) needs StepContext.block_masked; the decoding loop sets it."
                )
            width = ctx.masked.shape[-1]
            steps: int | torch.Tensor = ctx.block_masked.clamp(1, width)  # [B]
            last = ctx.step >= ctx.block_masked - 1  # [B]
        else:
            steps, width = self.steps, self.steps
            last = ctx.step >= self.steps - 1  # [B]
        frac = dream_fraction(steps, ctx.step, self.eps, width)  # [B]
        if self.alg == "origin":
            u = torch.rand(masked.shape, generator=ctx.generator, device=masked.device)  # [B, S]
            commit = masked & ((u < frac[:, None]) | last[:, None])  # [B, S]
            return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)
        m = masked.sum(-1)  # [B]
        k = torch.where(last, m, (m.to(torch.float32) * frac).floor().long())  # [B]
        conf = dream_confidence(ctx, self.alg)  # [B, S]
        neg = torch.full_like(conf, -float("inf"))  # [B, S]
        if self.alg_temp:
            p = torch.softmax(torch.where(masked, conf / self.alg_temp, neg), dim=-1)  # [B, S]
            e = torch.empty_like(p).exponential_(1, generator=ctx.generator)  # [B, S]
            scores = torch.where(masked, p / e, neg)  # [B, S]
        else:
            scores = torch.where(masked, conf, neg)  # [B, S]
        commit = masked & (rank_descending(scores) < k[:, None])  # [B, S]
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)
