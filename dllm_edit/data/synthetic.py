"""Verifiable synthetic tasks: prompts with exactly one right completion, generated from a seed.

Each family is a place where parallel decoding can go wrong: the tokens of the answer depend on
each other (carries of an addition, the order of a sort, the mirror of a reversal, the nesting of
brackets), so committing several at once from independent marginals produces inconsistent answers
that editing has to repair.

| family     | prompt          | completion |
|------------|-----------------|------------|
| `addition` | `"478+64="`     | `"542"`    |
| `sort`     | `"sort:8125="`  | `"1258"`   |
| `reverse`  | `"rev:abcd="`   | `"dcba"`   |
| `reverse_digits` | `"mirror:4821="` | `"1284"` |
| `brackets` | `"close:[({"`   | `"})]"`    |

The model shipped in the package knows `sort`, `reverse_digits` and `brackets` (`MIX_FAMILIES` of
`dllm_edit.data.builtin`) and decodes their three examples above right at the S and Q presets
(tests/integration/test_true_examples.py); on the first 100 held-out prompts of each it is right
on 68%, 98% and 57% at S (73%, 98%, 57% at Q). It was not trained on `addition` and `reverse`.

Held-out splits come from a different seed (`split="test"`), never from the training stream.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

Example = dict[str, str]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _addition(rng: random.Random, max_digits: int) -> Example:
    a = rng.randrange(10 ** rng.randint(1, max_digits))
    b = rng.randrange(10 ** rng.randint(1, max_digits))
    return {"prompt": f"{a}+{b}=", "completion": str(a + b)}


def _sort(rng: random.Random, max_digits: int) -> Example:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, max_digits + 3)))
    return {"prompt": f"sort:{digits}=", "completion": "".join(sorted(digits))}


def _reverse(rng: random.Random, max_digits: int) -> Example:
    word = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, max_digits + 3)))
    return {"prompt": f"rev:{word}=", "completion": word[::-1]}


def _reverse_digits(rng: random.Random, max_digits: int) -> Example:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(3, max_digits + 3)))
    return {"prompt": f"mirror:{digits}=", "completion": digits[::-1]}


def _brackets(rng: random.Random, max_digits: int) -> Example:
    opened = "".join(rng.choice("([{") for _ in range(rng.randint(2, max_digits + 2)))
    return {"prompt": f"close:{opened}", "completion": "".join(_PAIRS[c] for c in reversed(opened))}


FAMILIES: dict[str, Callable[[random.Random, int], Example]] = {
    "addition": _addition,
    "sort": _sort,
    "reverse": _reverse,
    "brackets": _brackets,
    "reverse_digits": _reverse_digits,  # a reversal BPE cannot merge: digits stay single tokens
}

# Each family's own generator stream; new families take the next number so old streams never move.
_FAMILY_STREAM = {"addition": 0, "brackets": 1, "reverse": 2, "sort": 3, "reverse_digits": 4}

# Seeds of the two splits: the held-out split never shares a generator stream with training.
_SPLIT_SEED = {"train": 0, "test": 1_000_003}


def synthetic_examples(
    family: str, n: int, *, split: str = "train", seed: int = 0, difficulty: int = 3
) -> list[Example]:
    """`n` examples of one family (`{"prompt", "completion", "family"}` dicts).

    Args:
        family: one of `FAMILIES` (`addition`, `sort`, `reverse`, `brackets`, `reverse_digits`).
        n: number of examples.
        split: `"train"` or `"test"` (a different seed stream).
        seed: base seed; the same arguments always give the same examples.
        difficulty: at most this many digits per operand (addition), or up to `difficulty + 3`
            characters (the others).

    Raises:
        ValueError: unknown family or split, `n < 0`, or `difficulty < 1`.

    Examples:
        >>> synthetic_examples("sort", 2, seed=0)[0]["completion"] == "".join(
        ...     sorted(synthetic_examples("sort", 2, seed=0)[0]["prompt"][5:-1]))
        True
    """
    if family not in FAMILIES:
        raise ValueError(f"Unknown task family {family!r}; choose from {sorted(FAMILIES)}.")
    if split not in _SPLIT_SEED:
        raise ValueError(f"`split` must be 'train' or 'test', got {split!r}.")
    if n < 0 or difficulty < 1:
        raise ValueError(f"`n` must be >= 0 and `difficulty` >= 1, got n={n}, difficulty={difficulty}.")
    rng = random.Random(_SPLIT_SEED[split] + 7919 * seed + 104_729 * _FAMILY_STREAM[family])
    make = FAMILIES[family]
    return [{**make(rng, difficulty), "family": family} for _ in range(n)]


def synthetic_mixture(
    families: Sequence[str] | Mapping[str, int],
    n_per_family: int,
    *,
    split: str = "train",
    seed: int = 0,
    difficulty: int = 3,
) -> list[Example]:
    """Examples of several families, interleaved (see `synthetic_examples`).

    Args:
        families: family names, or a mapping of family name to its own difficulty.
        n_per_family: examples of each family.
        split: `"train"` or `"test"`.
        seed: base seed.
        difficulty: the difficulty of the families given without one.

    Examples:
        >>> rows = synthetic_mixture({"sort": 7, "brackets": 3}, 2)
        >>> [r["family"] for r in rows]
        ['sort', 'brackets', 'sort', 'brackets']
    """
    levels = dict(families) if isinstance(families, Mapping) else dict.fromkeys(families, difficulty)
    per_family = [
        synthetic_examples(f, n_per_family, split=split, seed=seed, difficulty=level)
        for f, level in levels.items()
    ]
    return [example for group in zip(*per_family, strict=True) for example in group]
