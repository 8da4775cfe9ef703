"""`dllm_edit.load`: a model and its tokenizer, with dllm_edit's native class for the families it
carries (LLaDA, LLaDA-MoE, Dream / DiffuCoder, LLaDA2.x), so no checkpoint code is run."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(
    name_or_path: str,
    *,
    native: bool = True,
    trust_remote_code: bool = False,
    revision: str | None = None,
    dtype: str | None = None,
    attn_implementation: str | None = None,
    device: str | None = None,
) -> tuple[Any, Any]:
    """`(model, tokenizer)` from a local folder, a Hub id or a built-in model (`dllm_edit:init/<size>`).

    A checkpoint whose `config.json` names a family dllm_edit carries (`model_type` `llada`,
    `lladamoe`, `Dream`, `llada2_moe`; see `dllm_edit.models`) is loaded into dllm_edit's own class,
    with its weights and config as they are, and no code from the checkpoint runs: no
    `trust_remote_code` is needed, and the class takes a transformers `Cache`, 4-D masks and position
    ids, so every adapter and cache fits it. `native=False` runs the checkpoint's own code instead
    (then `trust_remote_code=True` is needed). Masked LMs get their masked-LM head.

    Args:
        name_or_path: a local folder, a Hub id, or `dllm_edit:init/<size>`.
        native: use dllm_edit's class for the families it carries (default); False runs the
            checkpoint's own code.
        trust_remote_code: allow the checkpoint's own code (only read with `native=False` or for a
            family dllm_edit does not carry).
        revision: a Hub revision.
        dtype: `"float32"`, `"bfloat16"`, `"float16"`, `"float64"` (or `bf16`, ...); None or `"auto"`:
            the checkpoint's.
        attn_implementation: `"sdpa"` (default) or `"eager"`.
        device: where to put the model (default: where transformers loads it, the CPU).

    Returns:
        The model in eval mode and its tokenizer.

    Raises:
        FileNotFoundError: a local path that holds no model.
        ValueError: an unknown `dtype`, remote code needed but `trust_remote_code` off, a config field
            the native class does not implement, or weights or tokenizer that cannot be loaded.

    Examples:
        >>> import dllm_edit
        >>> model, tokenizer = dllm_edit.load(str(dllm_edit.DEFAULT_MODEL_DIR))
        >>> type(model).__name__, model.training
        ('LlamaForCausalLM', False)
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from dllm_edit.cli.checks import check_dtype
    from dllm_edit.data.builtin import init_model, is_builtin
    from dllm_edit.models import native_model_class

    if not isinstance(native, bool):
        raise TypeError(f"`native` must be a bool (False runs the checkpoint's own code), got {native!r}.")
    dtype = check_dtype(dtype, option="dtype")
    if is_builtin(name_or_path):
        return init_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.exists() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"No model at {name_or_path!r}: the folder has no config.json.")
    if not path.exists() and _looks_local(name_or_path):
        raise FileNotFoundError(f"No model at {name_or_path!r}: the path does not exist.")
    model_class = native_model_class(_model_type(name_or_path, revision)) if native else None
    kwargs: dict[str, Any] = {"revision": revision, "attn_implementation": attn_implementation or "sdpa"}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype)
    if model_class is None:
        try:
            config = AutoConfig.from_pretrained(
                name_or_path, trust_remote_code=trust_remote_code, revision=revision
            )
        except ValueError as err:
            if "trust_remote_code" in str(err):
                raise ValueError(
                    f"{name_or_path!r} ships its own modelling code, and dllm_edit has no native class for "
                    f"its model_type. It is only run with trust_remote_code=True (CLI: --trust-remote-code, "
                    "a recipe: trust_remote_code: true); pass it if you trust the source."
                ) from err
            raise
        except OSError as err:
            raise ValueError(
                f"Could not load a model config from {name_or_path!r} ({err}). Check the path or Hub id; "
                "without network access only local folders work."
            ) from err
        architectures = getattr(config, "architectures", None) or []
        auto = AutoModelForMaskedLM if any(a.endswith("ForMaskedLM") for a in architectures) else None
        model_class = auto or AutoModelForCausalLM
        kwargs["trust_remote_code"] = trust_remote_code
    try:
        model = model_class.from_pretrained(name_or_path, **kwargs)
    except ValueError as err:
        if "does not implement" in str(err):  # a config field the native class refuses
            raise
        raise _weights_error(name_or_path, err) from err
    except Exception as err:  # a corrupt or partial weights file raises whatever its reader raises
        raise _weights_error(name_or_path, err) from err
    tokenizer = _load_tokenizer(name_or_path, revision, trust_remote_code and not native, AutoTokenizer)
    if device is not None:
        torch.nn.Module.to(model, torch.device(device))  # in place (transformers retypes `.to`)
    return model.eval(), tokenizer


def _model_type(name_or_path: str, revision: str | None) -> str | None:
    """The `model_type` of the checkpoint's config.json, read without building any class."""
    from transformers import PretrainedConfig

    try:
        config_dict, _ = PretrainedConfig.get_config_dict(name_or_path, revision=revision)
    except OSError as err:
        raise ValueError(
            f"Could not load a model config from {name_or_path!r} ({err}). Check the path or Hub id; without "
            "network access only local folders work."
        ) from err
    return config_dict.get("model_type")


def _load_tokenizer(name_or_path: str, revision: str | None, trust_remote_code: bool, auto: Any) -> Any:
    """The checkpoint's tokenizer; a tokenizer that names a class of the checkpoint's own code (Dream's
    `DreamTokenizer`) is read from its files by transformers' fast tokenizer when that code may not run."""
    try:
        return auto.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, revision=revision)
    except Exception as err:
        if not trust_remote_code and "trust_remote_code" in str(err):
            try:
                from transformers import PreTrainedTokenizerFast

                return PreTrainedTokenizerFast.from_pretrained(name_or_path, revision=revision or "main")
            except Exception:
                pass
        raise ValueError(
            f"Could not load a tokenizer from {name_or_path!r} ({type(err).__name__}: {_first_line(err)}). "
            "The folder needs the tokenizer files saved with the model (tokenizer.save_pretrained)."
        ) from err


def _weights_error(name_or_path: str, err: BaseException) -> ValueError:
    return ValueError(
        f"Could not load the model weights from {name_or_path!r} ({type(err).__name__}: "
        f"{_first_line(err)}). The weights file may be corrupt or incomplete: download or save the "
        "model again."
    )


def _looks_local(name: str) -> bool:
    """A path rather than a Hub id: starts like a path, has more than one `/`, or exists."""
    from dllm_edit.cli.loading import DATA_FILE_FORMATS

    return (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or Path(name).suffix.lower() in DATA_FILE_FORMATS
        or Path(name).exists()
    )


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:300] if lines else "no message"
