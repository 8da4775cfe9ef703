"""One training forward of a diffusion LM on a corrupted batch: logits at the noisy positions.

Four forms, picked from the model's decoding adapter (or named explicitly):

- `"block_diffusion"` (block-causal models such as LLaDA2.x): the vectorised block-diffusion form.
  The input is the clean copy `x_0` followed by the noisy copy `x_t` (`[x_0 ⊕ x_t]`, length `2T`),
  both copies reusing position ids `0..T-1`, under the attention rule

  | query \\ key | clean block j                | noisy block j   |
  |--------------|------------------------------|-----------------|
  | clean block i| j <= i (block-causal)        | never           |
  | noisy block i| j < i (strictly earlier)     | j == i          |

  so that every noisy block is predicted from the clean past and its own noisy block, exactly what
  it sees at inference with a cache of finished blocks; all blocks train in one forward. (The clean
  copy goes first so that `logits_to_keep` returns only the noisy half.)
- `"bidirectional"`: full attention over `x_t` (LLaDA-style models), 4-D mask hiding padding.
- `"shifted"` (Dream-style models, and autoregressive checkpoints converted to diffusion that keep
  their next-token head): the bidirectional form, read one position to the left: the prediction for
  position `j` is the model's output at `j - 1`, and a row's first valid position reads its own
  output (the rule of the decoding adapter `dllm_edit.adapters.ShiftedLogitsAdapter`).
- `"block_diffusion_shifted"` (autoregressive checkpoints converted to block diffusion that keep
  their next-token head, as Fast-dLLM v2): the block-diffusion input and attention, read one
  position to the left: the prediction for noisy position `j` is the noisy copy's output at `j - 1`
  inside a block, and the *clean* copy's output at `j - 1` for a block's first position (the
  previous block's last output, which at decoding comes from the finished block); a row's first
  valid position reads its own output. The rule of the decoding adapter
  `dllm_edit.adapters.BlockCausalShiftedAdapter`.
- `"masked_lm"`: `x_t` with a 2-D padding mask (BERT-family masked LMs).

A model trained in a form whose decoding adapter is not the one detected for it (a Llama trained
`"bidirectional"` or `"shifted"`) gets `config.dllm_edit_adapter` set by `declare_decoding_adapter`,
so its checkpoints decode with the adapter that matches their training.

Padding keys are always hidden; a padding query attends to itself only, so no softmax row is empty
(`dllm_edit.adapters.attention.with_padding_rule`, the rule the decoding adapters apply too).
The 4-D masks go through `dllm_edit.adapters.attention.backend_mask`, the form the decoding engine
uses, so training and decoding see the same attention.

With `fused_lm_head=True`, `DiffusionForward.scores` returns the final hidden states and the output
projection (`dllm_edit.trainers.hidden_states.HiddenStates`) instead of the `[B, T, V]` logits: the
model runs with `logits_to_keep` naming one position, its decoder's output is read by a forward hook
(so DDP / PEFT wrappers still run their own forward), and the one kept logit row is compared with
`hidden @ weight.T + bias`, which refuses models whose logits are post-processed (final-logit
softcapping, logit scaling) with an error instead of training on a different loss.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from transformers.utils import logging

from dllm_edit.adapters import DECLARED_ADAPTER_ATTRIBUTE, detect_adapter
from dllm_edit.adapters.attention import backend_mask, with_padding_rule
from dllm_edit.adapters.base import attn_implementation, forward_kwargs, model_dtype, output_logits
from dllm_edit.adapters.shifted import previous_position_outputs

from .hidden_states import HiddenStates

logger = logging.get_logger(__name__)

AttentionForm = Literal["block_diffusion", "block_diffusion_shifted", "bidirectional", "shifted", "masked_lm"]
ATTENTION_FORMS: tuple[str, ...] = (
    "block_diffusion",
    "block_diffusion_shifted",
    "bidirectional",
    "shifted",
    "masked_lm",
)
#: Forms whose input is the clean copy followed by the noisy one (`[x_0 ⊕ x_t]`, length `2T`).
TWO_COPY_FORMS: tuple[str, ...] = ("block_diffusion", "block_diffusion_shifted")

# Decoding adapters (`dllm_edit.adapters`) and the training form that matches each.
_FORM_OF_ADAPTER = {
    "block_causal": "block_diffusion",
    "block_causal_shifted": "block_diffusion_shifted",
    "bidirectional": "bidirectional",
    "bidirectional_approx_cache": "bidirectional",
    "shifted": "shifted",
    "masked_lm": "masked_lm",
}
# Each training form and the decoding adapter that runs a model trained in it.
ADAPTER_OF_FORM = {
    "block_diffusion": "block_causal",
    "block_diffusion_shifted": "block_causal_shifted",
    "bidirectional": "bidirectional",
    "shifted": "shifted",
    "masked_lm": "masked_lm",
}


def block_diffusion_allowed(valid: torch.Tensor, block_length: int) -> torch.Tensor:
    """The attention rule of vectorised block-diffusion training over `[x_0 ⊕ x_t]`.

    Args:
        valid: BoolTensor `[B, T]`, non-padding positions.
        block_length: tokens per block.

    Returns:
        BoolTensor `[B, 2T, 2T]`: entry `[b, q, k]` says whether query `q` may attend to key `k`
        (indices `< T` are the clean copy, `>= T` the noisy copy).

    Examples:
        >>> import torch
        >>> allowed = block_diffusion_allowed(torch.ones(1, 4, dtype=torch.bool), block_length=2)
        >>> allowed[0].int().tolist()  # rows: clean 0-3, noisy 0-3; columns likewise
        [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0, 1, 1]]
    """  # noqa: E501
    length = valid.shape[1]
    device = valid.device
    block = torch.arange(length, device=device) // block_length  # [T]
    q_block, k_block = block[:, None], block[None, :]  # [T, 1], [1, T]
    clean_clean = k_block <= q_block  # [T, T]
    noisy_clean = k_block < q_block  # [T, T]
    noisy_noisy = k_block == q_block  # [T, T]
    never = torch.zeros_like(clean_clean)  # [T, T] clean never sees noisy
    rule = torch.cat(
        [torch.cat([clean_clean, never], dim=1), torch.cat([noisy_clean, noisy_noisy], dim=1)], dim=0
    )  # [2T, 2T]
    token_valid = torch.cat([valid, valid], dim=1).bool()  # [B, 2T]
    self_only = torch.eye(2 * length, dtype=torch.bool, device=device)  # [2T, 2T]
    return with_padding_rule(rule, token_valid, token_valid, self_only)  # [B, 2T, 2T]


def bidirectional_allowed(valid: torch.Tensor) -> torch.Tensor:
    """Full attention over the valid positions. `valid`: `[B, T]` → BoolTensor `[B, T, T]`."""
    valid = valid.bool()
    self_only = torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device)  # [T, T]
    return with_padding_rule(torch.ones_like(self_only), valid, valid, self_only)  # [B, T, T]


def resolve_attention_form(model: Any, requested: str) -> AttentionForm:
    """`requested` itself, or for `"auto"` the form matching the model's decoding adapter.

    Raises:
        ValueError: unknown form, or `"auto"` on a model whose adapter has no training form (a
            third-party adapter).
    """
    if requested in ATTENTION_FORMS:
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(
            f"`diffusion_attention` must be 'auto' or one of {list(ATTENTION_FORMS)}, got {requested!r}."
        )
    adapter = detect_adapter(unwrap(model))
    if adapter not in _FORM_OF_ADAPTER:
        raise ValueError(
            f"The model decodes with the {adapter!r} adapter, which has no training form here. Set "
            f"`diffusion_attention` to one of {list(ATTENTION_FORMS)} explicitly."
        )
    return _FORM_OF_ADAPTER[adapter]  # type: ignore[return-value]


def declare_decoding_adapter(model: Any, form: str) -> str | None:
    """Record in `model.config.dllm_edit_adapter` the decoding adapter of training form `form`, when
    auto-detection would pick another built-in one (a Llama trained `"shifted"` would otherwise decode
    block-causally), and log it. Saved checkpoints then decode the way they were trained.

    A model whose detected adapter is a third-party one is left alone (its plugin knows its form).

    Args:
        model: the model being trained (DDP / PEFT wrappers are looked through).
        form: one of `ATTENTION_FORMS`.

    Returns:
        The adapter name written, or None when nothing needed writing.

    Examples:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        >>> declare_decoding_adapter(model, "shifted"), model.config.dllm_edit_adapter
        ('shifted', 'shifted')
        >>> declare_decoding_adapter(model, "shifted") is None  # already decodes that way
        True
    """
    inner = unwrap(model)
    detected = detect_adapter(inner)
    wanted = ADAPTER_OF_FORM[form]
    if detected not in _FORM_OF_ADAPTER or _FORM_OF_ADAPTER[detected] == form:
        return None
    setattr(inner.config, DECLARED_ADAPTER_ATTRIBUTE, wanted)
    logger.info(f"Training form {form!r}: config.{DECLARED_ADAPTER_ATTRIBUTE} = {wanted!r}.")
    return wanted


def unwrap(model: Any) -> Any:
    """The transformers model inside DDP / PEFT wrappers (for reading its config and signature)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


class DiffusionForward:
    """Runs a model on a corrupted batch in one of the training forms (see the module docstring).

    Args:
        model: a transformers model (possibly PEFT- or DDP-wrapped) with a language-modelling head.
        form: one of `ATTENTION_FORMS` (`"block_diffusion"`, `"block_diffusion_shifted"`,
            `"bidirectional"`, `"shifted"`, `"masked_lm"`).
        block_length: tokens per block (the block-diffusion forms).
        fused_lm_head: make `scores` return `HiddenStates` (final hidden states and the output
            projection) instead of logits (see the module docstring). Needs a model that takes
            `logits_to_keep`, a decoder (`get_decoder()`) and a plain `torch.nn.Linear` output
            embedding; not the `"masked_lm"` form (BERT heads transform before the projection).

    Raises:
        ValueError: unknown form, or `fused_lm_head=True` on a model that cannot give its hidden
            states this way.

    Examples:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        >>> forward = DiffusionForward(model, "block_diffusion", block_length=4)
        >>> clean = torch.randint(0, 16, (2, 8))
        >>> forward(clean, clean, torch.ones(2, 8, dtype=torch.bool)).shape
        torch.Size([2, 8, 16])
    """

    def __init__(
        self, model: Any, form: AttentionForm, block_length: int, fused_lm_head: bool = False
    ) -> None:
        if form not in ATTENTION_FORMS:
            raise ValueError(f"`form` must be one of {list(ATTENTION_FORMS)}, got {form!r}.")
        self.model = model
        self.form = form
        self.block_length = block_length
        inner = unwrap(model)
        accepted = forward_kwargs(inner)
        self.pass_positions = "position_ids" in accepted or "kwargs" in accepted
        self.pass_logits_to_keep = "logits_to_keep" in accepted
        self.attn = attn_implementation(inner)
        self.dtype = model_dtype(inner)
        self.fused_lm_head = fused_lm_head
        if fused_lm_head:
            self.decoder, self.head = _fused_parts(inner, form, self.pass_logits_to_keep)

    def __call__(self, noisy: torch.Tensor, clean: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Logits `[B, T, V]` at the positions of the noisy copy.

        Args:
            noisy: LongTensor `[B, T]`, `x_t`.
            clean: LongTensor `[B, T]`, `x_0` (read by the block-diffusion form only).
            valid: BoolTensor `[B, T]`, non-padding positions.
        """
        length = noisy.shape[1]
        kwargs = self._inputs(noisy, clean, valid)
        if self.form == "block_diffusion_shifted":
            sources = block_shifted_sources(valid, self.block_length)  # [B, T] into the 2T outputs
            if self.pass_logits_to_keep:  # the clean copy's block ends, then the noisy copy
                kept = kept_block_ends_and_noisy(length, self.block_length, noisy.device)  # [T/bl + T]
                kwargs["logits_to_keep"] = kept
                sources = torch.searchsorted(kept, sources)  # [B, T] into the kept rows
            logits = output_logits(self.model, self.model(**kwargs))  # [B, 2T or T/bl + T, V]
            index = sources[:, :, None].expand(-1, -1, logits.shape[-1])  # [B, T, V] (a view)
            return logits.gather(1, index)  # [B, T, V]
        if self.form == "block_diffusion" and self.pass_logits_to_keep:
            kwargs["logits_to_keep"] = length
        logits = output_logits(self.model, self.model(**kwargs))  # [B, T or 2T, V]
        logits = logits[:, -length:]  # [B, T, V]
        return shift_to_predictions(logits, valid) if self.form == "shifted" else logits

    def scores(
        self, noisy: torch.Tensor, clean: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor | HiddenStates:
        """What the loss reads at the noisy positions: logits `[B, T, V]`, or `HiddenStates` with
        hidden `[B, T, H]` when `fused_lm_head` is on. Arguments as for calling the object.

        Raises:
            ValueError: (fused) the model's logits are not `hidden @ weight.T + bias`.
        """
        if not self.fused_lm_head:
            return self(noisy, clean, valid)
        length = noisy.shape[1]
        kwargs = self._inputs(noisy, clean, valid)
        last = kwargs["input_ids"].shape[1] - 1
        kwargs["logits_to_keep"] = torch.tensor([last], device=noisy.device)  # one row, to check
        captured: list[torch.Tensor] = []

        def keep(module: Any, args: Any, output: Any) -> None:
            captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

        handle = self.decoder.register_forward_hook(keep)
        try:
            kept = output_logits(self.model, self.model(**kwargs))  # [B, 1, V]
        finally:
            handle.remove()
        hidden = captured[-1]  # [B, T or 2T, H]
        weight, bias = self.head.weight, self.head.bias
        with torch.no_grad():
            expected = F.linear(hidden[:, last:], weight, bias).float()  # [B, 1, V]
            got = kept[:, -1:].float()  # [B, 1, V]
            if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-2, atol=1e-2):
                raise ValueError(
                    f"fused_lm_head=True: {type(unwrap(self.model)).__name__}'s logits are not its decoder's "
                    "output times the output embedding (post-processed logits, e.g. final-logit softcapping "
                    "or logit scaling, or a head that transforms first); the fused loss would differ. Set "
                    "fused_lm_head=False."
                )
        if self.form == "block_diffusion_shifted":
            sources = block_shifted_sources(valid, self.block_length)  # [B, T] into the 2T positions
            index = sources[:, :, None].expand(-1, -1, hidden.shape[-1])  # [B, T, H] (a view)
            return HiddenStates(hidden.gather(1, index), weight, bias)  # hidden [B, T, H]
        hidden = hidden[:, -length:]  # [B, T, H]
        if self.form == "shifted":
            hidden = shift_to_predictions(hidden, valid)
        return HiddenStates(hidden, weight, bias)  # hidden [B, T, H]

    def _inputs(self, noisy: torch.Tensor, clean: torch.Tensor, valid: torch.Tensor) -> dict[str, Any]:
        """The model's keyword arguments for this form."""
        batch, length = noisy.shape
        positions = torch.arange(length, device=noisy.device).expand(batch, length)  # [B, T]
        kwargs: dict[str, Any] = {"use_cache": False}
        if self.form == "masked_lm":
            kwargs.update(input_ids=noisy, attention_mask=valid.long())
            return kwargs
        if self.form in ("bidirectional", "shifted"):
            allowed = bidirectional_allowed(valid)  # [B, T, T]
            kwargs.update(input_ids=noisy, attention_mask=backend_mask(allowed, self.attn, self.dtype))
            if self.pass_positions:
                kwargs["position_ids"] = positions
            return kwargs
        allowed = block_diffusion_allowed(valid, self.block_length)  # [B, 2T, 2T]
        kwargs.update(
            input_ids=torch.cat([clean, noisy], dim=1),  # [B, 2T]
            attention_mask=backend_mask(allowed, self.attn, self.dtype),  # [B, 1, 2T, 2T]
        )
        if self.pass_positions:
            kwargs["position_ids"] = torch.cat([positions, positions], dim=1)  # [B, 2T]
        return kwargs


def block_shifted_sources(valid: torch.Tensor, block_length: int) -> torch.Tensor:
    """Where the `"block_diffusion_shifted"` form reads each noisy position's prediction in the
    `[x_0 ⊕ x_t]` outputs (clean copy `0..T-1`, noisy copy `T..2T-1`).

    Noisy position `j` reads the noisy copy at `j - 1` inside its block, the clean copy at `j - 1`
    when `j` starts a block (the previous block's last output, which sees only finished blocks, as
    at decoding), and its own noisy output when nothing of its row precedes it.

    Args:
        valid: BoolTensor `[B, T]`, non-padding positions.
        block_length: tokens per block.

    Returns:
        LongTensor `[B, T]`, indices into the `2T` positions.

    Examples:
        >>> import torch
        >>> block_shifted_sources(torch.ones(1, 6, dtype=torch.bool), block_length=3).tolist()
        [[6, 6, 7, 2, 9, 10]]
    """
    length = valid.shape[1]
    j = torch.arange(length, device=valid.device)  # [T]
    first = valid.long().argmax(dim=1)  # [B] each row's first valid position
    inside = torch.where(j % block_length == 0, j - 1, length + j - 1)  # [T] clean at a block start
    own = j[None, :] - 1 < first[:, None]  # [B, T] nothing of the row before j
    return torch.where(own, length + j[None, :], inside[None, :])  # [B, T]


def kept_block_ends_and_noisy(length: int, block_length: int, device: torch.device) -> torch.Tensor:
    """The positions of `[x_0 ⊕ x_t]` whose outputs the `"block_diffusion_shifted"` form reads: the
    clean copy's last position of every block, then the whole noisy copy (LongTensor `[T/bl + T]`,
    ascending, for `logits_to_keep`)."""
    block_ends = torch.arange(block_length - 1, length, block_length, device=device)  # [T/bl]
    return torch.cat([block_ends, torch.arange(length, 2 * length, device=device)])  # [T/bl + T]


def shift_to_predictions(outputs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """A shifted model's outputs re-indexed by the position they predict: row `j` becomes the output
    at `j - 1`; a row's first valid position keeps its own output (nothing precedes it), as
    `dllm_edit.adapters.ShiftedLogitsAdapter` reads them at decoding.

    Args:
        outputs: `[B, T, D]`, logits or hidden states, one row per position.
        valid: BoolTensor `[B, T]`, non-padding positions (left or right padding).

    Returns:
        `[B, T, D]`; padding positions read their own or a neighbour's row (never supervised).

    Examples:
        >>> import torch
        >>> out = torch.arange(4.0).view(1, 4, 1)
        >>> shift_to_predictions(out, torch.tensor([[False, True, True, True]]))[0, :, 0]
        tensor([1., 1., 1., 2.])
    """
    first = valid.long().argmax(dim=1)  # [B] each row's first valid position
    positions = torch.arange(outputs.shape[1], device=outputs.device)  # [T]
    return previous_position_outputs(outputs, first, positions)  # [B, T, D]


def _fused_parts(
    inner: Any, form: str, takes_logits_to_keep: bool
) -> tuple[torch.nn.Module, torch.nn.Linear]:
    """`(decoder, output projection)` of a model for `fused_lm_head=True`, or a ValueError saying why not."""
    name = type(inner).__name__
    why = None
    decoder = inner.get_decoder() if callable(getattr(inner, "get_decoder", None)) else None
    get_head = getattr(inner, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if form == "masked_lm":
        why = "the masked_lm form (BERT-style heads transform the hidden states before the projection)"
    elif not takes_logits_to_keep:
        why = f"{name}.forward takes no `logits_to_keep`"
    elif not isinstance(decoder, torch.nn.Module) or decoder is inner:
        why = f"{name} has no separate decoder (`get_decoder()`)"
    elif type(head) is not torch.nn.Linear:
        kind = type(head).__name__
        why = f"{name}'s output embedding is {kind}, not a plain torch.nn.Linear (e.g. LoRA on lm_head)"
    if why is not None:
        raise ValueError(f"fused_lm_head=True is not available: {why}. Set fused_lm_head=False.")
    return decoder, head  # type: ignore[return-value]
