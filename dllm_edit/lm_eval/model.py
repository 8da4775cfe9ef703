"""`DllmEditLM`: the lm-eval model (`--model dllm_edit`) around `dllm_edit.generate`."""

from __future__ import annotations

import difflib
import logging
from collections import defaultdict
from typing import Any

import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import TemplateLM
from tqdm.auto import tqdm

from dllm_edit.config import MODES, EditGenerationConfig
from dllm_edit.generation import generate
from dllm_edit.output import EditGenerationOutput
from dllm_edit.special_tokens import resolve_special_tokens
from dllm_edit.trainers.diffusion_forward import DiffusionForward, resolve_attention_form

from . import distributed
from .likelihood import elbo_loglikelihoods, greedy_matches, request_seed
from .requests import cut_at_stop, group_key, split_gen_kwargs

logger = logging.getLogger(__name__)

MODEL_ARGS = (
    "pretrained",
    "tokenizer",
    "mode",
    "batch_size",
    "max_batch_size",
    "device",
    "dtype",
    "trust_remote_code",
    "revision",
    "attn_implementation",
    "adapter",
    "mc_num",
    "seed",
    "max_length",
)
"""The loading and scoring arguments of `--model_args`; every other key is an `EditGenerationConfig` field."""


class DllmEditLM(TemplateLM):
    """lm-evaluation-harness model that decodes with `dllm_edit.generate` (registered as `dllm_edit`).

    - `generate_until`: batched editable decoding; each row's own `until` strings cut its text after
      decoding; requests with different generation arguments decode in different batches.
    - `loglikelihood`: the Monte-Carlo ELBO of the continuation (`mc_num` stratified mask counts,
      the model's training forward, see `dllm_edit.lm_eval.likelihood`); `is_greedy` from the
      decoder's own greedy fill.
    - `loglikelihood_rolling`: the same ELBO of the whole text given the prefix token (texts up to
      `max_length` tokens; longer ones raise, since a diffusion ELBO has no rolling windows).
    - Several processes (`accelerate launch`, `torchrun`): requests are sharded by rank.
    - Decoding statistics (rows, tokens, forwards, tokens per forward) go to the log and to
      `results["config"]["dllm_edit"]` in lm-eval's results JSON.

    Args:
        pretrained: a model folder or Hub id, `dllm_edit:init/<size>`, an already loaded model, or
            None / "default" for the model shipped in the package.
        tokenizer: a tokenizer (or its path) when `pretrained` is a loaded model or has none.
        mode: the preset the fields start from (`"speedy"` or `"quality"`).
        batch_size: rows per decoding / scoring batch (an int; lm-eval's "auto" is not supported).
        max_batch_size: refused (no automatic batch size).
        device: torch device (default: the launcher's device for this rank, else CUDA if present).
        dtype: weights dtype (`"float32"`, `"bfloat16"`, ...; default: as saved).
        trust_remote_code: run the model's own code (LLaDA2.x needs it).
        revision: Hub revision.
        attn_implementation: transformers attention backend (default sdpa).
        adapter: decoding adapter name (default: detected from the model).
        mc_num: mask draws (forwards per batch) of the ELBO in `loglikelihood`.
        seed: seed of the ELBO noise and of sampling (temperature > 0).
        max_length: longest context + continuation in tokens (default: the model's positions).
        **fields: `EditGenerationConfig` fields (`max_new_tokens` is the default length of
            generations; a task's `max_gen_toks` wins).

    Raises:
        TypeError: an unknown argument (with the closest valid names).
        ValueError: a bad value (unknown mode, batch size "auto", ...).

    Examples:
        >>> from dllm_edit.lm_eval import DllmEditLM
        >>> lm = DllmEditLM(mode="speedy", max_new_tokens=16, batch_size=2)  # the shipped model
        >>> lm.config.threshold, lm.config.max_new_tokens
        (0.5, 16)
        >>> DllmEditLM(treshold=0.6)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: Unknown --model_args key(s) ['treshold'] for the dllm_edit model. Closest valid names: ...
    """

    def __init__(
        self,
        pretrained: Any = None,
        tokenizer: Any = None,
        mode: str = "quality",
        batch_size: int | str = 8,
        max_batch_size: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        attn_implementation: str | None = None,
        adapter: str | None = None,
        mc_num: int = 32,
        seed: int = 0,
        max_length: int | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        valid = EditGenerationConfig.valid_fields()
        unknown = [key for key in fields if key not in valid]
        if unknown:
            names = sorted(valid | set(MODEL_ARGS))
            hints = {key: difflib.get_close_matches(key, names, n=3) for key in unknown}
            raise TypeError(
                f"Unknown --model_args key(s) {unknown} for the dllm_edit model. Closest valid names: "
                f"{hints}. Valid keys: the loading arguments {sorted(MODEL_ARGS)} and any "
                "EditGenerationConfig field."
            )
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {sorted(MODES)}, got {mode!r}.")
        if isinstance(batch_size, str) and batch_size.isdigit():
            batch_size = int(batch_size)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"`batch_size` must be an int >= 1, got {batch_size!r} (an automatic batch size is not "
                "supported: pass --batch_size N)."
            )
        if max_batch_size is not None:
            raise ValueError(
                f"`max_batch_size` ({max_batch_size}) only bounds lm-eval's automatic batch size, which the "
                "dllm_edit model does not support: drop it and pass --batch_size N."
            )
        for name, value, minimum in (("mc_num", mc_num, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
        self.config = EditGenerationConfig.from_mode(mode, **fields)  # validates every field first
        self._rank, self._world_size = distributed.process_group()
        self.model, self.tokenizer = _load(
            pretrained, tokenizer, trust_remote_code, revision, dtype, attn_implementation
        )
        self._device = _pick_device(device, self._rank, self._world_size)
        torch.nn.Module.to(self.model, self._device)  # in place (transformers retypes `.to`)
        self.model.eval()
        self.special = resolve_special_tokens(self.model, self.config, self.tokenizer)
        self.adapter = adapter
        self.batch_size = batch_size
        self.mc_num = mc_num
        self.seed = seed
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_length = max_length if max_length is not None else limit
        self.generator = torch.Generator(device=self._device).manual_seed(seed)
        self.stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._forward: DiffusionForward | None = None

    # ------------------------------------------------------------------ lm-eval plumbing
    @property
    def eot_token_id(self) -> int:
        if not self.special.eos:
            raise ValueError("The model has no EOS token id; set eos_token_id in --model_args.")
        return self.special.eos[0]

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "tokenizer")).replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return list(self.tokenizer(string, add_special_tokens=add_special_tokens is not False)["input_ids"])

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The tokenizer's chat template on lm-eval's messages (for `--apply_chat_template`).

        Raises:
            ValueError: the tokenizer has no chat template.
        """
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                "--apply_chat_template needs a tokenizer with a chat template; this one has none. "
                "Drop --apply_chat_template for a base model."
            )
        return str(
            self.tokenizer.apply_chat_template(
                chat_history,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
            )
        )

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return distributed.all_gather_stacked(tensor) if self._world_size > 1 else tensor[None]

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        return distributed.gather_to(obj, dst) if self._world_size > 1 else [obj]

    def barrier(self) -> None:
        if self._world_size > 1:
            distributed.barrier()

    def get_model_info(self) -> dict[str, Any]:
        """Written by lm-eval into `results["config"]`: the decoding settings and statistics."""
        return {
            "dllm_edit": {
                "generation_config": self.config.to_diff_dict(),
                "batch_size": self.batch_size,
                "mc_num": self.mc_num,
                "seed": self.seed,
                "world_size": self._world_size,
                "statistics": {kind: dict(values) for kind, values in self.stats.items()},
            }
        }

    # ------------------------------------------------------------------ generate_until
    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Decode every request's context; each row's text is cut at its own `until` strings."""
        parsed = [split_gen_kwargs(req.args[1], i) for i, req in enumerate(requests)]
        groups: dict[Any, list[int]] = defaultdict(list)
        for index, (_, overrides) in enumerate(parsed):
            groups[group_key(overrides)].append(index)
        configs = {key: self.config.replace(**parsed[idx[0]][1]) for key, idx in groups.items()}
        batches = []
        for key, indices in groups.items():
            ordered = sorted(indices, key=lambda i: -len(self.tok_encode(requests[i].args[0])))
            batches += [
                (key, ordered[i : i + self.batch_size]) for i in range(0, len(ordered), self.batch_size)
            ]
        texts: list[str] = [""] * len(requests)
        rows = tokens = forwards = 0.0
        bar = tqdm(batches, desc="dllm_edit generate_until", disable=disable_tqdm or self._rank != 0)
        for key, batch in bar:
            config = configs[key]
            contexts = [requests[i].args[0] for i in batch]
            sequences, per_row_tpf, per_row_forwards, width = self._decode(contexts, config)
            decoded = self.tokenizer.batch_decode(sequences[:, width:], skip_special_tokens=True)
            for i, text in zip(batch, decoded, strict=True):
                texts[i] = cut_at_stop(text, parsed[i][0])
                self.cache_hook.add_partial("generate_until", requests[i].args, texts[i])
            rows += len(batch)
            forwards += float(per_row_forwards.sum())
            tokens += float((per_row_tpf * per_row_forwards).sum())
            bar.set_postfix(tokens_per_forward=f"{tokens / max(forwards, 1):.2f}")
        self._record("generate_until", rows=rows, tokens=tokens, forwards=forwards)
        return texts

    def _decode(
        self, contexts: list[str], config: EditGenerationConfig
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Sequences `[B, W + G]`, tokens per forward `[B]`, forwards `[B]` and the prompt width `W`."""
        enc = self.tokenizer(contexts, return_tensors="pt", padding=True, padding_side="left")
        input_ids, attention_mask = enc["input_ids"], enc["attention_mask"]  # [B, W]
        if self.max_length is not None:
            keep = self.max_length - config.max_new_tokens - config.block_length
            if keep < 1:
                raise ValueError(
                    f"max_new_tokens ({config.max_new_tokens}) + block_length ({config.block_length}) leaves "
                    f"no room for a prompt within max_length {self.max_length}."
                )
            if input_ids.shape[1] > keep:
                logger.warning("dllm_edit: contexts longer than %d tokens are cut from the left.", keep)
                input_ids, attention_mask = input_ids[:, -keep:], attention_mask[:, -keep:]
        out = generate(
            self.model,
            input_ids.to(self._device),
            attention_mask=attention_mask.to(self._device),
            generation_config=config,
            adapter=self.adapter,
            generator=self.generator,
            tokenizer=self.tokenizer,
            return_dict_in_generate=True,
        )
        if (
            not isinstance(out, EditGenerationOutput)
            or out.sequences is None
            or out.tokens_per_forward is None
            or out.num_forwards is None
        ):
            raise TypeError("generate did not return an EditGenerationOutput")
        return out.sequences, out.tokens_per_forward, out.num_forwards, input_ids.shape[1]

    # ------------------------------------------------------------------ likelihoods
    def _loglikelihood_tokens(
        self,
        requests: list[tuple[tuple[str, str], list[int], list[int]]],
        disable_tqdm: bool = False,
        **kwargs: Any,
    ) -> list[tuple[float, bool]]:
        pairs = [self._fit(context, continuation) for _, context, continuation in requests]
        logps = self._elbo(pairs, "loglikelihood", disable_tqdm)
        greedy = [False] * len(pairs)
        by_length: dict[int, list[int]] = defaultdict(list)
        for index, (_, continuation) in enumerate(pairs):
            by_length[len(continuation)].append(index)
        forwards = 0
        for indices in by_length.values():
            for start in range(0, len(indices), self.batch_size):
                chunk = indices[start : start + self.batch_size]
                matches, spent = greedy_matches(
                    self.model,
                    [pairs[i] for i in chunk],
                    self.config,
                    pad_id=self.special.pad,
                    device=self._device,
                    tokenizer=self.tokenizer,
                )
                forwards += spent
                for i, match in zip(chunk, matches, strict=True):
                    greedy[i] = bool(match)
        self._record("loglikelihood_greedy_check", rows=len(pairs), forwards=forwards)
        results = list(zip(logps, greedy, strict=True))
        for (key, _, _), result in zip(requests, results, strict=True):
            self.cache_hook.add_partial("loglikelihood", key, result)
        return results

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """The ELBO of each whole text given the prefix token.

        Raises:
            NotImplementedError: a text longer than `max_length` tokens: a diffusion ELBO is not a sum
                over left-to-right windows, so lm-eval's rolling windows do not apply.
        """
        pairs = []
        for (text,) in (req.args for req in requests):
            tokens = self.tok_encode(text, add_special_tokens=False)
            if self.max_length is not None and len(tokens) + 1 > self.max_length:
                raise NotImplementedError(
                    f"loglikelihood_rolling of a text of {len(tokens)} tokens: longer than max_length "
                    f"{self.max_length}. The diffusion ELBO is computed on the whole text in one piece; "
                    "rolling windows are not implemented for diffusion LMs."
                )
            pairs.append(([self.prefix_token_id], tokens))
        logps = self._elbo(pairs, "loglikelihood_rolling", disable_tqdm)
        for req, logp in zip(requests, logps, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, logp)
        return logps

    def _fit(self, context: list[int], continuation: list[int]) -> tuple[list[int], list[int]]:
        """Cut the context from the left so that context + continuation fit `max_length`."""
        if self.max_length is None or len(context) + len(continuation) <= self.max_length:
            return context, continuation
        room = self.max_length - len(continuation)
        if room < 1:
            raise ValueError(
                f"A continuation of {len(continuation)} tokens does not fit max_length {self.max_length}."
            )
        return context[-room:], continuation

    def _elbo(self, pairs: list[tuple[list[int], list[int]]], kind: str, disable_tqdm: bool) -> list[float]:
        if self._forward is None:
            form = resolve_attention_form(self.model, "auto")
            self._forward = DiffusionForward(self.model, form, self.config.block_length)
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        out = [0.0] * len(pairs)
        forwards = 0
        starts = range(0, len(order), self.batch_size)
        for start in tqdm(starts, desc=f"dllm_edit {kind}", disable=disable_tqdm or self._rank != 0):
            chunk = order[start : start + self.batch_size]
            logps, spent = elbo_loglikelihoods(
                self._forward,
                [pairs[i] for i in chunk],
                [request_seed(self.seed, *pairs[i]) for i in chunk],
                mask_token_id=self.special.mask,
                pad_id=self.special.pad,
                mc_num=self.mc_num,
                device=self._device,
            )
            forwards += spent
            for i, logp in zip(chunk, logps, strict=True):
                out[i] = logp
        self._record(kind, rows=len(pairs), forwards=forwards)
        return out

    # ------------------------------------------------------------------ statistics
    def _record(self, kind: str, **counts: float) -> None:
        """Add this call's counts (summed over all ranks) to `stats[kind]`, and log them on rank 0."""
        if self._world_size > 1:
            counts = {k: sum(part[k] for part in distributed.all_gather_objects(counts)) for k in counts}
        entry = self.stats[kind]
        for key, value in counts.items():
            entry[key] += value
        if "tokens" in entry:
            entry["tokens_per_forward"] = entry["tokens"] / max(entry["forwards"], 1.0)
        if self._rank == 0:
            logger.info("dllm_edit %s: %s", kind, dict(entry))


def _pick_device(requested: str | None, rank: int, world_size: int) -> torch.device:
    """The device of this rank. lm-eval's command line always passes one (default `cuda:0`): like its
    own `hf` model, a CUDA device without CUDA falls back to the CPU with a warning, and under
    several processes each rank takes its own device (`cuda:<local rank>` or the CPU)."""
    import os

    cuda = torch.cuda.is_available()
    if world_size > 1:
        local = int(os.environ.get("LOCAL_RANK", rank))
        chosen = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
        if requested is not None and torch.device(requested) != chosen:
            logger.info(
                "dllm_edit: rank %d runs on %s (device %r names one process).", rank, chosen, requested
            )
        return chosen
    if requested is None:
        return torch.device("cuda" if cuda else "cpu")
    if torch.device(requested).type == "cuda" and not cuda:
        logger.warning("dllm_edit: device %r requested but CUDA is not available; using the CPU.", requested)
        return torch.device("cpu")
    return torch.device(requested)


def _load(
    pretrained: Any, tokenizer: Any, trust_remote_code: bool, revision: Any, dtype: Any, attn: Any
) -> tuple[Any, Any]:
    """The model and tokenizer named by `pretrained` / `tokenizer` (see `DllmEditLM`)."""
    from transformers import AutoTokenizer

    if pretrained is None or pretrained == "default":
        from dllm_edit.shipped import load_default

        model, default_tokenizer = load_default()
        if dtype not in (None, "auto"):
            model = model.to(getattr(torch, str(dtype)))
    elif isinstance(pretrained, str):
        from dllm_edit.cli.loading import load_model_and_tokenizer

        model, default_tokenizer = load_model_and_tokenizer(
            pretrained,
            trust_remote_code=trust_remote_code,
            revision=revision,
            dtype=dtype,
            attn_implementation=attn,
        )
    else:
        model, default_tokenizer = pretrained, None
    if isinstance(tokenizer, str):
        tokenizer = AutoTokenizer.from_pretrained(
            tokenizer, trust_remote_code=trust_remote_code, revision=revision
        )
    tokenizer = tokenizer if tokenizer is not None else default_tokenizer
    if tokenizer is None:
        raise ValueError("`tokenizer` is required when `pretrained` is a loaded model.")
    return model, tokenizer
