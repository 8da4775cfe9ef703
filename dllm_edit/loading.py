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
        attn_implementation: `"sdpa"` (default) or `"eager"`; with `native=False`, the checkpoint
            code's default unless given.
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
    from transformers import AutoTokenizer

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
    config_dict = _config_dict(name_or_path, revision)
    model_type = _model_type(config_dict)
    model_class = native_model_class(model_type) if native else None
    if not native and native_model_class(model_type) is not None:
        _check_remote_request(name_or_path, config_dict, model_type, trust_remote_code)
    kwargs: dict[str, Any] = {"revision": revision, "attn_implementation": attn_implementation or "sdpa"}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype)
    if not native and native_model_class(model_type) is not None:
        # transformers' Auto classes prefer an explicitly registered class (ours) even when remote code
        # is trusted: the checkpoint's own classes are imported from its auto_map here
        model_class, kwargs["config"] = _remote_classes(name_or_path, config_dict["auto_map"], revision)
        kwargs["trust_remote_code"] = True
        if attn_implementation is None:  # remote code may not declare SDPA (LLaDA's does not)
            del kwargs["attn_implementation"]
    elif model_class is None:
        model_class = _auto_model_class(name_or_path, trust_remote_code, revision)
        kwargs["trust_remote_code"] = trust_remote_code
    model = _load_weights(model_class, name_or_path, kwargs)
    tokenizer = _load_tokenizer(name_or_path, revision, trust_remote_code and not native, AutoTokenizer)
    if device is not None:
        torch.nn.Module.to(model, torch.device(device))  # in place (transformers retypes `.to`)
    return model.eval(), tokenizer


def _check_remote_request(
    name_or_path: str, config_dict: dict[str, Any], model_type: str | None, trust_remote_code: bool
) -> None:
    """`native=False` on a family dllm_edit carries: refused unless remote code is trusted and the
    checkpoint ships code of its own (an `auto_map` in its config.json)."""
    if not trust_remote_code:
        raise ValueError(
            f"native=False runs {name_or_path!r}'s own modelling code instead of dllm_edit's native "
            f"class for {model_type!r}: pass trust_remote_code=True as well (CLI: --remote-code) if "
            "you trust the source."
        )
    if "AutoConfig" not in (config_dict.get("auto_map") or {}):
        raise ValueError(
            f"native=False: {name_or_path!r} ships no code of its own (its config.json has no "
            "auto_map): load it with native=True, dllm_edit's class for its family."
        )


def _auto_model_class(name_or_path: str, trust_remote_code: bool, revision: str | None) -> Any:
    """The transformers Auto class of a family dllm_edit has no native class for: a masked LM's
    (`ForMaskedLM` architectures) gets its masked-LM head, every other one the causal-LM class."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

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
            f"Could not load a model config from {name_or_path!r} ({_first_line(err)}). Check the path "
            "or Hub id; without network access only local folders work."
        ) from err
    architectures = getattr(config, "architectures", None) or []
    auto = AutoModelForMaskedLM if any(a.endswith("ForMaskedLM") for a in architectures) else None
    return auto or AutoModelForCausalLM


def _load_weights(model_class: Any, name_or_path: str, kwargs: dict[str, Any]) -> Any:
    """`model_class.from_pretrained`: a config field the native class refuses raises as it is, any other
    failure (a corrupt or partial weights file) as a `ValueError` saying so."""
    try:
        return model_class.from_pretrained(name_or_path, **kwargs)
    except ValueError as err:
        if "does not implement" in str(err) or "is not implemented by" in str(
            err
        ):  # the native class refuses
            raise  # a config field
        raise _weights_error(name_or_path, err) from err
    except Exception as err:  # a corrupt or partial weights file raises whatever its reader raises
        raise _weights_error(name_or_path, err) from err


def _remote_classes(name_or_path: str, auto_map: dict[str, str], revision: str | None) -> tuple[Any, Any]:
    """The checkpoint's own model class and config, imported from the files its `auto_map` names."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    reference = auto_map.get("AutoModelForCausalLM") or auto_map.get("AutoModel")
    if reference is None:
        raise ValueError(
            f"native=False: {name_or_path!r}'s auto_map names no AutoModelForCausalLM / AutoModel class."
        )
    try:
        config_class: Any = get_class_from_dynamic_module(
            auto_map["AutoConfig"], name_or_path, revision=revision
        )
        model_class = get_class_from_dynamic_module(reference, name_or_path, revision=revision)
        config = config_class.from_pretrained(name_or_path, revision=revision)
    except (OSError, ImportError, AttributeError) as err:
        raise ValueError(
            f"native=False: could not import {name_or_path!r}'s own modelling code ({type(err).__name__}: "
            f"{_first_line(err)}). The code files its config.json's auto_map names must be there (and "
            "import under this transformers release); native=True loads dllm_edit's class instead."
        ) from err
    return model_class, config


def _config_dict(name_or_path: str, revision: str | None) -> dict[str, Any]:
    """The checkpoint's config.json as a dict, read without building any class."""
    from transformers import PretrainedConfig

    try:
        config_dict, _ = PretrainedConfig.get_config_dict(name_or_path, revision=revision)
    except OSError as err:
        raise ValueError(
            f"Could not load a model config from {name_or_path!r} ({err}). Check the path or Hub id; without "
            "network access only local folders work."
        ) from err
    return config_dict


def _model_type(config_dict: dict[str, Any]) -> str | None:
    """The checkpoint's `model_type`, LLaDA-MoE's hub checkpoints (which say `llada`) told apart by their
    architecture."""
    model_type = config_dict.get("model_type")
    if model_type == "llada" and (
        "LLaDAMoEModelLM" in (config_dict.get("architectures") or []) or "num_experts" in config_dict
    ):
        return "lladamoe"
    return model_type


def _load_tokenizer(name_or_path: str, revision: str | None, trust_remote_code: bool, auto: Any) -> Any:
    """The checkpoint's tokenizer. One whose config names a class of the checkpoint's own code
    (Dream's and DiffuCoder's `DreamTokenizer`) is read from its files by a transformers class when
    that code may not run: its `tokenizer.json` by the fast tokenizer, or else its `vocab.json` and
    `merges.txt` by Qwen2's (`DreamTokenizer` is Qwen2's byte-level BPE with the same pre-tokenizer
    pattern); its `tokenizer_config.json` (special tokens, chat template) is read either way."""
    try:
        return auto.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, revision=revision)
    except Exception as err:
        if not trust_remote_code and "trust_remote_code" in str(err):
            import transformers

            # Qwen2's fast tokenizer: `Qwen2TokenizerFast` on 4.x, `Qwen2Tokenizer` itself on 5.x
            qwen2 = getattr(transformers, "Qwen2TokenizerFast", None) or transformers.Qwen2Tokenizer
            for fallback in (transformers.PreTrainedTokenizerFast, qwen2):
                try:
                    return fallback.from_pretrained(name_or_path, revision=revision or "main")
                except Exception:  # the next reader, then the error below
                    continue
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
