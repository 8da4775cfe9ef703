"""Model adapters: how the decoding loop runs each family of diffusion LM.

`resolve_adapter(model, adapter)` accepts a registered name, an adapter object, or None. None
detects the adapter, in this order:

0. `model.config.dllm_edit_adapter`, the name a checkpoint declares (the trainers write it when a
   model is trained in a form its architecture would not be detected for, e.g. a Llama trained with
   shifted logits; see `dllm_edit.trainers.diffusion_forward.declare_decoding_adapter`);
1. `MODEL_TYPE_ADAPTERS[model.config.model_type]` (matched in lower case; adapters registered with
   `register_adapter` or through the `dllm_edit.adapters` entry-point group add their
   `model_types` here);
2. `"masked_lm"` when the model's class name ends in `ForMaskedLM`;
3. `"block_causal"`.

Third-party packages register adapters under the entry-point group `dllm_edit.adapters`
(`name = "package.module:AdapterClass"`). Entry points are loaded lazily: a name is looked up there
only when it is not registered, and all of them are loaded (once) only when auto-detection meets a
`model_type` it does not know. Built-in and `register_adapter` names take precedence.

Examples:
    >>> from dllm_edit.adapters import ModelAdapter, available_adapters, detect_adapter, register_adapter
    >>> @register_adapter
    ... class DocExampleAdapter(ModelAdapter):
    ...     name = "doc_example"
    ...     model_types = ("doc_example_model",)
    >>> "doc_example" in available_adapters()
    True
    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(config=SimpleNamespace(model_type="doc_example_model"))
    >>> detect_adapter(model)
    'doc_example'
"""

from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .base import ForwardSession, ModelAdapter
from .bidirectional import ApproxCacheBidirectionalAdapter, BidirectionalAdapter
from .block_causal import BlockCausalAdapter
from .block_causal_shifted import BlockCausalShiftedAdapter
from .block_causal_static import StaticCacheBlockCausalAdapter
from .dual_cache import DualCacheBidirectionalAdapter
from .masked_lm import MaskedLMAdapter
from .shifted import ShiftedLogitsAdapter

ENTRY_POINT_GROUP = "dllm_edit.adapters"

_ADAPTERS: dict[str, type[ModelAdapter]] = {
    BlockCausalAdapter.name: BlockCausalAdapter,
    BlockCausalShiftedAdapter.name: BlockCausalShiftedAdapter,
    StaticCacheBlockCausalAdapter.name: StaticCacheBlockCausalAdapter,
    BidirectionalAdapter.name: BidirectionalAdapter,
    ApproxCacheBidirectionalAdapter.name: ApproxCacheBidirectionalAdapter,
    DualCacheBidirectionalAdapter.name: DualCacheBidirectionalAdapter,
    ShiftedLogitsAdapter.name: ShiftedLogitsAdapter,
    MaskedLMAdapter.name: MaskedLMAdapter,
}
#: model_type (lower case) -> adapter name, for families that are not block-causal.
MODEL_TYPE_ADAPTERS: dict[str, str] = {
    "llada": BidirectionalAdapter.name,
    "lladamoe": BidirectionalAdapter.name,
    **{model_type: ShiftedLogitsAdapter.name for model_type in ShiftedLogitsAdapter.model_types},
    **{model_type: MaskedLMAdapter.name for model_type in MaskedLMAdapter.model_types},
}
_all_entry_points_loaded = False


def register_adapter(
    cls: type[ModelAdapter], model_types: tuple[str, ...] = (), *, overwrite: bool = False
) -> type[ModelAdapter]:
    """Register an adapter class under `cls.name`, as the default for `cls.model_types` and `model_types`.

    Usable as a class decorator. Re-registering the same class is a no-op.

    Args:
        cls: a `ModelAdapter` subclass with a non-empty `name`.
        model_types: extra `model.config.model_type`s to detect this adapter for.
        overwrite: replace another class already registered under the same name.

    Returns:
        `cls`.

    Raises:
        TypeError: `cls` is not a `ModelAdapter` subclass with a `name`.
        ValueError: the name is taken by another class and `overwrite` is False.
    """
    return _register(getattr(cls, "name", None), cls, model_types, overwrite)


def _register(
    key: Any, cls: Any, model_types: tuple[str, ...], overwrite: bool, origin: str = ""
) -> type[ModelAdapter]:
    if not (isinstance(cls, type) and issubclass(cls, ModelAdapter)) or not cls.name:
        raise TypeError(
            f"register_adapter expects a ModelAdapter subclass with a non-empty `name`{origin}, got {cls!r}."
        )
    if not isinstance(key, str) or not key:
        raise TypeError(f"An adapter name must be a non-empty string{origin}, got {key!r}.")
    if isinstance(model_types, str):
        model_types = (model_types,)
    taken = _ADAPTERS.get(key)
    if taken is not None and taken is not cls and not overwrite:
        raise ValueError(
            f"An adapter named {key!r} is already registered ({taken.__qualname__}){origin}; pass "
            "overwrite=True or choose another `name`."
        )
    _ADAPTERS[key] = cls
    for model_type in (*cls.model_types, *model_types):
        MODEL_TYPE_ADAPTERS[model_type.lower()] = key
    return cls


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(ep: EntryPoint) -> type[ModelAdapter]:
    origin = f" (entry point {ep.name!r} = {ep.value!r} in group {ENTRY_POINT_GROUP!r})"
    try:
        cls = ep.load()
    except Exception as err:
        raise ValueError(f"Could not load the adapter{origin}: {type(err).__name__}: {err}") from err
    return _register(ep.name, cls, (), overwrite=False, origin=origin)


def _load_all_entry_points() -> None:
    """Load every not yet registered adapter entry point once; a broken one warns and is skipped."""
    global _all_entry_points_loaded
    if _all_entry_points_loaded:
        return
    _all_entry_points_loaded = True
    for name, ep in _entry_points().items():
        if name in _ADAPTERS:
            continue
        try:
            _load_entry_point(ep)
        except (TypeError, ValueError) as err:
            warnings.warn(f"Skipping a dllm_edit adapter plugin: {err}", stacklevel=2)


def available_adapters() -> list[str]:
    """Names of the registered adapters and of the adapter entry points (without loading them)."""
    return sorted(set(_ADAPTERS) | set(_entry_points()))


def get_adapter_class(name: str) -> type[ModelAdapter]:
    """The adapter class registered under `name`, loading its entry point if needed.

    Raises:
        ValueError: unknown name (the message lists the available ones), or an entry point that
            fails to load.
        TypeError: an entry point that does not name a `ModelAdapter` subclass.
    """
    if name not in _ADAPTERS:
        ep = _entry_points().get(name)
        if ep is not None:
            _load_entry_point(ep)
    if name not in _ADAPTERS:
        raise ValueError(
            f"Unknown adapter {name!r}; available: {available_adapters()}. Register your own with "
            f"register_adapter(cls) or the entry-point group {ENTRY_POINT_GROUP!r}, or pass an adapter "
            "object."
        )
    return _ADAPTERS[name]


#: The model-config attribute through which a checkpoint names the adapter it decodes with.
DECLARED_ADAPTER_ATTRIBUTE = "dllm_edit_adapter"


def detect_adapter(model: Any) -> str:
    """The adapter name auto-detection picks for `model` (see the module docstring for the order).

    Raises:
        ValueError: the model's config declares (`dllm_edit_adapter`) an adapter that is not
            registered and no entry point provides.
    """
    config = getattr(model, "config", None)
    declared = getattr(config, DECLARED_ADAPTER_ATTRIBUTE, None)
    if declared is not None:
        if not isinstance(declared, str) or declared not in available_adapters():
            raise ValueError(
                f"model.config.{DECLARED_ADAPTER_ATTRIBUTE} = {declared!r} names no adapter; available: "
                f"{available_adapters()}. Fix the checkpoint's config.json, install the plugin that "
                "provides it, or pass `adapter=` explicitly."
            )
        return declared
    model_type = getattr(config, "model_type", None)
    if isinstance(model_type, str) and model_type:
        keys = (model_type, model_type.lower())
        if not any(key in MODEL_TYPE_ADAPTERS for key in keys):
            _load_all_entry_points()
        for key in keys:
            if key in MODEL_TYPE_ADAPTERS:
                return MODEL_TYPE_ADAPTERS[key]
    if type(model).__name__.endswith("ForMaskedLM"):
        return MaskedLMAdapter.name
    return BlockCausalAdapter.name


def resolve_adapter(model: Any, adapter: str | ModelAdapter | None) -> ModelAdapter:
    """The adapter to use for `model`: `adapter` itself, the class registered under that name, or
    (None) the detected one.

    Raises:
        ValueError: unknown adapter name.
        TypeError: an object that is not a ModelAdapter.
    """
    if adapter is None:
        return get_adapter_class(detect_adapter(model))()
    if isinstance(adapter, str):
        return _fits_the_logits(model, get_adapter_class(adapter)())
    if isinstance(adapter, ModelAdapter):
        return _fits_the_logits(model, adapter)
    hint = ""
    if isinstance(adapter, type) and issubclass(adapter, ModelAdapter):
        hint = f" Pass an instance, {adapter.__name__}(), or its name {adapter.name!r}."
    raise TypeError(
        f"`adapter` must be None, an adapter name ({available_adapters()}) or a ModelAdapter instance, "
        f"got {adapter!r}.{hint}"
    )


def _fits_the_logits(model: Any, adapter: ModelAdapter) -> ModelAdapter:
    """`adapter`, unless it is a cached adapter reading the output at `j` for a model that predicts
    position `j` at output `j - 1` (a Dream checkpoint, or a model whose config declares a shifted
    adapter): its cache would hold every prediction one slot off. (Plain `"bidirectional"` stays
    available on such a model, to read its outputs unshifted on purpose.)

    Raises:
        ValueError: naming the adapter, the model's convention and the adapters that fit it.
    """
    if adapter.shifted_logits or not adapter.supports_cache:
        return adapter
    detected = detect_adapter(model)
    if not get_adapter_class(detected).shifted_logits:
        return adapter
    fitting = sorted(name for name, cls in _ADAPTERS.items() if cls.shifted_logits)
    raise ValueError(
        f"adapter={adapter.name!r} caches a model read at output j for position j, but this model "
        f"(detected adapter {detected!r}) predicts position j at output j - 1, so every token would be "
        f"read one slot off: this family cannot take that cache. Use one of {fitting} (or adapter=None "
        "to detect it)."
    )


__all__ = [
    "DECLARED_ADAPTER_ATTRIBUTE",
    "ENTRY_POINT_GROUP",
    "MODEL_TYPE_ADAPTERS",
    "ApproxCacheBidirectionalAdapter",
    "BidirectionalAdapter",
    "BlockCausalAdapter",
    "BlockCausalShiftedAdapter",
    "DualCacheBidirectionalAdapter",
    "ForwardSession",
    "MaskedLMAdapter",
    "ModelAdapter",
    "ShiftedLogitsAdapter",
    "StaticCacheBlockCausalAdapter",
    "available_adapters",
    "detect_adapter",
    "get_adapter_class",
    "register_adapter",
    "resolve_adapter",
]
