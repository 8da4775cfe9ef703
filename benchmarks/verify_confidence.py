"""Why does a model not edit? How sure it is of its own tokens at the last verification forward.

T2T editing rewrites a written token when the model's argmax there differs from it (S preset:
`editing_threshold=0.0`, any disagreement) or is confident enough (Q preset). A model that copies
whatever it sees never disagrees with its own draft, right or wrong, so it never edits. This script
decodes held-out synthetic prompts one at a time with `output_trace=True`, takes the last
verification step (no mask left) of each row's first block, and reports the probability the model
gives to the candidate at each completion position — on the positions the draft got wrong and on
those it got right — with the share of positions where the candidate is the token already there.

The verification forward only shows what the model thinks of a finished draft. What T2T does to
the draft is the second table: every completion position's **draft** (the token first written there,
by M2T) is followed through the whole decode — whether an edit rewrote it later (at any step, while
masks remained or in a verification forward), and whether the final token is the reference one.
"Rewritten" over the wrong drafts is the share of its own mistakes the model revisits; "repaired"
the share it fixes; "broken" the share of right drafts an edit made wrong.

The third table asks whether the model reads the rest of the answer at all (`context_use`): on the
reference answers, teacher-forced, how often its argmax is right at an answer position with nothing
of the answer revealed (what a one-forward parallel draft sees), with half of it revealed, and with
all of it but that position revealed (the best case of a T2T rewrite: every other token right). A
model whose accuracy barely rises with the revealed answer has little that editing can use.

    python benchmarks/verify_confidence.py --model runs/default-model-v4
    python benchmarks/verify_confidence.py --model runs/default-model --families sort --prompts 40
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import torch

import dllm_edit
from dllm_edit.data.builtin import builtin_rows
from dllm_edit.generation import generate

BLOCK = 32


@dataclass(frozen=True)
class TracedRow:
    """One prompt's decode with its trace: row `row` of a (left-padded) batch.

    Trace steps index the shared canvas, where each row is laid out as it would be alone, shifted by
    whole blocks (`dllm_edit.layout`); `start` is the canvas slot of the row's first completion
    token, `width` the padded prompt width that `out.completions` takes.
    """

    out: Any  # EditGenerationOutput with `trace`, shared by the rows of one batch
    start: int  # canvas slot of completion token 0 in the trace
    width: int  # the padded width W of the batch's input_ids
    target: list[int]  # the reference completion's ids, then EOS
    row: int = 0


def decode_traced(model, tokenizer, row: dict, config) -> TracedRow:
    """Decode one prompt alone with `output_trace=True`."""
    return decode_traced_batch(model, tokenizer, [row], config, batch=1)[0]


def decode_traced_batch(model, tokenizer, rows: list[dict], config, batch: int) -> list[TracedRow]:
    """Decode `rows` in left-padded batches of `batch` with `output_trace=True`, one `TracedRow` each.

    The same decode as `dllm_edit.evaluation.decode_prompts` (same padding and batches), so its
    texts and tokens per forward (`completion_text`, `out.tokens_per_forward`) and the drafts
    followed through its trace describe one run.
    """
    from dllm_edit.adapters import resolve_adapter
    from dllm_edit.layout import build_canvas

    block_start = resolve_adapter(model, None).resolve_block_start(config.block_start)
    traced = []
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        enc = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True, padding_side="left")
        out = generate(
            model,
            enc["input_ids"],
            attention_mask=enc["attention_mask"],
            generation_config=config,
            tokenizer=tokenizer,
            return_dict_in_generate=True,
            output_trace=True,
        )
        layout, _ = build_canvas(
            enc["input_ids"],
            enc["attention_mask"],
            config.block_length,
            config.max_new_tokens,
            tokenizer.mask_token_id,
            tokenizer.pad_token_id,
            block_start,
        )
        starts = layout.output_index[:, 0].tolist()  # [B] canvas slot of each completion's first token
        for k, r in enumerate(chunk):
            target = tokenizer(r["completion"])["input_ids"] + [tokenizer.eos_token_id]
            traced.append(
                TracedRow(out=out, start=starts[k], width=enc["input_ids"].shape[1], target=target, row=k)
            )
    return traced


def completion_text(traced: TracedRow, tokenizer) -> str:
    """The decoded completion of one traced row, up to its EOS (as `decode_prompts` returns it)."""
    completion = traced.out.completions(traced.width)[traced.row]
    return tokenizer.decode(completion, skip_special_tokens=True)


def verify_step_scores(traced: TracedRow) -> list[tuple[bool, float, bool]]:
    """(draft right at this position, candidate probability, candidate = current token) per position,
    at the last verification step (no mask left) of the first block."""
    out, target, b = traced.out, traced.target, traced.row
    verify = [step for step in out.trace if bool(step.active[b]) and not bool(step.masked[b].any())]
    if not verify:
        return []
    last = [step for step in verify if step.block == verify[0].block][-1]  # the first block's last verify
    scores = []
    for k, wanted in enumerate(target):
        slot = traced.start + k - last.span_start  # position in the step's span
        if not 0 <= slot < last.before.shape[1]:
            continue
        written = int(last.before[b, slot])
        kept = not bool(last.edit[b, slot])
        scores.append((written == wanted, float(last.probs[b, slot]), kept))
    return scores


def draft_fates(traced: TracedRow) -> list[tuple[bool, bool, bool]]:
    """(draft right, rewritten later by an edit, final token right) per reference completion position.

    The draft is the token M2T first wrote at the position; an edit is any later T2T (or multi-block)
    rewrite of it, in any step of the decode. Positions never written (decoding stopped at an earlier
    EOS) are skipped. Host-side bookkeeping over the trace: a benchmark, not a decoding step.
    """
    draft: dict[int, int] = {}  # canvas slot -> first written token
    rewritten: set[int] = set()
    final: dict[int, int] = {}
    b = traced.row
    for step in traced.out.trace:
        if not bool(step.active[b]):
            continue
        commit, edit, after = step.commit[b].tolist(), step.edit[b].tolist(), step.after[b].tolist()
        for j, token in enumerate(after):
            slot = step.span_start + j
            if commit[j] and slot not in draft:
                draft[slot] = token
            if edit[j] and slot in draft:
                rewritten.add(slot)
            if slot in draft:
                final[slot] = token
    fates = []
    for k, wanted in enumerate(traced.target):
        slot = traced.start + k
        if slot in draft:
            fates.append((draft[slot] == wanted, slot in rewritten, final[slot] == wanted))
    return fates


def training_forward(model):
    """The model's training-form forward (block diffusion, or the form its declared adapter names,
    e.g. shifted): the teacher-forced views below read what decoding reads."""
    from dllm_edit.trainers import DiffusionForward, resolve_attention_form

    return DiffusionForward(model, resolve_attention_form(model, "auto"), BLOCK)


@torch.no_grad()
def masked_alone(model, traced: TracedRow, tokenizer) -> list[tuple[bool, bool]]:
    """The headroom of editing: at each wrong final token, what the model predicts with that position
    alone masked and everything else as decoded — (argmax = reference token, argmax = its own token).

    A model whose T2T proposal at a written position followed this masked view would rewrite the
    wrong tokens where the second is False; where the first is True the rewrite would repair.
    """
    if traced.out.sequences.shape[0] != 1:
        raise ValueError("masked_alone re-runs the row unpadded: decode it alone (decode_traced)")
    prompt_length, target = traced.width, traced.target  # a row decoded alone: no padding
    sequence = traced.out.sequences[0]  # [W + G]
    width = -(-(prompt_length + len(target)) // BLOCK) * BLOCK
    clean = torch.full((1, width), tokenizer.eos_token_id)  # [1, width]: EOS to the block end, as decoded
    end = min(width, sequence.shape[0])
    clean[0, :end] = sequence[:end]
    after_eos = clean[0, prompt_length:] == tokenizer.pad_token_id  # the output pads after its first EOS
    clean[0, prompt_length:][after_eos] = tokenizer.eos_token_id
    valid = torch.ones_like(clean, dtype=torch.bool)
    forward = training_forward(model)
    out = []
    for k, wanted in enumerate(target):
        position = prompt_length + k
        own = int(clean[0, position])
        if own == wanted:
            continue
        noisy = clean.clone()
        noisy[0, position] = tokenizer.mask_token_id
        guess = int(forward(noisy, clean, valid)[0, position].argmax())
        out.append((guess == wanted, guess == own))
    return out


CONTEXT_VIEWS = ("nothing", "half", "all but the position")


@torch.no_grad()
def context_use(
    model, tokenizer, rows: list[dict], generator: torch.Generator
) -> dict[str, tuple[int, float]]:
    """view -> (answer positions scored, % where the argmax is the reference token), teacher-forced.

    Each row is laid out as in training and decoding: prompt, reference completion, EOS to the end of
    its block; only the completion's own tokens are scored (not the EOS tail). Views (`CONTEXT_VIEWS`):
    the whole completion and tail masked; each completion position masked with probability 1/2 (the
    scored ones; `generator` draws them); each completion position masked alone.
    """
    forward = training_forward(model)
    hits: dict[str, list[bool]] = {view: [] for view in CONTEXT_VIEWS}
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"]
        answer = tokenizer(row["completion"])["input_ids"]
        width = -(-(len(prompt) + len(answer) + 1) // BLOCK) * BLOCK
        clean = torch.tensor(
            [prompt + answer + [tokenizer.eos_token_id] * (width - len(prompt) - len(answer))]
        )
        valid = torch.ones_like(clean, dtype=torch.bool)  # [1, width]
        span = torch.arange(len(prompt), len(prompt) + len(answer))  # the completion's positions
        half = span[torch.rand(len(answer), generator=generator) < 0.5]
        views = {"nothing": [torch.arange(len(prompt), width)], "half": [half] if len(half) else []}
        views["all but the position"] = [span[k : k + 1] for k in range(len(answer))]
        for view, masks in views.items():
            for masked in masks:
                noisy = clean.clone()
                noisy[0, masked] = tokenizer.mask_token_id
                guess = forward(noisy, clean, valid)[0].argmax(-1)  # [width]
                scored = masked[masked < len(prompt) + len(answer)]
                hits[view].extend((guess[scored] == clean[0, scored]).tolist())
    return {view: (len(h), 100 * statistics.fmean(h) if h else float("nan")) for view, h in hits.items()}


def fate_table(fates: list[tuple[bool, bool, bool]]) -> dict[str, float]:
    """Counts and shares (%) of `draft_fates` rows: wrong drafts rewritten / repaired, right drafts broken."""
    wrong = [(rewritten, final) for right, rewritten, final in fates if not right]
    right = [final for is_right, _, final in fates if is_right]
    share = lambda xs: 100 * statistics.fmean(xs) if xs else float("nan")  # noqa: E731
    return {
        "wrong_drafts": len(wrong),
        "rewritten": share([r for r, _ in wrong]),
        "repaired": share([f for _, f in wrong]),
        "right_drafts": len(right),
        "broken": share([not f for f in right]),
    }


def summary(values: list[float]) -> str:
    if not values:
        return "— | — | —"
    share = 100 * statistics.fmean(v > 0.9 for v in values)
    return f"{len(values)} | {statistics.median(values):.3f} | {share:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder (default: the shipped model)")
    parser.add_argument(
        "--prompts", type=int, default=120, help="held-out synthetic prompts, the families interleaved"
    )
    parser.add_argument("--families", nargs="+", default=None, help="only these synthetic families")
    parser.add_argument("--mode", default="speedy", choices=["speedy", "quality"], help="the decoding preset")
    args = parser.parse_args()
    if args.model is None:
        model, tokenizer = dllm_edit.load_default()
    else:
        from dllm_edit.cli.loading import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(args.model)
        model.eval()
    rows = [r for r in builtin_rows("dllm_edit:default_mix", "test") if r["kind"] == "synthetic"]
    if args.families:
        unknown = sorted(set(args.families) - {r["family"] for r in rows})
        if unknown:
            parser.error(f"--families {unknown} are not in the built-in mix")
        rows = [r for r in rows if r["family"] in args.families]
    by_family: dict[str, list[dict]] = {}
    for row in rows:
        by_family.setdefault(row["family"], []).append(row)
    rows = [r for group in zip(*by_family.values(), strict=False) for r in group][
        : args.prompts
    ]  # interleaved
    config = dllm_edit.EditGenerationConfig.from_mode(args.mode, max_new_tokens=16, block_length=BLOCK)
    wrong, right, kept_wrong, fates, headroom = [], [], [], [], []
    for row in rows:
        traced = decode_traced(model, tokenizer, row, config)
        fates.extend(draft_fates(traced))
        headroom.extend(masked_alone(model, traced, tokenizer))
        for is_right, prob, kept in verify_step_scores(traced):
            (right if is_right else wrong).append(prob)
            if not is_right:
                kept_wrong.append(kept)
    print(f"{len(rows)} prompts, {args.mode} preset, last verification step of the first block\n")
    print("| draft at the position | positions | median candidate probability | candidate > 0.9 (%) |")
    print("|---|---:|---:|---:|")
    print(f"| wrong | {summary(wrong)} |")
    print(f"| right | {summary(right)} |")
    if kept_wrong:
        print(
            f"\nAt that step the model kept its own wrong token at {100 * statistics.fmean(kept_wrong):.0f}% "
            f"of the {len(kept_wrong)} wrong positions (an edit needs its argmax to differ)."
        )
    table = fate_table(fates)
    print("\nWhat editing did to the draft, over the whole decode (every reference completion position)\n")
    print("| wrong drafts | rewritten (%) | repaired (%) | right drafts | broken (%) |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {table['wrong_drafts']} | {table['rewritten']:.1f} | {table['repaired']:.1f} | "
        f"{table['right_drafts']} | {table['broken']:.1f} |"
    )
    if headroom:
        knows = 100 * statistics.fmean(r for r, _ in headroom)
        differs = 100 * statistics.fmean(not same for _, same in headroom)
        print(
            f"\nHeadroom: at the {len(headroom)} wrong final tokens, with that position alone masked the "
            f"model's argmax is the reference token at {knows:.1f}% and differs from its own token at "
            f"{differs:.1f}% (a T2T proposal that followed the masked view would rewrite those)."
        )
    use = context_use(model, tokenizer, rows, torch.Generator().manual_seed(0))
    print("\nDoes the model read the rest of the answer? Reference answers, teacher-forced\n")
    print("| answer revealed | positions scored | argmax right (%) |")
    print("|---|---:|---:|")
    for view, (count, right) in use.items():
        print(f"| {view} | {count} | {right:.1f} |")


if __name__ == "__main__":
    main()
