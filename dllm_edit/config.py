"""`EditGenerationConfig`: every knob of editable decoding, as a transformers `GenerationConfig`."""

from __future__ import annotations

import copy
import difflib
import logging
from typing import Any

from transformers import GenerationConfig

from dllm_edit.config_fields import is_off
from dllm_edit.config_reconcile import (
    SAMPLING_FILTERS,
    is_number,
    plain_config_updates,
    reconcile_sampling,
    refuse_unknown_keys,
)
from dllm_edit.config_validation import refuse_unread_unmask_fields, validate_edit_fields
from dllm_edit.modes import MODES, fit_mode_to_adapter
from dllm_edit.sglang import export_sglang, sglang_fields
from dllm_edit.strategies import Schedule, Strategy, as_schedule, strategy_from_dict
from dllm_edit.strategy_factory import build_strategies, load_unmasking

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
    "eos_fill": False,
    "multi_block_edit": False,
    "multi_block_window": 1,
    "multi_block_threshold": None,
    "strategies": None,
    "unmasking": None,
    "suppress_mask_token": True,
    "max_steps_per_block": "auto",
    "repeat_penalty": 0.0,
    "output_trace": False,
    "compile": False,
}
_SAMPLING_ONLY = ("temperature", "top_k", "top_p")
# Inherited fields whose transformers 4.57 default is a real setting: our config starts them at None
# so both transformers lines build (and save) the same config.
_INHERITED_NONE = ("top_k", "top_p", "use_cache", "return_dict_in_generate")

logger = logging.getLogger(__name__)


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
        max_new_tokens: tokens to generate (`G`); the output has `P + G` columns. 0 only fills the
            masks of the prompt (infilling; refused when no prompt holds a mask).
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
        eos_fill: once a row commits an EOS, every mask after its first EOS (in the active block and
            every later block) becomes EOS at once, and the row stops as soon as no mask is left in
            its completion (dInfer's and `dllm`'s early stop): no forward is spent after that, not
            even a verification step. Off by default; composes with every strategy and adapter.
        temperature: 0 = greedy: the candidate is the argmax and its probability (compared with the
            thresholds) is the full, unfiltered softmax, as in the reference decoder. > 0 samples.
        do_sample: transformers' spelling of the same choice; it must agree with `temperature`
            (`do_sample=True` alone means temperature 1.0, `do_sample=False` alone temperature 0).
        top_k: top-k filter of the sampling distribution (None or 0: off). Sampling only: a filter
            set at temperature 0 raises, so greedy probabilities are the same on every
            transformers version (4.57's `GenerationConfig` defaults `top_k` to 50; ours to None).
        top_p: nucleus filter of the sampling distribution (None or 1.0: off). Sampling only.
        min_p, typical_p, epsilon_cutoff, eta_cutoff: transformers' sampling warpers, applied in
            transformers' order after temperature, top-k and top-p. Sampling only.
        repetition_penalty: transformers' repetition penalty over the visible canvas (None or 1.0:
            off); for adjacent stutter in parallel drafts see `repeat_penalty`.
        suppress_tokens: ids never proposed (transformers' `SuppressTokensLogitsProcessor`).
        use_cache: KV cache of finished blocks (None: the adapter's default; exact for block-causal).
        return_dict_in_generate: the output type when a call does not say (None:
            `dllm_edit.generate` returns an `EditGenerationOutput`, `model.generate` a tensor).
        multi_block_edit: enable Multi-Block Editing (off by default; see `MultiBlockEdit`).
        multi_block_window: finished blocks editable by MBE.
        multi_block_threshold: τ of MBE edits (None: `editing_threshold`, or 0.9 if that is None).
        strategies: an explicit list of Strategy objects (or their dicts); when given it replaces the
            strategies built from the threshold fields above.
        unmasking: the M2T rule, replacing the one `threshold` / `num_to_transfer` / `steps` build
            (None: that one). A registered unmasking strategy by name (`"fast_dllm_threshold"`,
            `"eb_sampler"`, ...; `dllm_edit.strategies.available_strategies()`), its dict
            (`{"type": "eb_sampler", "gamma": 0.01}`) or a `Strategy` object with `unmasks=True`.
            T2T editing (`editing_threshold`) and MBE still compose with it; `steps` cannot be set
            with it (the quota mode is an unmasking rule of its own).
        suppress_mask_token: never propose the mask token as a candidate (the reference does not
            guard this; set False to reproduce it exactly).
        max_steps_per_block: hard cap on forwards per block; "auto" = `2 * block_length +
            max_post_steps`, None = no cap (the reference).
        repeat_penalty: adjacent-repeat (stutter) penalty λ; 0 = off, ~3 suggested for S mode.
        output_trace: record every step (`EditGenerationOutput.trace`); costs host copies.
        compile: run the model's forward through `torch.compile` (block-causal adapter only; the
            compiled forward is kept per model and reused by later calls). Opt-in: compilation takes
            minutes on a CPU and pays on a GPU; the tokens are those of eager mode.

    Every other field inherited from `GenerationConfig` is either metadata or refused with a
    `ValueError` when set (beam search, `max_length`, `stop_strings`, `no_repeat_ngram_size`,
    ...): the full table, with the reason for each, is `dllm_edit.config_fields`. A key that is no
    field at all (`treshold=0.1`) raises a `TypeError` naming the closest fields, on every path into a
    config: the constructor, `from_mode`, `replace`, `from_dict` / `from_pretrained` (transformers'
    own bookkeeping keys such as `transformers_version` pass) and a YAML file given to
    `dllm-edit generate --config`.

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
    eos_fill: bool
    multi_block_edit: bool
    multi_block_window: int
    multi_block_threshold: float | Schedule | None
    strategies: list[Strategy] | None
    unmasking: Strategy | None
    suppress_mask_token: bool
    max_steps_per_block: int | str | None
    repeat_penalty: float
    output_trace: bool
    compile: bool

    def __init__(self, **kwargs: Any) -> None:
        refuse_unknown_keys(kwargs, self.valid_fields())
        ours = {key: kwargs.pop(key, default) for key, default in _DEFAULTS.items()}
        kwargs.setdefault("max_new_tokens", 256)
        for key in _INHERITED_NONE:
            kwargs.setdefault(key, None)
        reconcile_sampling(kwargs)
        given = set(kwargs)
        for key, value in ours.items():
            setattr(self, key, value)
        self.threshold = _load_schedule(self.threshold)
        self.editing_threshold = _load_schedule(self.editing_threshold)
        self.multi_block_threshold = _load_schedule(self.multi_block_threshold)
        if self.strategies is not None:
            self.strategies = [
                s if isinstance(s, Strategy) else strategy_from_dict(s) for s in self.strategies
            ]
        self.unmasking = load_unmasking(self.unmasking)
        super().__init__(**kwargs)
        self._refuse_greedy_filters(given)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mode(
        cls, mode: str, *, model: Any = None, adapter: Any = None, **fields: Any
    ) -> EditGenerationConfig:
        """A preset of `MODES`, with `fields` overriding it, fitted to a model when one is given.

        * `"speedy"` / `"quality"`: the S and Q modes of LLaDA2.1 (block-causal models);
        * `"llada"`: LLaDA-1's `generate(..., remasking="low_confidence")` (bidirectional models):
          `block_start="prompt_end"`, the quota mode (`steps` forwards per block, the block's
          masks spread over them), threshold 1.0 (pure top-quota), no editing, no post steps, no
          EOS stop, no mask-token guard. LLaDA-1's `steps` counts all blocks; here `steps` is per
          block (`steps = reference steps / (gen_length / block_length)`). Overriding
          `block_length` alone sets `steps` to it (one token per step, the reference's default
          `steps == gen_length`).

        Args:
            mode: a key of `MODES`.
            model: the model the config will decode; its adapter (detected, or `adapter`) fits the
                preset (`dllm_edit.modes.fit_mode_to_adapter`: `"llada"` on a block-causal model runs
                LLaDA-1's rule on its absolute blocks), as the CLI's `--mode` does.
            adapter: the adapter name or object to fit to (default: detected from `model`).
            **fields: fields overriding the preset.

        Raises:
            ValueError: unknown mode.
            TypeError: unknown field.
        """
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {sorted(MODES)}, got {mode!r}.")
        cfg = cls(**MODES[mode])
        if cfg.steps is not None and "block_length" in fields and "steps" not in fields:
            fields = {**fields, "steps": fields["block_length"]}
        cfg = cfg.replace(**fields) if fields else cfg
        if model is None and adapter is None:
            return cfg
        from dllm_edit.adapters import resolve_adapter

        cfg, note = fit_mode_to_adapter(cfg, resolve_adapter(model, adapter))
        if note:
            logger.info("from_mode(%r): %s", mode, note)
        return cfg

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
        if "temperature" in fields or "do_sample" in fields:
            sampling: dict[str, Any] = {k: fields[k] for k in ("temperature", "do_sample") if k in fields}
            if "temperature" not in fields and fields["do_sample"] and is_number(new.temperature):
                sampling["temperature"] = new.temperature if new.temperature > 0 else None
            reconcile_sampling(sampling)
            new.temperature, new.do_sample = sampling["temperature"], sampling["do_sample"]
        for key in ("threshold", "editing_threshold", "multi_block_threshold"):
            setattr(new, key, _load_schedule(getattr(new, key)))
        if new.strategies is not None:
            new.strategies = [s if isinstance(s, Strategy) else strategy_from_dict(s) for s in new.strategies]
        new.unmasking = load_unmasking(new.unmasking)
        refuse_unread_unmask_fields(new, fields)
        new.validate()
        new._refuse_greedy_filters(set(fields))
        return new

    @classmethod
    def valid_fields(cls) -> set[str]:
        """Names accepted by `replace()` and `generate(**overrides)`: ours plus GenerationConfig's."""
        return set(_DEFAULTS) | set(GenerationConfig().__dict__) - {"transformers_version"}

    @classmethod
    def from_sglang(cls, algorithm_config: dict[str, Any], **fields: Any) -> EditGenerationConfig:
        """The config a SGLang JointThreshold YAML describes (`dllm_edit.sglang.sglang_fields`),
        with `fields` on top; the inverse of `to_sglang`.

        Examples:
            >>> EditGenerationConfig.from_sglang({"edit_threshold": 1.0}).editing_threshold is None
            True
        """
        return cls(**{**sglang_fields(algorithm_config), **fields})

    @classmethod
    def from_generation_config(
        cls,
        config: GenerationConfig,
        base: EditGenerationConfig | None = None,
        strict: bool = True,
    ) -> EditGenerationConfig:
        """An `EditGenerationConfig` from a plain `GenerationConfig` (a model's saved one, a trainer's).

        Only the fields the plain config sets (its `to_diff_dict()`, so the transformers line's own
        defaults never leak in) are laid over `base` (default: the Quality preset): our fields (a
        `generation_config.json` saved by dllm_edit and loaded as a plain config keeps them) and
        the honoured transformers fields. transformers' conventions hold: `do_sample=False` (or
        unset) is greedy, whatever `temperature` says, and then the sampling-only filters are
        dropped; `top_k=0` and `top_p=1.0` mean off.

        Args:
            config: the plain generation config.
            base: the config its fields are laid over.
            strict: raise on a refused field (beam search, `max_length` ...); False drops them with a
                warning naming each (used for a model's own saved config, which the caller did not
                write). A model's own config that carries no dllm_edit field also keeps its
                `use_cache` out: there it is transformers' switch for the left-to-right KV cache, and
                the block cache follows the adapter's default.

        Raises:
            ValueError: `strict` and a refused field is set.
            TypeError: `strict` and a key that is no field of `EditGenerationConfig` (with the closest
                valid names); with `strict=False` such keys (e.g. a file written by another tool) are
                dropped with a warning naming them.

        Examples:
            >>> from transformers import GenerationConfig
            >>> plain = GenerationConfig(max_new_tokens=8, block_length=16, do_sample=True, temperature=0.7)
            >>> cfg = EditGenerationConfig.from_generation_config(plain)
            >>> cfg.block_length, cfg.temperature, cfg.max_new_tokens
            (16, 0.7, 8)
        """
        if isinstance(config, EditGenerationConfig):
            return config
        base = base if base is not None else cls()
        updates = plain_config_updates(config, base, cls.valid_fields(), set(_DEFAULTS), strict)
        return base.replace(**updates) if updates else base

    # ------------------------------------------------------------------ validation
    def validate(self, strict: bool = False, user_set_attributes: set[str] | None = None) -> None:
        """Check our fields (always raising on bad values), then transformers' own checks.

        Temperature 0 means greedy here (the reference decoder's convention), so transformers'
        "sampling flag set while do_sample=False" notices do not apply and are not raised.
        """
        validate_edit_fields(self)
        saved = {key: getattr(self, key, None) for key in (*_SAMPLING_ONLY, "max_new_tokens")}
        if not getattr(self, "do_sample", False):
            for key in _SAMPLING_ONLY:
                setattr(self, key, None)
        if self.max_new_tokens == 0:  # infilling only: valid here, refused by transformers' check
            self.max_new_tokens = None
        try:
            if user_set_attributes is None:
                super().validate(strict=strict)
            else:  # transformers >= 5.x tracks which flags the caller set
                super().validate(strict=strict, user_set_attributes=user_set_attributes)
        finally:
            for key, value in saved.items():
                setattr(self, key, value)

    def check_max_length(self, prompt_width: int) -> None:
        """Accept `max_length` only as transformers derives it: prompt width + `max_new_tokens`.

        transformers' `model.generate` and pipelines set it from `max_new_tokens`; any other value
        would ask for a different completion length than the canvas has, so it is refused.

        Raises:
            ValueError: `max_length` set to another value.
        """
        if is_off("max_length", self.max_length) or self.max_length == prompt_width + self.max_new_tokens:
            return
        raise ValueError(
            f"`max_length`={self.max_length!r} is not used by diffusion decoding: the canvas holds the "
            "prompt "
            f"({prompt_width} tokens) plus `max_new_tokens`={self.max_new_tokens}. Pass "
            f"max_new_tokens={max(self.max_length - prompt_width, 1)} instead of max_length."
        )

    def _refuse_greedy_filters(self, given: set[str]) -> None:
        """Refuse a sampling filter set at temperature 0 when this call set the filter or the temperature.

        Not part of `validate()`: transformers' own `model.generate` fills `top_k=50` into every
        config it prepares (5.x), and a filter transformers sets is not applied when greedy, as in
        transformers. The proposer never filters at temperature 0 either way.
        """
        if self.temperature:
            return
        active = self.active_sampling_filters()
        if active and given & (set(active) | {"temperature", "do_sample"}):
            raise ValueError(
                f"Sampling filter(s) {active} set at temperature 0: greedy decoding takes the argmax and its "
                "full-softmax probability (the reference rule), so a filter there would only change the "
                "probability compared with the thresholds. Unset them, or sample with temperature > 0."
            )

    def active_sampling_filters(self) -> dict[str, Any]:
        """The sampling filters set to something other than "off" (e.g. `{"top_k": 20}`)."""
        return {
            key: getattr(self, key)
            for key, off in SAMPLING_FILTERS.items()
            if getattr(self, key, None) is not None and getattr(self, key) != off
        }

    # ------------------------------------------------------------------ strategies
    def build_strategies(self, block_start: str | None = None) -> list[Strategy]:
        """The strategy list this config describes (`dllm_edit.strategy_factory.build_strategies`)."""
        return build_strategies(self, block_start)

    def steps_cap(self) -> int | None:
        """The hard cap on forwards per block (None: uncapped)."""
        cap = self.max_steps_per_block
        if cap == "auto":
            return 2 * self.block_length + self.max_post_steps
        return cap if isinstance(cap, int) else None

    # ------------------------------------------------------------------ serving export
    def to_sglang(
        self,
        *,
        architecture: str | None = None,
        adapter: str | None = None,
        allow_approximate: bool = False,
    ) -> Any:
        """These settings as SGLang's JointThreshold config (`dllm_edit.sglang.SGLangExport`).

        Args:
            architecture: the model's architecture (`config.architectures[0]`), checked against the
                ones SGLang serves; None skips the check.
            adapter: the dllm_edit adapter the model decodes with (`dllm_edit.adapters.detect_adapter`);
                one with shifted logits (`"shifted"`, `"block_causal_shifted"`) is refused even with
                `allow_approximate`, since SGLang would decode other tokens. None skips the check.
            allow_approximate: drop what SGLang cannot express, warning once per setting, instead
                of raising.

        Raises:
            dllm_edit.sglang.SGLangExportError: a setting SGLang cannot express, or a model whose
                logits SGLang would read at the wrong position (a ValueError).

        Examples:
            >>> cfg = EditGenerationConfig.from_mode("quality", editing_threshold=None)
            >>> cfg.to_sglang().algorithm_config["edit_threshold"]  # editing off: p > 1 never holds
            1.0
        """
        return export_sglang(
            self, architecture=architecture, adapter=adapter, allow_approximate=allow_approximate
        )

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """Serialise to a JSON-ready dict; schedules and strategies become dicts with their type name."""
        schedules = {k: getattr(self, k) for k in ("threshold", "editing_threshold", "multi_block_threshold")}
        strategies, unmasking = self.strategies, self.unmasking
        try:
            for key in schedules:
                setattr(self, key, None)
            self.strategies = self.unmasking = None
            out = super().to_dict()
        finally:
            for key, value in schedules.items():
                setattr(self, key, value)
            self.strategies, self.unmasking = strategies, unmasking
        for key, value in schedules.items():
            out[key] = value.to_dict() if isinstance(value, Schedule) else value
        out["strategies"] = None if strategies is None else [s.to_dict() for s in strategies]
        out["unmasking"] = None if unmasking is None else unmasking.to_dict()
        return out

    def to_diff_dict(self) -> dict[str, Any]:
        # Our fields are always written, so a saved config is self-describing.
        out = super().to_diff_dict()
        full = self.to_dict()
        for key in _DEFAULTS:
            out[key] = full[key]
        if not self.do_sample and not self.temperature:
            # greedy is the default on load (ours and transformers'); a written `temperature: 0.0` next
            # to `do_sample: false` makes transformers warn on every load of the model
            out.pop("temperature", None)
        return out


def _load_schedule(value: Any) -> Any:
    """Keep floats as floats (readable configs), turn schedule dicts into Schedule objects."""
    if value is None or isinstance(value, Schedule):
        return value
    if isinstance(value, dict):
        return as_schedule(value)
    return value
