"""An example third-party decoding algorithm, in one file: entropy-threshold unmasking.

It is what a package adds to dllm_edit to ship a new rule: one frozen dataclass written with the
rule toolkit (`dllm_edit.strategies.fields`, `selection`, `Needs`), and one entry point in the
package's metadata:

    [project.entry-points."dllm_edit.strategies"]
    entropy_threshold = "entropy_threshold:EntropyThreshold"

`tests/strategies/test_plugin_algorithm.py` installs it that way into a throw-away site folder and
checks that the registry-wide properties and the comparison harness pick it up with no other edit.
"""

from __future__ import annotations

from dataclasses import dataclass

from dllm_edit.strategies import Needs, StepContext, StepResult, Strategy, fields
from dllm_edit.strategies.selection import confidence, masked_in_block, masked_ranks


@dataclass(frozen=True)
class EntropyThreshold(Strategy):
    """Commit every mask of the active block whose distribution's entropy is at most `max_entropy`
    nats, and always the most certain one (the lowest entropy; ties to the lower slot).

    Args:
        max_entropy: the entropy bound in nats (>= 0; 0 commits one token per step unless a
            distribution is one-hot).

    Examples:
        >>> import torch
        >>> from dllm_edit.strategies import StepContext
        >>> ctx = StepContext(
        ...     tokens=torch.tensor([[9, 9, 9]]), masked=torch.ones(1, 3, dtype=torch.bool),
        ...     editable=torch.zeros(1, 3, dtype=torch.bool), in_block=torch.ones(3, dtype=torch.bool),
        ...     cand_tokens=torch.tensor([[1, 2, 3]]), cand_probs=torch.tensor([[0.9, 0.5, 0.99]]),
        ...     step=torch.tensor([0]), block_index=0, active=torch.tensor([True]),
        ...     entropy=torch.tensor([[0.4, 1.5, 0.1]]))
        >>> EntropyThreshold(max_entropy=0.5).step(ctx).commit.tolist()
        [[True, False, True]]
    """

    max_entropy: float = 0.5

    unmasks = True
    sweep = ("max_entropy", (0.05, 0.2, 0.5, 1.0, 2.0))

    def __post_init__(self) -> None:
        bound = fields.real("EntropyThreshold", "max_entropy", self.max_entropy, minimum=0.0, hint="nats")
        object.__setattr__(self, "max_entropy", bound)

    def requires(self) -> Needs:
        return Needs(stats={"entropy"})

    def step(self, ctx: StepContext) -> StepResult:
        masked = masked_in_block(ctx)  # [B, S]
        rank = masked_ranks(confidence(ctx, "entropy"), masked)  # [B, S] 0: the lowest entropy
        certain = ctx.stat("entropy") <= self.max_entropy  # [B, S]
        return StepResult.unmasking(ctx, masked & (certain | (rank == 0)))
