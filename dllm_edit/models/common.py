"""Pieces every native model family shares: attention masks in any form, the attention call through
transformers' backends (eager and SDPA), rotary embeddings, the output's cache field and config-field
checks.

The families (`dllm_edit.models.llada`, `dream`, `llada_moe`, `llada2_moe`) keep their checkpoints'
parameter names and config fields, and compute with transformers' own functions (SDPA from
`ALL_ATTENTION_FUNCTIONS`, Llama's eager attention and rotary helpers, `Cache.update`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import eager_attention_forward, rotate_half

#: The name of a model output's cache field in the installed transformers: `past_key_values` (4.x)
#: or `cache` (5.2x, which warns on the old name). Forwards also take their cache under either name.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_argument(past_key_values: Any, kwargs: dict[str, Any]) -> Any:
    """The cache a forward was given: `past_key_values`, or `cache=` (transformers 5.2x's name),
    taken out of `kwargs`."""
    cache = kwargs.pop("cache", None)
    return past_key_values if past_key_values is not None else cache


#: Attention implementations a native class runs: flash attention takes no arbitrary 4-D mask, and
#: transformers' flex attention takes a `BlockMask`, not the tensor masks the decoding adapters build.
SUPPORTED_ATTENTION = ("eager", "sdpa")


def attention_mask_4d(
    attention_mask: torch.Tensor | None,
    *,
    query_length: int,
    key_length: int,
    dtype: torch.dtype,
    attn_implementation: str | None,
) -> torch.Tensor | None:
    """The 4-D mask `[B, 1, Q, K]` the attention backend takes, from any mask a caller may pass.

    Diffusion LMs attend in both directions: no mask means every query sees every key. A 2-D
    padding mask `[B, K]` (1 = token, 0 = padding) hides padding keys, as the families' remote code
    does. A 4-D mask (the decoding adapters' block-causal, full or shadow-block masks, boolean with
    True = attend, or additive floats) is used as it is: its width is the caller's count of the keys
    the cache will return, which is not always past + new tokens (the dual cache writes its span in
    place, so its keys are the canvas, not the canvas plus the span).

    Args:
        attention_mask: None, `[B, K]` 0/1 (any dtype), or `[B, 1, Q, K]` bool / float.
        query_length: Q, the queries of this forward.
        key_length: K, the keys (cached ones included), for a 2-D mask.
        dtype: the model's float dtype, for additive masks.
        attn_implementation: the backend; eager takes additive floats, SDPA booleans.

    Returns:
        None (attend everywhere) or `[B, 1, Q, K]`.

    Raises:
        ValueError: a mask of another rank, or a length that does not match.

    Examples:
        >>> import torch
        >>> mask = attention_mask_4d(torch.tensor([[0, 1, 1]]), query_length=3, key_length=3,
        ...                          dtype=torch.float32, attn_implementation="sdpa")
        >>> mask.shape, mask[0, 0, 0].tolist()
        (torch.Size([1, 1, 3, 3]), [False, True, True])
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() == 2:
        if attention_mask.shape[-1] != key_length:
            raise ValueError(
                f"`attention_mask` [batch, keys] has {attention_mask.shape[-1]} keys, the forward has "
                f"{key_length} (cached and new tokens); pass a mask over every key, or a 4-D mask."
            )
        keys = attention_mask.to(torch.bool)[:, None, None, :]  # [B, 1, 1, K]
        mask = keys.expand(-1, 1, query_length, key_length)  # [B, 1, Q, K]
    elif attention_mask.dim() == 4:
        if attention_mask.shape[-2] != query_length:
            raise ValueError(
                f"`attention_mask` [batch, 1, queries, keys] is {tuple(attention_mask.shape)}; this forward "
                f"has {query_length} queries."
            )
        mask = attention_mask  # [B, 1, Q, K]
    else:
        raise ValueError(
            f"`attention_mask` must be None, 2-D [batch, keys] or 4-D [batch, 1, queries, keys], got "
            f"shape {tuple(attention_mask.shape)}."
        )
    if (attn_implementation or "eager") == "eager" and mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, torch.finfo(dtype).min)  # [B, 1, Q, K] additive
    return mask


def attention_function(attn_implementation: str | None) -> Callable[..., tuple[torch.Tensor, Any]]:
    """transformers' attention function for `attn_implementation` (eager: Llama's).

    Raises:
        ValueError: flash or flex attention (no arbitrary tensor 4-D mask) or an unknown backend.
    """
    impl = attn_implementation or "eager"
    if impl == "eager":
        return eager_attention_forward
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"attn_implementation={impl!r} is not supported by dllm_edit's native models: diffusion "
            f"decoding needs arbitrary 4-D masks. Use one of {list(SUPPORTED_ATTENTION)}."
        )
    return ALL_ATTENTION_FUNCTIONS[impl]


def rotary_cos_sin(
    position_ids: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(cos, sin)` `[B, T, D]` of standard RoPE at `position_ids` `[B, T]`, computed in float32.

    Args:
        position_ids: LongTensor `[B, T]`.
        inv_freq: `[D / 2]`, `1 / base ** (arange(0, D, 2) / D)`.
        dtype: the dtype of the returned tables.
    """
    freqs = position_ids[:, :, None].float() * inv_freq[None, None, :].float()  # [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_inv_freq(dim: int, base: float) -> torch.Tensor:
    """`[dim / 2]` inverse frequencies of standard RoPE (float32)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on `q` `[B, H, T, D]` and `k` `[B, Hkv, T, D]` with `cos`/`sin` `[B, T, R]`: the first
    `R` dimensions of each head rotate, the rest pass through (`partial_rotary_factor < 1`).

    Examples:
        >>> import torch
        >>> q = torch.ones(1, 1, 2, 4); cos = torch.ones(1, 2, 2); sin = torch.zeros(1, 2, 2)
        >>> torch.equal(apply_rotary(q, q, cos, sin)[0], q)  # angle 0: nothing turns
        True
    """
    rotary = cos.shape[-1]
    if rotary < q.shape[-1]:
        q_rot, k_rot = apply_rotary(q[..., :rotary], k[..., :rotary], cos, sin)  # [B, H(kv), T, R]
        return torch.cat((q_rot, q[..., rotary:]), dim=-1), torch.cat((k_rot, k[..., rotary:]), dim=-1)
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def attend(
    module: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    past_key_values: Any,
    cache_position: torch.Tensor | None,
    **kwargs: Any,
) -> torch.Tensor:
    """The tail every family's attention runs: keys and values through `Cache.update` (when a cache
    is given), then transformers' attention backend over what the cache returns.

    Args:
        module: the attention module (its `config._attn_implementation`, `layer_idx`, `scaling`,
            `attention_dropout`, `num_key_value_groups` and `is_causal = False` are read).
        q: `[B, H, T, D]` queries, RoPE applied. k, v: `[B, Hkv, T, D]`, RoPE applied to `k`.
        position_embeddings: the `(cos, sin)` the keys were rotated with (the cache may read them).
        attention_mask: None or `[B, 1, T, K]` in the backend's form (`attention_mask_4d`).
        past_key_values: a transformers `Cache` or None.
        cache_position: LongTensor `[T]`, the slots of the new keys.

    Returns:
        `[B, T, H * D]`, before the output projection.
    """
    batch, _, length, _ = q.shape
    if past_key_values is not None:
        cos, sin = position_embeddings
        cache_kwargs = {"sin": sin, "cos": cos, "cache_position": cache_position}
        k, v = past_key_values.update(k, v, module.layer_idx, cache_kwargs)  # [B, Hkv, K, D]
    out, _ = attention_function(module.config._attn_implementation)(
        module,
        q,
        k,
        v,
        attention_mask,
        dropout=module.attention_dropout if module.training else 0.0,
        scaling=module.scaling,
        **kwargs,
    )  # [B, T, H, D]
    return out.reshape(batch, length, -1).contiguous()  # [B, T, H * D]


def run_layers(
    layers: Iterable[nn.Module],
    hidden_states: torch.Tensor,
    norm: nn.Module,
    output_hidden_states: bool,
    **layer_kwargs: Any,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The decoder stack: each layer on `hidden_states` `[B, T, H]` with `layer_kwargs`, then the
    final norm; returns `(normed hidden states, every layer's input and the output, or None)`."""
    seen: tuple[torch.Tensor, ...] = ()
    for layer in layers:
        if output_hidden_states:
            seen += (hidden_states,)
        hidden_states = layer(hidden_states, **layer_kwargs)  # [B, T, H]
    hidden_states = norm(hidden_states)  # [B, T, H]
    return hidden_states, ((*seen, hidden_states) if output_hidden_states else None)


def default_position_ids(
    input_shape: tuple[int, int], past_length: int, device: torch.device
) -> torch.Tensor:
    """LongTensor `[B, T]`: positions `past_length .. past_length + T - 1` for every row."""
    batch, length = input_shape
    return torch.arange(past_length, past_length + length, device=device)[None].expand(batch, -1)


#: Config keys every checkpoint may carry besides its family's fields (transformers' and dllm_edit's).
_ALWAYS_ACCEPTED = frozenset(
    {
        "architectures",
        "auto_map",
        "model_type",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "name_or_path",
        "use_cache",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "mask_token_id",
        "tie_word_embeddings",
        "attn_implementation",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
    }
)


def _generic_config_keys() -> frozenset[str]:
    """The fields transformers' `PretrainedConfig` itself defines, in the installed release."""
    base = PretrainedConfig()
    return frozenset(base.to_dict()) | frozenset(vars(base))


def refuse_unknown_fields(config_class: type, kwargs: dict[str, Any], known: Iterable[str]) -> None:
    """Raise when a checkpoint's config has a field the native class does not implement.

    A field dllm_edit does not know could change the computation (a new option of the family), so a
    native class refuses it by name instead of silently running another model.

    Args:
        config_class: the native config class (for the message).
        kwargs: the fields left after the family's own arguments.
        known: further fields the family accepts and reads (or knows to be inert).

    Raises:
        ValueError: naming the fields and the fix.
    """
    accepted = _ALWAYS_ACCEPTED | _generic_config_keys() | frozenset(known)
    unknown = sorted(key for key in kwargs if key not in accepted and not key.startswith(("_", "dllm_edit_")))
    if unknown:
        raise ValueError(
            f"{config_class.__name__} (model_type {getattr(config_class, 'model_type', '?')!r}) does not "
            f"implement the config field(s) {unknown}: dllm_edit's native class would compute another model. "
            "Remove them from config.json if they are inert, or load the checkpoint's own code with "
            "`dllm_edit.load(..., native=False, trust_remote_code=True)` (CLI: --remote-code)."
        )


def refuse_value(config_class: type, field: str, value: Any, supported: str) -> None:
    """Raise the error for a field whose value the native class does not implement."""
    raise ValueError(
        f"{config_class.__name__}: `{field}={value!r}` is not implemented by dllm_edit's native class "
        f"(supported: {supported}). Load the checkpoint's own code with "
        "`dllm_edit.load(..., native=False, trust_remote_code=True)` (CLI: --remote-code)."
    )


class RMSNorm(nn.Module):
    """Root-mean-square layer norm computed in float32, weight applied in the input dtype (Llama's).

    Examples:
        >>> import torch
        >>> RMSNorm(4, eps=0.0)(torch.tensor([[3.0, -3.0, 3.0, -3.0]])).tolist()
        [[1.0, -1.0, 1.0, -1.0]]
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        x = hidden_states.float()  # [..., H]
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)  # [..., H]
        return self.weight * x.to(dtype)
