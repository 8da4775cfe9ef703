"""Cookbook: threshold schedules, a cosine τ_mask over the steps of a block and a per-block τ_edit.

Prints each schedule's values, then decodes the same held-out prompts with constant thresholds
(the S and Q presets) and with schedules, reporting exact match, tokens per forward, edits and, from
the step trace, how many tokens each step of a block unmasks on average. Offline on the CPU, with a
small model trained for a few seconds (`--tiny`: a tiny random model, CI).

    python examples/threshold_schedules.py          # ~30 s on a 2-core CPU (training included)
    python examples/threshold_schedules.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from cookbook_models import BLOCK_LENGTH, char_tokenizer, exact_match, held_out, small_model

import dllm_edit
from dllm_edit.strategies import Cosine, Linear, Stepwise

# τ_mask: cautious on the first step of a block (0.9), down to the S value (0.5) by step 4
COSINE_MASK = Cosine(start=0.9, end=0.5, num_steps=4)  # over="step" (the default)
# τ_edit per block: strict (0.9) in the first block of the completion, the Q value (0.5) afterwards
STEPWISE_EDIT = Stepwise(values=(0.9, 0.5), boundaries=(1,), over="block")
# τ_edit per block: from the Q value (0.5) to the S value (0.0, edit whenever the argmax differs)
LINEAR_EDIT = Linear(start=0.5, end=0.0, num_steps=2, over="block")


def unmasked_per_step(out: dllm_edit.EditGenerationOutput, steps: int = 4) -> list[float]:
    """Mean tokens unmasked by an active row at step 0, 1, ... of a block (from `out.trace`)."""
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])  # step -> [commits, active rows]
    step_in_block, last_block = 0, None
    for record in out.trace:
        step_in_block = step_in_block + 1 if record.block == last_block else 0
        last_block = record.block
        totals[step_in_block][0] += record.commit.sum().item()
        totals[step_in_block][1] += record.active.sum().item()
    return [round(totals[s][0] / totals[s][1], 2) if totals[s][1] else 0.0 for s in range(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    args = parser.parse_args()

    steps, blocks = torch.arange(6), torch.zeros(6, dtype=torch.long)
    print(f"cosine τ_mask at steps 0-5:   {[round(v, 3) for v in COSINE_MASK(steps).tolist()]}")
    for name, schedule in (("stepwise", STEPWISE_EDIT), ("linear", LINEAR_EDIT)):
        values = [round(schedule(blocks[:1], block_index=b).item(), 3) for b in range(4)]
        print(f"{name} τ_edit at blocks 0-3: {values}")

    tokenizer = char_tokenizer()
    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    rows = held_out(8 if args.tiny else 128)
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    speedy = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK_LENGTH)
    quality = dllm_edit.EditGenerationConfig.from_mode(
        "quality", max_new_tokens=16, block_length=BLOCK_LENGTH
    )
    configs = {
        "S (constant)": speedy,
        "Q (constant)": quality,
        "cosine τ_mask, stepwise τ_edit": quality.replace(
            threshold=COSINE_MASK, editing_threshold=STEPWISE_EDIT
        ),
        "Q τ_mask, linear τ_edit": quality.replace(editing_threshold=LINEAR_EDIT),
    }
    for name, cfg in configs.items():
        out = dllm_edit.generate(
            model,
            enc["input_ids"],
            attention_mask=enc["attention_mask"],
            generation_config=cfg,
            tokenizer=tokenizer,
            output_trace=True,  # record every step, to count unmasked tokens per step
        )
        texts = tokenizer.batch_decode(
            out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        print(
            f"{name:>30}: exact match {exact_match(texts, rows):.2f}  "
            f"tokens/forward {out.tokens_per_forward.mean().item():.2f}  edits {out.num_edits.sum().item()}  "
            f"unmasked at steps 0-3 {unmasked_per_step(out)}"
        )


if __name__ == "__main__":
    main()
