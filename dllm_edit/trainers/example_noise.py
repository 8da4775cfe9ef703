"""Corruption noise keyed on the example, not on the batch it happens to sit in.

The noise of a training example depends only on `(noise seed, optimizer step, the example's index in
the prepared dataset, train / eval)`: not on the micro-batch it lands in, its row, the process
that holds it, the number of processes, gradient accumulation, or how far the batch is padded. So
one process with a global batch of `2N` and two processes with `N` each corrupt every example
identically (`tests/trainers/test_distributed_training.py`), and a run resumed from a checkpoint draws the
noise an uninterrupted one draws.

The index travels with each example: `add_example_index` writes it as a column after the dataset is
prepared (tokenized, packed, EOS-extended), and `ExampleIndexCollator` takes it off the examples
before the wrapped collator sees them and returns it as `batch["example_index"]` (`[B]`).
Each row is then corrupted by `corrupt_examples` with its own `torch.Generator`, on its own
extent (its non-padding positions rounded up to a whole block), so the padding of the batch does
not change the draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .corruption import Corruption, corrupt_response, mix_seed

EXAMPLE_INDEX = "example_index"


def _with_index(example: dict[str, Any], index: int) -> dict[str, Any]:
    return {EXAMPLE_INDEX: index}


def add_example_index(dataset: Any) -> Any:
    """`dataset` (a `datasets.Dataset` or `IterableDataset`) with an `example_index` column: the row number.

    Examples:
        >>> from datasets import Dataset
        >>> indexed = add_example_index(Dataset.from_list([{"input_ids": [5]}, {"input_ids": [6]}]))
        >>> list(indexed["example_index"])
        [0, 1]
    """
    return dataset.map(_with_index, with_indices=True)


class ExampleIndexCollator:
    """Wraps a collator: strips `example_index` from the examples, returns it as a LongTensor `[B]`.

    Args:
        collator: the collator of the remaining columns (TRL's, or one passed by the user).

    Examples:
        >>> collate = ExampleIndexCollator(lambda rows: {"n": len(rows)})
        >>> collate([{"example_index": 4, "input_ids": [1]}, {"example_index": 9, "input_ids": [2]}])
        {'n': 2, 'example_index': tensor([4, 9])}
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> None:
        self.collator = collator

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        if any(EXAMPLE_INDEX not in example for example in examples):
            raise ValueError(
                f"A training example has no `{EXAMPLE_INDEX}` column, which keys its corruption noise. It is "
                "added when EditSFTTrainer prepares the dataset; with "
                "`dataset_kwargs={'skip_prepare_dataset': True}` add it yourself: "
                "`dllm_edit.trainers.example_noise.add_example_index(dataset)`."
            )
        indices = torch.tensor([int(example[EXAMPLE_INDEX]) for example in examples], dtype=torch.long)  # [B]
        rest = [{k: v for k, v in example.items() if k != EXAMPLE_INDEX} for example in examples]
        batch = dict(self.collator(rest))
        batch[EXAMPLE_INDEX] = indices
        return batch


def example_generators(
    base_seed: int, step: int, indices: torch.Tensor, training: bool, device: torch.device
) -> list[torch.Generator]:
    """One generator per example, seeded from `(base_seed, step, example index, training)`.

    Examples:
        >>> import torch
        >>> a = example_generators(0, 3, torch.tensor([5, 7]), True, torch.device("cpu"))
        >>> b = example_generators(0, 3, torch.tensor([7]), True, torch.device("cpu"))
        >>> torch.equal(torch.rand(4, generator=a[1]), torch.rand(4, generator=b[0]))
        True
    """
    return [
        torch.Generator(device=device).manual_seed(mix_seed(base_seed, step, int(index), int(training)))
        for index in indices.tolist()
    ]


def row_extents(valid: torch.Tensor, block_length: int) -> list[int]:
    """Per row of a right-padded `valid` `[B, T]`: one past its last valid position, rounded up to a block."""
    positions = torch.arange(1, valid.shape[1] + 1, device=valid.device)  # [T]
    last = (valid.long() * positions).amax(dim=1)  # [B] one past the last valid position (0: empty row)
    rounded = (last + block_length - 1) // block_length * block_length  # [B]
    return rounded.clamp_max(valid.shape[1]).tolist()


def corrupt_examples(
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    extents: Sequence[int],
    generators: Sequence[torch.Generator],
    **options: Any,
) -> Corruption:
    """`corrupt_response` of each row on its own extent with its own generator, padded back to `[B, T]`.

    Args:
        input_ids: LongTensor `[B, T]`, right-padded clean sequences.
        response_mask: BoolTensor `[B, T]`.
        extents: per row, the width its noise is drawn over (`row_extents`).
        generators: per row, its generator (`example_generators`).
        **options: the keyword arguments of `corrupt_response` (rates, ids, ...), without `generator`.

    Returns:
        A `Corruption` `[B, T]`; positions past a row's extent are left clean (mask rate 1).
    """
    rows = []
    for b, (extent, generator) in enumerate(zip(extents, generators, strict=True)):
        rows.append(
            corrupt_response(
                input_ids[b : b + 1, :extent],
                response_mask[b : b + 1, :extent],
                generator=generator,
                **options,
            )
        )
    width = input_ids.shape[1]

    def stacked(field: str, fill: float | int | bool) -> torch.Tensor:
        parts = [getattr(row, field) for row in rows]
        return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=fill) for p in parts])

    noisy = torch.where(stacked("masked", False) | stacked("replaced", False), stacked("noisy", 0), input_ids)
    return Corruption(
        noisy=noisy,  # [B, T]
        masked=stacked("masked", False),  # [B, T]
        replaced=stacked("replaced", False),  # [B, T]
        mask_rate=stacked("mask_rate", 1.0),  # [B, T]
    )


def example_uniform(
    generators: Sequence[torch.Generator], extents: Sequence[int], width: int, device: torch.device
) -> torch.Tensor:
    """Uniforms `[B, width]` in [0, 1): row b drawn from `generators[b]` over `extents[b]` positions
    (1.0, never below a rate, past it)."""
    rows = [
        torch.nn.functional.pad(
            torch.rand((1, extent), generator=generator, device=generator.device),
            (0, width - extent),
            value=1.0,
        )
        for extent, generator in zip(extents, generators, strict=True)
    ]
    return torch.cat(rows).to(device)  # [B, width]


__all__ = [
    "EXAMPLE_INDEX",
    "ExampleIndexCollator",
    "add_example_index",
    "corrupt_examples",
    "example_generators",
    "example_uniform",
    "row_extents",
]
