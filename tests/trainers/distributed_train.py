"""Train EditSFT or EBPO on a tiny model for a few steps; rank 0 writes the logged losses and the weights.

Run by `tests/trainers/test_distributed_training.py` in one process (global batch 2N) and under
`python -m torch.distributed.run --nproc_per_node 2` (N per process, gloo on CPU):

    python tests/trainers/distributed_train.py sft --per-device-batch 8 --out out.pt
    python -m torch.distributed.run --nproc_per_node 2 tests/trainers/distributed_train.py sft \\
        --per-device-batch 4 --out out.pt
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.helpers
from dllm_edit.trainers import EBPOConfig, EBPOTrainer, EditSFTConfig, EditSFTTrainer
from tests.helpers import tiny_llama, tiny_tokenizer

COMMON = dict(
    max_steps=3,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    activation_checkpointing=False,
    use_cpu=True,
    dataloader_num_workers=0,
    disable_tqdm=True,
    seed=0,
    learning_rate=3e-3,
)


def sft_rows(n: int) -> list[dict[str, str]]:
    """Reversal prompts of varied lengths (so batches are padded differently in each layout)."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        words = [f"w{int(w)}" for w in torch.randint(2, 20, (3 + i % 3,), generator=gen)]
        rows.append({"prompt": " ".join(words), "completion": " " + " ".join(reversed(words))})
    return rows


def reward_even_words(completions: list[str], **kwargs: object) -> list[float]:
    return [
        sum(int(w[1:]) % 2 == 0 for w in c.split() if w[1:].isdigit()) / max(1, len(c.split()))
        for c in completions
    ]


def build(kind: str, batch: int, out: Path) -> object:
    model, tokenizer = tiny_llama("sdpa", seed=7), tiny_tokenizer()
    if kind == "sft":
        args = EditSFTConfig(
            output_dir=str(out.parent / "run"),
            block_length=4,
            max_length=32,
            per_device_train_batch_size=batch,
            mtf_turns=2,
            edit_noise_in_context=0.5,
            **COMMON,
        )
        return EditSFTTrainer(
            model, args=args, train_dataset=Dataset.from_list(sft_rows(48)), processing_class=tokenizer
        )
    args = EBPOConfig(
        output_dir=str(out.parent / "run"),
        num_generations=4,
        per_device_train_batch_size=batch,
        max_completion_length=8,
        block_length=4,
        temperature=1.0,
        scale_rewards="batch",
        num_iterations=3,  # rollouts of step 1 reused: later rollouts would amplify float-level differences
        **COMMON,
    )
    prompts = Dataset.from_list([{"prompt": f"w{2 + i} w{3 + i}"} for i in range(16)])
    return EBPOTrainer(
        model, reward_funcs=reward_even_words, args=args, train_dataset=prompts, processing_class=tokenizer
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["sft", "ebpo"])
    parser.add_argument("--per-device-batch", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    torch.set_num_threads(1)
    trainer = build(options.kind, options.per_device_batch, options.out)
    trainer.train()  # type: ignore[attr-defined]
    state = trainer.accelerator.get_state_dict(trainer.model)  # type: ignore[attr-defined]  # full, on rank 0
    if int(os.environ.get("RANK", "0")) == 0:
        logs = [h for h in trainer.state.log_history if "loss" in h]  # type: ignore[attr-defined]
        wrapper = type(trainer.model_wrapped).__name__  # type: ignore[attr-defined]
        weights = {k: v.detach().cpu() for k, v in state.items()}
        torch.save({"logs": logs, "state": weights, "wrapper": wrapper}, options.out)
    # Every collective is done and the results are written: leave without the interpreter's teardown,
    # where gloo's threads, still alive, made a rank abort now and then ("terminate called without an
    # active exception"); destroy_process_group() instead could hang one rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
