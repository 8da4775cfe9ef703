"""Draw a block being drafted and edited, step by step, from a real decoding trace.

Decodes a prompt with `output_trace=True` and prints, for every step of every block, the block's
tokens: `░` for a mask, `[tok]` for a token unmasked at that step (M2T), `{tok}` for a token edited at
that step (T2T). The docs' Concepts → Decoding page shows this diagram for the shipped model.

    python examples/trace_diagram.py                          # the shipped model, S preset
    python examples/trace_diagram.py "def add(a, b):" --mode quality --threshold 0.5
"""

from __future__ import annotations

import argparse

import dllm_edit


def cell(tokenizer, token: int, masked: bool, committed: bool, edited: bool) -> str:
    """How one position is drawn."""
    if masked and not committed:
        return "░"
    text = tokenizer.decode([token]).replace("\n", "⏎").replace(" ", "·") or "∅"
    if edited:
        return "{" + text + "}"
    if committed:
        return "[" + text + "]"
    return text


def diagram(tokenizer, trace, block_length: int, row: int = 0) -> list[str]:
    """One line per step: `block b, step s: <cells>`."""
    lines, step, last_block = [], 0, None
    for record in trace:
        if not bool(record.active[row]):
            continue
        step = 0 if record.block != last_block else step + 1
        last_block = record.block
        start = record.before.shape[1] - block_length  # the active block is the end of the span
        cells = [
            cell(
                tokenizer,
                int(record.after[row, i]),
                bool(record.masked[row, i]),
                bool(record.commit[row, i]),
                bool(record.edit[row, i]),
            )
            for i in range(start, record.before.shape[1])
        ]
        lines.append(f"block {record.block}, step {step:>2}: " + " ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("prompt", nargs="?", default="def fibonacci(n):")
    parser.add_argument("--mode", default="speedy", choices=["speedy", "quality"])
    parser.add_argument("--threshold", type=float, default=None, help="τ_mask override")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()

    model, tokenizer = dllm_edit.load_default()
    overrides = {} if args.threshold is None else {"threshold": args.threshold}
    cfg = dllm_edit.EditGenerationConfig.from_mode(
        args.mode, max_new_tokens=args.max_new_tokens, output_trace=True, **overrides
    )
    ids = tokenizer(args.prompt, return_tensors="pt")["input_ids"]
    out = dllm_edit.generate(model, ids, generation_config=cfg, tokenizer=tokenizer)
    print(f"prompt: {args.prompt!r}  ({args.mode}, τ_mask {cfg.threshold}, τ_edit {cfg.editing_threshold})")
    print("\n".join(diagram(tokenizer, out.trace, int(cfg.block_length))))
    completion = out.sequences[0, ids.shape[1] :]
    print(f"result: {args.prompt}{tokenizer.decode(completion, skip_special_tokens=True)!r}")
    print(
        f"{int(out.num_forwards[0])} forwards, {float(out.tokens_per_forward[0]):.2f} tokens/forward, "
        f"{int(out.num_edits[0])} edits"
    )


if __name__ == "__main__":
    main()
