"""`EditGenerationConfig`: every knob of editable decoding, as a transformers `GenerationConfig`."""

from __future__ import annotations

import copy
import difflib
from typing import Any

from transformers import GenerationConfig

from dllm_edit.layout import BLOCK_STARTS
from dllm_edit.strategies import (
    MultiBlockEdit,
    QuotaUnmask,
    Schedule,
    Strategy,
    ThresholdUnmask,
    TokenEdit,
    as_schedule,
    strategy_from_dict,
)

MODES: dict[str, dict[str, Any]] = {
    "speedy": {
        "threshold": 0.5,
        "editing_threshold": 0.0,
        "max_post_steps": 16,
        "block_length": 32,
        "temperature": 0.0,
    },
    "quality": {
        "threshold": 0.7,
        "editing_threshold": 0.5,
        "max_post_steps": 16,
        "block_length": 32,
        "temperature": 0.0,
    },
    "llada": {
        "block_start": "prompt_end",
        "block_length": 32,
        "steps": 32,
        "threshold": 1.0,
        "editing_threshold": None,
        "max_post_steps": 0,
        "num_to_transfer": 1,
        "eos_early_stop": False,
        "suppress_mask_token": False,
        "temperature": 0.0,
    },
}
"""Decoding presets, by name; see `EditGenerationConfig.from_mode`.

`speedy` is LLaDA2.1's S Mode and `quality` its Q Mode (model card and SGLang JointThreshold
defaults). `llada` is LLaDA-1's `generate` (fixed steps, semi-autoregressive blocks from the end of
the prompt, low-confidence remasking, no editing), for bidirectional models.
"""

# Our fields and their defaults (the defaults are the Quality preset).
_DEFAULTS: dict[str, Any] = {
    "block_length": 32,
    "block_start": None,
    "mask_token_id": None,
    "threshold": 0.7,
    "editing_threshold": 0.5,
    "max_post_steps": 16,
    "num_to_transfer": 1,
    "steps": None,
    "eos_early_stop": True,
    "multi_block_edit": False,
    "multi_block_window": 1,
    "multi_block_threshold": None,
    "strategies": None,
    "suppress_mask_token": True,
    "max_steps_per_block": "auto",
    "repeat_penalty": 0.0,
    "output_trace": False,
}
_SAMPLING_ONLY = ("temperature", "top_k", "top_p")


class EditGenerationConfig(GenerationConfig):
    """Configuration of editable decoding; a `transformers.GenerationConfig` subclass.

    It saves to and loads from `generation_config.json` like any generation config
    (`save_pretrained` / `from_pretrained`); schedules and strategies are stored as dicts with their
    class name and rebuilt on load.

    Args:
        block_length: tokens per block (> 0).
        block_start: where blocks start (docs/concepts/canvas.md): `"absolute"` (LLaDA2.x: block
            `k` is positions `[k*bl, (k+1)*bl)`, the first may hold the prompt's tail, the canvas is
            rounded up to whole blocks), `"prompt_end"` (LLaDA-1, Dream: the first block starts
            right after each row's prompt, the canvas is exactly prompt + `max_new_tokens`, the
            last block is shorter when `block_length` does not divide `max_new_tokens`), or None:
            the adapter's default (`"absolute"` for block-causal models, `"prompt_end"` for the
            bidirectional, shifted and masked-LM adapters). In the quota mode (`steps`) it also
            picks the quota rule (see `QuotaUnmask`).
        max_new_tokens: tokens to generate (`G`); the output has `P + G` columns.
        mask_token_id: the model's mask token; resolved from the model when None.
        eos_token_id: end-of-sequence id(s); resolved from the model when None.
        pad_token_id: written after the first EOS of a row; defaults to the EOS id.
        threshold: τ_mask of M2T (float in [0, 1] or Schedule).
        editing_threshold: τ_edit of T2T (float in [0, 1], Schedule, or None = editing off).
            0.0 means "edit whenever the argmax differs" (S mode), not off.
        max_post_steps: mask-free (verification/edit) forwards allowed per block.
        num_to_transfer: minimum tokens unmasked per step (Γ fallback).
        steps: None for LLaDA2.1 threshold decoding; an int selects the fixed-steps quota mode
            (`QuotaUnmask`, `steps` forwards per block) with `threshold` as its confidence threshold:
            LLaDA2.0's quota (`block_length` spread over the steps) with `block_start="absolute"`,
            LLaDA-1's (the block's masked count spread over the steps) with `"prompt_end"`.
        eos_early_stop: stop a row once a finished block leaves its completion mask-free with an EOS.
        temperature: 0 = greedy; > 0 samples (with `top_k` / `top_p` filtering).
        top_k: top-k filter of the proposal distribution (None: off).
        top_p: nucleus filter of the proposal distribution (None: off). Both filters also apply at
            temperature 0: the argmax is unchanged but its probability (compared with the
            thresholds) is then taken under the filtered, renormalised distribution.
        use_cache: KV cache of finished blocks (None: the adapter's default; exact for block-causal).
        multi_block_edit: enable Multi-Block Editing (off by default; see `MultiBlockEdit`).
        multi_block_window: finished blocks editable by MBE.
        multi_block_threshold: τ of MBE edits (None: `editing_threshold`, or 0.9 if that is None).
        strategies: an explicit list of Strategy objects (or their dicts); when given it replaces the
            strategies built from the threshold fields above.
        suppress_mask_token: never propose the mask token as a candidate (the reference does not
            guard this; set False to reproduce it exactly).
        max_steps_per_block: hard cap on forwards per block; "auto" = `2 * block_length +
            max_post_steps`, None = no cap (the reference).
        repeat_penalty: adjacent-repeat (stutter) penalty λ; 0 = off, ~3 suggested for S mode.
        output_trace: record every step (`EditGenerationOutput.trace`); costs host copies.

    Examples:
        >>> from dllm_edit import EditGenerationConfig
        >>> cfg = EditGenerationConfig.from_mode("speedy", max_new_tokens=64)
        >>> cfg.threshold, cfg.editing_threshold, cfg.block_length
        (0.5, 0.0, 32)
        >>> cfg.replace(threshold=0.6).threshold
        0.6
    """

    # our fields (set in __init__ from _DEFAULTS; declared here for type checkers)
    block_length: int
    block_start: str | None
    mask_token_id: int | None
    threshold: float | Schedule
    editing_threshold: float | Schedule | None
    max_post_steps: int
    num_to_transfer: int
    steps: int | None
    eos_early_stop: bool
    multi_block_edit: bool
    multi_block_window: int
    multi_block_threshold: float | Schedule | None
    strategies: list[Strategy] | None
    suppress_mask_token: bool
    max_steps_per_block: int | str | None
    repeat_penalty: float
    output_trace: bool

    def __init__(self, **kwargs: Any) -> None:
        ours = {key: kwargs.pop(key, default) for key, default in _DEFAULTS.items()}
        kwargs.setdefault("max_new_tokens", 256)
        kwargs.setdefault("temperature", 0.0)
        kwargs.setdefault("use_cache", None)
        temperature = kwargs["temperature"]
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            kwargs["do_sample"] = temperature > 0
        for key, value in ours.items():
            setattr(self, key, value)
        self.threshold = _load_schedule(self.threshold)
        self.editing_threshold = _load_schedule(self.editing_threshold)
        self.multi_block_threshold = _load_schedule(self.multi_block_threshold)
        if self.strategies is not None:
            self.strategies = [
                s if isinstance(s, Strategy) else strategy_from_dict(s) for s in self.strategies
            ]
        super().__init__(**kwargs)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mode(cls, mode: str, **fields: Any) -> EditGenerationConfig:
        """A preset of `MODES`, with `fields` overriding it.

        * `"speedy"` / `"quality"`: the S and Q modes of LLaDA2.1 (block-causal models);
        * `"llada"`: LLaDA-1's `generate(..., remasking="low_confidence")` (bidirectional models):
          `block_start="prompt_end"`, the quota mode (`steps` forwards per block, the block's
          masks spread over them), threshold 1.0 (pure top-quota), no editing, no post steps, no
          EOS stop, no mask-token guard. LLaDA-1's `steps` counts all blocks; here `steps` is per
          block (`steps = reference steps / (gen_length / block_length)`). Overriding
          `block_length` alone sets `steps` to it (one token per step, the reference's default
          `steps == gen_length`).

        Raises:
            ValueError: unknown mode.
            TypeError: unknown field.
        """
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {sorted(MODES)}, got {mode!r}.")
        cfg = cls(**MODES[mode])
        if cfg.steps is not None and "block_length" in fields and "steps" not in fields:
            fields = {**fields, "steps": fields["block_length"]}
        return cfg.replace(**fields) if fields else cfg

    def replace(self, **fields: Any) -> EditGenerationConfig:
        """A validated copy with `fields` changed; the single path for overrides.

        Raises:
            TypeError: a key that is not a field of this config (with the closest valid names).
        """
        valid = self.valid_fields()
        unknown = [key for key in fields if key not in valid]
        if unknown:
            hints = {k: difflib.get_close_matches(k, sorted(valid), n=3) for k in unknown}
            raise TypeError(
                f"Unknown generation option(s) {unknown}: not fields of EditGenerationConfig. "
                f"Closest valid names: {hints}."
            )
        new = copy.deepcopy(self)
        for key, value in fields.items():
            setattr(new, key, value)
        if "temperature" in fields and "do_sample" not in fields:
            new.do_sample = isinstance(new.temperature, (int, float)) and new.temperature > 0
        for key in ("threshold", "editing_threshold", "multi_block_threshold"):
            setattr(new, key, _load_schedule(getattr(new, key)))
        if new.strategies is not None:
            new.strategies = [s if isinstance(s, Strategy) else strategy_from_dict(s) for s in new.strategies]
        new.validate()
        return new

    @classmethod
    def valid_fields(cls) -> set[str]:
        """Names accepted by `replace()` and `generate(**overrides)`: ours plus GenerationConfig's."""
        return set(_DEFAULTS) | set(GenerationConfig().__dict__) - {"transformers_version"}

    # ------------------------------------------------------------------ validation
    def validate(self, strict: bool = False, user_set_attributes: set[str] | None = None) -> None:
        """Check our fields (always raising on bad values), then transformers' own checks.

        Temperature 0 means greedy here (the reference decoder's convention), so transformers'
        "sampling flag set while do_sample=False" notices do not apply and are not raised.
        """
        self._validate_edit_fields()
        saved = {key: getattr(self, key, None) for key in _SAMPLING_ONLY}
        if not getattr(self, "do_sample", False):
            for key in _SAMPLING_ONLY:
                setattr(self, key, None)
        try:
            if user_set_attributes is None:
                super().validate(strict=strict)
            else:  # transformers >= 5.x tracks which flags the caller set
                super().validate(strict=strict, user_set_attributes=user_set_attributes)
        finally:
            for key, value in saved.items():
                setattr(self, key, value)

    def _validate_edit_fields(self) -> None:
        _check_int("block_length", self.block_length, minimum=1)
        _check_block_start(self.block_start)
        as_schedule(self.threshold, name="threshold")
        for key in ("editing_threshold", "multi_block_threshold"):
            if getattr(self, key) is not None:
                as_schedule(getattr(self, key), name=key)
        _check_int("max_post_steps", self.max_post_steps, minimum=0)
        _check_int("num_to_transfer", self.num_to_transfer, minimum=1)
        _check_int("multi_block_window", self.multi_block_window, minimum=1)
        if self.max_new_tokens is not None:
            _check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        if self.steps is not None:
            _check_int("steps", self.steps, minimum=1)
            if self.steps > self.block_length:
                raise ValueError(
                    f"`steps` ({self.steps}) must be <= `block_length` ({self.block_length}) in the "
                    "fixed-steps quota mode; use steps=None for threshold decoding."
                )
        if self.mask_token_id is not None:
            _check_int("mask_token_id", self.mask_token_id, minimum=0)
        if self.max_steps_per_block not in (None, "auto"):
            _check_int("max_steps_per_block", self.max_steps_per_block, minimum=1)
        temperature = self.temperature if self.temperature is not None else 0.0
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"`temperature` must be a float >= 0 (0 = greedy), got {self.temperature!r}.")
        if self.top_k is not None:
            _check_int("top_k", self.top_k, minimum=1)
        if self.top_p is not None and not (0.0 < float(self.top_p) <= 1.0):
            raise ValueError(f"`top_p` must be in (0, 1], got {self.top_p!r}.")
        if not isinstance(self.repeat_penalty, (int, float)) or self.repeat_penalty < 0:
            raise ValueError(f"`repeat_penalty` must be a float >= 0 (0 = off), got {self.repeat_penalty!r}.")
        for key in ("eos_early_stop", "multi_block_edit", "suppress_mask_token", "output_trace"):
            if not isinstance(getattr(self, key), bool):
                raise TypeError(f"`{key}` must be a bool, got {getattr(self, key)!r}.")
        if self.strategies is not None:
            if not self.strategies:
                raise ValueError("`strategies` must be None or a non-empty list of Strategy objects.")
            if not any(s.unmasks for s in self.strategies):
                raise ValueError(
                    "`strategies` must contain an unmasking strategy (e.g. ThresholdUnmask): "
                    "otherwise masked positions are never filled."
                )

    # ------------------------------------------------------------------ strategies
    def build_strategies(self, block_start: str | None = None) -> list[Strategy]:
        """The strategy list this config describes (explicit `strategies` take precedence).

        Args:
            block_start: the block origin of the run (the adapter resolves `self.block_start`);
                None reads `self.block_start`, and `"absolute"` when that is None too. It picks the
                quota rule of the fixed-steps mode.
        """
        if self.strategies is not None:
            return list(self.strategies)
        origin = block_start or self.block_start or "absolute"
        out: list[Strategy] = []
        if self.steps is None:
            out.append(ThresholdUnmask(threshold=self.threshold, num_to_transfer=self.num_to_transfer))
        else:
            out.append(
                QuotaUnmask(
                    steps=self.steps,
                    block_length=self.block_length,
                    threshold=self.threshold,
                    spread="masked_count" if origin == "prompt_end" else "block_length",
                )
            )
        if self.editing_threshold is not None:
            out.append(TokenEdit(threshold=self.editing_threshold))
        if self.multi_block_edit:
            mbe_threshold = self.multi_block_threshold
            if mbe_threshold is None:
                mbe_threshold = self.editing_threshold if self.editing_threshold is not None else 0.9
            out.append(MultiBlockEdit(window=self.multi_block_window, threshold=mbe_threshold))
        return out

    def steps_cap(self) -> int | None:
        """The hard cap on forwards per block (None: uncapped)."""
        cap = self.max_steps_per_block
        if cap == "auto":
            return 2 * self.block_length + self.max_post_steps
        return cap if isinstance(cap, int) else None

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """Serialise to a JSON-ready dict; schedules and strategies become dicts with their type name."""
        schedules = {k: getattr(self, k) for k in ("threshold", "editing_threshold", "multi_block_threshold")}
        strategies = self.strategies
        try:
            for key in schedules:
                setattr(self, key, None)
            self.strategies = None
            out = super().to_dict()
        finally:
            for key, value in schedules.items():
                setattr(self, key, value)
            self.strategies = strategies
        for key, value in schedules.items():
            out[key] = value.to_dict() if isinstance(value, Schedule) else value
        out["strategies"] = None if strategies is None else [s.to_dict() for s in strategies]
        return out

    def to_diff_dict(self) -> dict[str, Any]:
        # Our fields are always written, so a saved config is self-describing.
        out = super().to_diff_dict()
        full = self.to_dict()
        for key in _DEFAULTS:
            out[key] = full[key]
        return out


def _load_schedule(value: Any) -> Any:
    """Keep floats as floats (readable configs), turn schedule dicts into Schedule objects."""
    if value is None or isinstance(value, Schedule):
        return value
    if isinstance(value, dict):
        return as_schedule(value)
    return value


def _check_block_start(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(
            f"`block_start` must be None (the adapter's default), 'absolute' or 'prompt_end', "
            f"got {type(value).__name__} {value!r}."
        )
    if value not in BLOCK_STARTS:
        close = difflib.get_close_matches(value, BLOCK_STARTS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"`block_start` must be None (the adapter's default), 'absolute' (LLaDA2.x: blocks at "
            f"absolute positions) or 'prompt_end' (LLaDA-1, Dream: blocks from the end of the prompt), "
            f"got {value!r}.{hint}"
        )


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int >= {minimum}, got {type(value).__name__} {value!r}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
