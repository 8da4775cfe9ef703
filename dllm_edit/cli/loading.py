"""Loading models, tokenizers and datasets for the command line, with errors that say what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DATA_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    trust_remote_code: bool = False,
    revision: str | None = None,
    dtype: str | None = None,
    attn_implementation: str | None = None,
    native: bool = True,
) -> tuple[Any, Any]:
    """`(model, tokenizer)` from a local folder, a Hub id or a built-in model: `dllm_edit.load` (the
    families dllm_edit carries get its native class unless `native=False`).

    Raises:
        FileNotFoundError: a local path that holds no model.
        ValueError: an unknown `dtype`, remote code needed but `trust_remote_code` is off, or the
            model or tokenizer cannot be loaded (a corrupt or partial weights file, ...).
    """
    from dllm_edit.loading import load

    return load(
        name_or_path,
        native=native,
        trust_remote_code=trust_remote_code,
        revision=revision,
        dtype=dtype,
        attn_implementation=attn_implementation,
    )


def load_dataset_arg(name: str, config: str | None = None, split: str = "train") -> Any:
    """A `datasets.Dataset` from a data file (.json/.jsonl/.csv/.parquet), a folder written by
    `Dataset.save_to_disk`, a folder of data files, a Hub dataset id, or a dataset the toolkit builds
    (`dllm_edit:default_mix`, `dllm_edit:synthetic`, `dllm_edit:code`; see `dllm_edit.data.builtin`).

    Raises:
        FileNotFoundError: a local path that does not exist.
        ValueError: an unknown file type, or a missing split.
    """
    import datasets

    from dllm_edit.data.builtin import builtin_dataset, is_builtin
    from dllm_edit.loading import _looks_local

    if is_builtin(name):
        return builtin_dataset(name, split)
    path = Path(name).expanduser()
    if path.is_file():
        fmt = DATA_FILE_FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise ValueError(
                f"Unknown data file type {path.suffix!r} for {name!r}; "
                f"use one of {sorted(DATA_FILE_FORMATS)}."
            )
        return datasets.load_dataset(fmt, data_files=str(path), split="train")
    if path.is_dir():
        if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise ValueError(
                        f"{name!r} has splits {list(loaded)}, not {split!r}; set dataset_train_split."
                    )
                return loaded[split]
            return loaded
        return datasets.load_dataset(str(path), config, split=split)
    if _looks_local(name):
        raise FileNotFoundError(f"No dataset at {name!r}: the path does not exist.")
    try:
        return datasets.load_dataset(name, config, split=split)
    except ConnectionError as err:
        raise ValueError(
            f"Could not reach the Hub for dataset {name!r} ({err}). Without network access, pass a "
            "local data file or a folder written by Dataset.save_to_disk."
        ) from err
