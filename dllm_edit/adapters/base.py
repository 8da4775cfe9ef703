"""The adapter protocol: how the decoding loop runs a model on the canvas."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch

from dllm_edit.layout import BLOCK_STARTS, CanvasLayout


class ForwardSession(Protocol):
    """Per-`generate` state of an adapter (its KV cache, if any).

    Optional: a session whose forwards also predict the blocks after the active one sets
    `sees_ahead = True` and takes `logits(canvas, block, window, ahead=n)`, returning those `n`
    blocks' logits after the span's (`[R, (window + 1 + n) * bl, V]`); the loop asks for them only
    when a strategy keeps its history across blocks (`Needs.across_blocks`) and reads `"kl"`.
    """

    def logits(self, canvas: torch.Tensor, block: int, window: int) -> torch.Tensor:
        """Logits `[R, (window + 1) * bl, V]` of the session's rows, for the window blocks followed by
        the active `block`."""

    def select_rows(self, rows: torch.Tensor) -> None:
        """Restrict later forwards (and the cache) to `rows`, a subset of the current rows. Rows that
        finished decoding leave the batch, so they cost no compute."""

    def invalidate_from(self, block: int) -> None:
        """Forget cached keys/values of `block` and later (they were edited)."""


class ModelAdapter:
    """Base class of model adapters.

    Attributes:
        name: registry name.
        supports_cache: an exact KV cache of finished blocks is available.
        default_use_cache: `use_cache=None` resolves to this.
        supports_multi_block_edit: the adapter can produce window logits that see the active block.
        supports_compile: `open(..., compile=True)` runs the forward through `torch.compile`.
        model_types: `model.config.model_type`s (lower case) this adapter is detected for once
            registered (`register_adapter`, or the `dllm_edit.adapters` entry-point group).
        default_block_start: where blocks start when the config's `block_start` is None:
            `"absolute"` (LLaDA2.x) or `"prompt_end"` (LLaDA-1, Dream); see docs/concepts/canvas.md.
        block_starts: the block origins the adapter can decode with.
        block_start_refusal: why the origins missing from `block_starts` are refused (for the error).
        shifted_logits: the prediction for position `j` is the model's output at `j - 1` (a
            next-token head, as Dream); engines that read position `j`'s own logits (SGLang's
            JointThreshold) would decode other tokens.
        supports_infill: masks inside the prompt (infilling) are decoded: the adapter's attention
            lets a mask see the text after it, and its sessions cover blocks of the prompt.
        infill_refusal: why an adapter without `supports_infill` refuses masks in the prompt.
        infill_cache_refusal: why the adapter refuses masks in the prompt with its cache on (empty:
            it does not).
    """

    name: ClassVar[str] = ""
    supports_cache: ClassVar[bool] = False
    default_use_cache: ClassVar[bool] = False
    supports_multi_block_edit: ClassVar[bool] = False
    supports_compile: ClassVar[bool] = False
    model_types: ClassVar[tuple[str, ...]] = ()
    default_block_start: ClassVar[str] = "absolute"
    block_starts: ClassVar[tuple[str, ...]] = BLOCK_STARTS
    block_start_refusal: ClassVar[str] = ""
    shifted_logits: ClassVar[bool] = False
    supports_infill: ClassVar[bool] = False
    infill_refusal: ClassVar[str] = ""
    infill_cache_refusal: ClassVar[str] = ""

    def resolve_block_start(self, block_start: str | None) -> str:
        """The block origin of a run: `block_start`, or the adapter's default when it is None.

        Raises:
            ValueError: an origin this adapter cannot decode with (the message says why).
        """
        chosen = self.default_block_start if block_start is None else block_start
        if chosen not in self.block_starts:
            why = f" {self.block_start_refusal}" if self.block_start_refusal else ""
            raise ValueError(
                f"block_start={chosen!r} is not supported by the {self.name!r} adapter (it supports "
                f"{list(self.block_starts)}).{why} Set block_start={self.block_starts[0]!r} or None "
                "(the adapter's default)."
            )
        return chosen

    def open(self, model: Any, layout: CanvasLayout, use_cache: bool) -> ForwardSession:  # pragma: no cover
        raise NotImplementedError

    def position_offset(self, model: Any) -> int:
        """Added to every position id the adapter passes (0; RoBERTa-style embeddings need more)."""
        return 0

    def check_positions(self, model: Any, layout: CanvasLayout) -> None:
        """Raise before any forward if the canvas needs more positions than the model has."""
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        offset = self.position_offset(model)
        if isinstance(limit, int) and layout.max_position + offset >= limit:
            longest = int(layout.prompt_lengths.max())
            reserved = f", of which the first {offset} are reserved by the embeddings" if offset else ""
            fix = "Shorten the prompt or lower max_new_tokens."
            total = longest + layout.max_new_tokens
            if total + offset <= limit:  # prompt + completion fit: the rounding to whole blocks does not
                divisor = max(d for d in range(1, layout.block_length + 1) if total % d == 0)
                fix = (
                    f"Prompt and completion fit in {total} positions, but the canvas is rounded up to whole "
                    f"blocks of {layout.block_length}: lower block_length (one that divides {total}, e.g. "
                    f"{divisor}, adds no position)"
                )
                tokens = (limit - offset) // layout.block_length * layout.block_length - longest
                fix += f", or set max_new_tokens to {tokens}." if tokens > 0 else "."
            raise ValueError(
                f"The canvas needs position ids up to {layout.max_position}, but the model's "
                f"max_position_embeddings is {limit}{reserved} (longest prompt {longest} tokens + "
                f"max_new_tokens {layout.max_new_tokens}, rounded up to block_length "
                f"{layout.block_length}). {fix}"
            )


def forward_kwargs(model: Any) -> set[str]:
    """Names of the keyword arguments `model.forward` accepts (all, if it takes **kwargs).

    A PEFT wrapper forwards its keyword arguments to the model it wraps, so that model's signature is
    the one read (it tells, e.g., whether the cache argument is named `cache` or `past_key_values`).
    """
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        model = get_base()
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return set()
    return set(params)


def cache_argument(model: Any) -> str:
    """The name under which `model.forward` takes its KV cache: `cache` (transformers >= 5.2x) or
    `past_key_values` (older versions and remote code)."""
    return "cache" if "cache" in forward_kwargs(model) else "past_key_values"


def attn_implementation(model: Any) -> str | None:
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


def model_dtype(model: Any) -> torch.dtype:
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    return torch.float32


def output_logits(model: Any, output: Any) -> torch.Tensor:
    """The `.logits` tensor `[B, L, V]` of a forward output.

    Raises:
        TypeError: the output has no `.logits` tensor of rank 3 (a base model without its
            language-modelling head, or a forward returning a tuple).
    """
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor) and logits.ndim == 3:
        return logits
    found = "no `.logits`" if logits is None else f"`.logits` of type {type(logits).__name__}"
    if isinstance(logits, torch.Tensor):
        found = f"`.logits` of shape {tuple(logits.shape)}"
    raise TypeError(
        f"{type(model).__name__}.forward returned {type(output).__name__} with {found}; dllm_edit needs "
        "an output with `.logits` of shape [batch, length, vocab]. Load the model with its "
        "language-modelling head (AutoModelForCausalLM / AutoModelForMaskedLM, not AutoModel), keep "
        "return_dict=True, or wrap the model so that forward returns an object with `.logits`."
    )


def checked_forward(model: Any) -> Callable[..., Any]:
    """`model`, called through a check that its output has `.logits` (see `output_logits`)."""

    def forward(**kwargs: Any) -> Any:
        output = model(**kwargs)
        output_logits(model, output)
        return output

    return forward
