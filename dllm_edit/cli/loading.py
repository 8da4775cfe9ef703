"""Loading models, tokenizers and datasets for the command line, with errors that say what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DATA_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _looks_local(name: str) -> bool:
    """A path rather than a Hub id: starts like a path, has more than one `/`, or a data-file suffix."""
    return (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or Path(name).suffix.lower() in DATA_FILE_FORMATS
        or Path(name).exists()
    )


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    trust_remote_code: bool = False,
    revision: str | None = None,
    dtype: str | None = None,
    attn_implementation: str | None = None,
) -> tuple[Any, Any]:
    """`(model, tokenizer)` from a local folder, a Hub id (masked LMs get their masked-LM head), or a
    freshly initialised built-in model (`dllm_edit:init/<size>`, see `dllm_edit.data.builtin`).

    Raises:
        FileNotFoundError: a local path that holds no model.
        ValueError: an unknown `dtype`, remote code needed but `trust_remote_code` is off, or the
            model or tokenizer cannot be loaded (a corrupt or partial weights file, ...).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from dllm_edit.data.builtin import init_model, is_builtin

    from .checks import check_dtype

    dtype = check_dtype(dtype, option="dtype")
    if is_builtin(name_or_path):
        return init_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.exists() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"No model at {name_or_path!r}: the folder has no config.json.")
    if not path.exists() and _looks_local(name_or_path):
        raise FileNotFoundError(f"No model at {name_or_path!r}: the path does not exist.")
    try:
        config = AutoConfig.from_pretrained(
            name_or_path, trust_remote_code=trust_remote_code, revision=revision
        )
    except ValueError as err:
        if "trust_remote_code" in str(err):
            raise ValueError(
                f"{name_or_path!r} ships its own modelling code (LLaDA2.x does). It is only run with "
                "--trust-remote-code (trust_remote_code: true in a recipe); pass it if you trust the source."
            ) from err
        raise
    except OSError as err:
        raise ValueError(
            f"Could not load a model config from {name_or_path!r} ({err}). Check the path or Hub id; without "
            "network access only local folders work."
        ) from err
    masked_lm = any(a.endswith("ForMaskedLM") for a in (getattr(config, "architectures", None) or []))
    auto = AutoModelForMaskedLM if masked_lm else AutoModelForCausalLM
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code, "revision": revision}
    if dtype is not None:
        kwargs["dtype"] = dtype
    kwargs["attn_implementation"] = attn_implementation or "sdpa"
    try:
        model = auto.from_pretrained(name_or_path, **kwargs)
    except Exception as err:  # a corrupt or partial weights file raises whatever its reader raises
        raise ValueError(
            f"Could not load the model weights from {name_or_path!r} ({type(err).__name__}: "
            f"{_first_line(err)}). The weights file may be corrupt or incomplete: download or save the "
            "model again."
        ) from err
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, trust_remote_code=trust_remote_code, revision=revision
        )
    except Exception as err:
        raise ValueError(
            f"Could not load a tokenizer from {name_or_path!r} ({type(err).__name__}: {_first_line(err)}). "
            "The folder needs the tokenizer files saved with the model (tokenizer.save_pretrained)."
        ) from err
    return model, tokenizer


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:300] if lines else "no message"


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
