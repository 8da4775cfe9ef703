"""Python source code as training data with genuine ambiguity: the standard library's own modules.

Every machine with Python has them, so no download is needed. Functions are cut out with `ast`:
the prompt is a function's header (decorators and `def ...:` line(s)), the completion its body
(docstring included), dedented if the function sat in a class. Whole modules are held out
(`split="test"`), chosen by a hash of their path, so no test function shares a file with training.
The quality measure of a completion is whether `prompt + completion` parses (`parses`).
"""

from __future__ import annotations

import ast
import hashlib
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

Example = dict[str, str]

# Folders of the standard library that are tests, third-party or GUI code rather than library code.
_SKIPPED_PARTS = {
    "test",
    "tests",
    "site-packages",
    "idlelib",
    "turtledemo",
    "__pycache__",
    "lib2to3",
    "ensurepip",
}


def stdlib_root() -> Path:
    """The folder of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_modules(root: Path | None = None) -> list[Path]:
    """The standard library's `.py` files (tests, site-packages and GUI demos excluded), sorted."""
    base = stdlib_root() if root is None else root
    files = [p for p in base.rglob("*.py") if not (_SKIPPED_PARTS & set(p.relative_to(base).parts))]
    return sorted(files)


def module_split(relative_path: str, held_out: float = 0.1) -> str:
    """`"test"` for a stable `held_out` fraction of modules (by a hash of the path), else `"train"`."""
    digest = hashlib.sha256(relative_path.encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < held_out else "train"


def function_examples(source: str, max_chars: int = 800) -> Iterator[Example]:
    """`{"prompt": header, "completion": body}` for every function of `source` no longer than
    `max_chars` characters (nested functions inside functions are part of their parent)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    lines = source.splitlines(keepends=True)
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                stack.append(child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.body:
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)]) - 1
                body_start = child.body[0].lineno - 1
                end = child.end_lineno or child.body[-1].lineno
                if body_start <= child.lineno - 1:  # one-line function: `def f(): return 1`
                    continue
                text = textwrap.dedent("".join(lines[start:end]))
                if len(text) > max_chars:
                    continue
                header_lines = body_start - start
                split_at = sum(len(line) for line in text.splitlines(keepends=True)[:header_lines])
                header = text[:split_at].rstrip("\n")
                if not header.endswith(":"):  # a comment after the colon; keep the example simple
                    continue
                yield {"prompt": header, "completion": text[split_at - 1 :].rstrip() + "\n"}


def code_examples(
    split: str = "train",
    *,
    held_out: float = 0.1,
    max_chars: int = 800,
    limit: int | None = None,
    root: Path | None = None,
) -> list[Example]:
    """Function examples of the standard library (see the module docstring), in a stable order.

    Args:
        split: `"train"` or `"test"` (held-out whole modules).
        held_out: fraction of modules in the test split.
        max_chars: longest function kept (characters, header included).
        limit: stop after this many examples.
        root: library folder (default: the running interpreter's).

    Raises:
        ValueError: an unknown split.

    Examples:
        >>> rows = code_examples("test", limit=3)
        >>> all(parses(r["prompt"], r["completion"]) for r in rows)
        True
    """
    if split not in ("train", "test"):
        raise ValueError(f"`split` must be 'train' or 'test', got {split!r}.")
    base = stdlib_root() if root is None else root
    rows: list[Example] = []
    for path in stdlib_modules(base):
        relative = path.relative_to(base).as_posix()
        if module_split(relative, held_out) != split:
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for example in function_examples(source, max_chars):
            rows.append({**example, "module": relative})
            if limit is not None and len(rows) >= limit:
                return rows
    return rows


def parses(prompt: str, completion: str) -> bool:
    """Whether `prompt + completion` is valid Python (the completion finishes the function).

    Examples:
        >>> parses("def f(x):", "\\n    return x + 1\\n"), parses("def f(x):", "\\n    return (x\\n")
        (True, False)
    """
    try:
        ast.parse(prompt + completion)
    except (SyntaxError, ValueError):
        return False
    return True
