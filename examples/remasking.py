"""Cookbook: low-confidence remasking, a training-free strategy composed with M2T and T2T.

Decodes the same held-out prompts with the S preset, then with the S preset plus
`LowConfidenceRemask` (written tokens whose candidate probability, or with `score="current"` their
own probability, is below τ_remask go back to the mask and are redrafted, at most `max_steps` steps
per block), reporting exact match, tokens per forward, T2T edits and remasks (counted from the step
trace). Offline on the CPU, with a small model trained for a few seconds (`--tiny`: a tiny random
model, CI).

    python examples/remasking.py          # ~30 s on a 2-core CPU (training included)
    python examples/remasking.py --tiny   # seconds (CI)
"""

from __future__ import annotations

import argparse

from cookbook_models import BLOCK_LENGTH, char_tokenizer, exact_match, held_out, small_model

import dllm_edit
from dllm_edit.strategies import LowConfidenceRemask


def count_writes(out: dllm_edit.EditGenerationOutput, mask_token_id: int) -> tuple[int, int]:
    """(T2T edits, remasks) over the whole run, from the step trace: a remask is an edit writing the mask."""
    edits = remasks = 0
    for record in out.trace:
        remasked = record.edit & (record.after == mask_token_id)  # [B, S]
        remasks += int(remasked.sum())
        edits += int((record.edit & ~remasked).sum())
    return edits, remasks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="tiny random model (CI)")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps of the small CPU model")
    args = parser.parse_args()

    tokenizer = char_tokenizer()
    model = small_model(tokenizer, tiny=args.tiny, steps=args.steps)
    rows = held_out(8 if args.tiny else 128)
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    speedy = dllm_edit.EditGenerationConfig.from_mode("speedy", max_new_tokens=16, block_length=BLOCK_LENGTH)
    configs = {"S": speedy}
    for tau in (0.3, 0.6):
        # the S strategies (ThresholdUnmask, TokenEdit), then remasking: last in the list, so it wins
        # where T2T and remasking pick the same position (the token is redrafted, not rewritten)
        for score, label in (("candidate", ""), ("current", " current")):
            # score="current": rank by the written token's own probability (ReMDM), not the candidate's
            remask = LowConfidenceRemask(threshold=tau, max_steps=4, max_per_step=2, score=score)
            configs[f"S + remask{label} {tau}"] = speedy.replace(
                strategies=[*speedy.build_strategies(), remask]
            )
    for name, cfg in configs.items():
        out = dllm_edit.generate(
            model,
            enc["input_ids"],
            attention_mask=enc["attention_mask"],
            generation_config=cfg,
            tokenizer=tokenizer,
            output_trace=True,  # record every step, to count the remasks
        )
        texts = tokenizer.batch_decode(
            out.sequences[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        edits, remasks = count_writes(out, tokenizer.mask_token_id)
        print(
            f"{name:>24}: exact match {exact_match(texts, rows):.2f}  "
            f"tokens/forward {out.tokens_per_forward.mean():.2f}  edits {edits}  remasks {remasks}"
        )


if __name__ == "__main__":
    main()
