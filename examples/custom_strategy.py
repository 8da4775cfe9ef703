"""Cookbook: write your own decoding strategy, register it, and decode with it.

The strategy is an entropy-bounded unmasking rule: among the masked positions whose candidate
probability is above a threshold, unmask the most confident ones while the sum of their entropies
stays under a budget. A strategy sees only the top candidate's probability `p` at each position
(`StepContext.cand_probs`), not the distribution, so the entropy is replaced by its upper bound
given `p` (see `entropy_bound`). Offline on the CPU, with a small model trained for a few seconds
(`--tiny`: a tiny random model, CI).

    python examples/custom_strategy.py          # ~30 s on a 2-core CPU (training included)
    python examples/custom_strategy.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse
import math
import tempfile
from dataclasses import dataclass

import torch
from cookbook_models import BLOCK_LENGTH, char_tokenizer, exact_match, held_out, small_model

import dllm_edit
from dllm_edit.strategies import Schedule, StepContext, StepResult, Strategy, TokenEdit, as_schedule


def entropy_bound(p: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The largest entropy (nats) of a distribution over `vocab_size` tokens whose top probability is `p`.

    It is reached when the remaining mass `1 - p` is spread evenly over the other tokens:
    `H(p) = -p log p - (1 - p) log((1 - p) / (V - 1))`. Any distribution with top probability `p`
    has entropy <= H(p), so bounding H(p) bounds the true entropy.
    """
    p = p.clamp(0.0, 1.0)
    rest = 1.0 - p
    return -torch.special.xlogy(p, p) - torch.special.xlogy(rest, rest / (vocab_size - 1))


# overwrite=True: re-running the script (or a notebook cell) redefines the class under the same name
@dllm_edit.register_strategy("entropy_bounded", overwrite=True)
@dataclass(frozen=True)
class EntropyBoundedUnmask(Strategy):
    """Unmask confident positions while their summed entropy (upper bound) stays within a budget.

    At each step, masked positions of the active block are ranked by candidate probability; a
    position is unmasked if `p > threshold` and the entropy bounds of it and of every more confident
    masked position sum to at most `entropy_budget`. If nothing qualifies, the most confident masked
    position is unmasked, so every step makes progress.

    Args:
        vocab_size: the model's vocabulary size (for the entropy bound).
        entropy_budget: the largest summed entropy bound (nats) unmasked in one step (> 0).
        threshold: the probability floor (a float in [0, 1] or a `Schedule`).
    """

    vocab_size: int
    entropy_budget: float = 1.0
    threshold: float | Schedule = 0.5

    unmasks = True  # it fills masked positions: a config may use it as its only unmasking strategy

    def __post_init__(self) -> None:
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 2:
            raise ValueError(f"`vocab_size` must be an int >= 2, got {self.vocab_size!r}.")
        budget = self.entropy_budget
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
            raise ValueError(f"`entropy_budget` must be a float > 0 (nats), got {budget!r}.")
        object.__setattr__(self, "threshold", as_schedule(self.threshold, name="threshold"))

    def step(self, ctx: StepContext) -> StepResult:
        masked = ctx.masked & ctx.in_block  # [B, S]
        tau = self.threshold(ctx.step, ctx.block_index)  # [B]
        scores = torch.where(masked, ctx.cand_probs, torch.full_like(ctx.cand_probs, -math.inf))  # [B, S]
        order = torch.argsort(scores, dim=-1, descending=True, stable=True)  # [B, S]
        bound = torch.where(masked, entropy_bound(ctx.cand_probs, self.vocab_size), 0.0)  # [B, S]
        within = bound.gather(-1, order).cumsum(-1) <= self.entropy_budget  # [B, S] in ranked order
        within = torch.zeros_like(masked).scatter(-1, order, within)  # [B, S] back in place
        commit = masked & within & (ctx.cand_probs > tau[:, None])  # [B, S]
        top = torch.zeros_like(masked).scatter(-1, order[:, :1], True) & masked  # [B, S] most confident
        commit = torch.where(commit.any(-1, keepdim=True), commit, top)  # [B, S]
        return StepResult(commit=commit, edit=torch.zeros_like(commit), tokens=ctx.cand_tokens)


def check_on_a_hand_built_context(vocab_size: int) -> None:
    """Unit-test the rule without a model: four masked positions, probabilities 0.99 / 0.9 / 0.8 / 0.3."""
    ctx = StepContext(
        tokens=torch.tensor([[2, 2, 2, 2]]),
        masked=torch.ones(1, 4, dtype=torch.bool),
        editable=torch.zeros(1, 4, dtype=torch.bool),
        in_block=torch.ones(4, dtype=torch.bool),
        cand_tokens=torch.tensor([[5, 6, 7, 8]]),
        cand_probs=torch.tensor([[0.99, 0.9, 0.8, 0.3]]),
        step=torch.tensor([0]),
        block_index=0,
        active=torch.tensor([True]),
    )
    bounds = [round(v, 2) for v in entropy_bound(ctx.cand_probs, vocab_size)[0].tolist()]
    print(f"entropy bounds (nats, V={vocab_size}): {bounds}")
    for budget in (0.1, 1.0, 3.0):
        commit = EntropyBoundedUnmask(vocab_size, entropy_budget=budget, threshold=0.5).step(ctx).commit
        print(f"  budget {budget}: unmask {commit[0].tolist()}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    args = parser.parse_args()

    tokenizer = char_tokenizer()
    vocab_size = len(tokenizer)
    check_on_a_hand_built_context(vocab_size)

    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    rows = held_out(8 if args.tiny else 128)
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    base = dllm_edit.EditGenerationConfig.from_mode("quality", max_new_tokens=16, block_length=BLOCK_LENGTH)
    configs = {
        "Q preset": base,
        # the custom rule replaces ThresholdUnmask; T2T editing as in the Q preset
        "entropy budget 0.5": base.replace(
            strategies=[EntropyBoundedUnmask(vocab_size, entropy_budget=0.5), TokenEdit(threshold=0.5)]
        ),
        "entropy budget 2.0": base.replace(
            strategies=[EntropyBoundedUnmask(vocab_size, entropy_budget=2.0), TokenEdit(threshold=0.5)]
        ),
    }
    for name, cfg in configs.items():
        out = dllm_edit.generate(
            model,
            enc["input_ids"],
            attention_mask=enc["attention_mask"],
            generation_config=cfg,
            tokenizer=tokenizer,
        )
        texts = tokenizer.batch_decode(
            out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        print(
            f"{name:>18}: exact match {exact_match(texts, rows):.2f}  "
            f"tokens/forward {out.tokens_per_forward.mean().item():.2f}  "
            f"forwards/row {out.num_forwards.float().mean().item():.1f}"
        )

    # registered under "entropy_bounded": a config holding it saves and loads like any other
    with tempfile.TemporaryDirectory() as folder:
        configs["entropy budget 0.5"].save_pretrained(folder)
        loaded = dllm_edit.EditGenerationConfig.from_pretrained(folder)
    print(f"reloaded from generation_config.json: {[type(s).__name__ for s in loaded.strategies]}")
    print(f"  as saved: {loaded.strategies[0].to_dict()}")


if __name__ == "__main__":
    main()
