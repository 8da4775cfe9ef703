"""LLaDA-8B / LLaDA-1.5 as a transformers model: `LLaDAModelLM`, with the checkpoints' parameter names.

The module tree is the published one (`model.transformer.{wte, blocks.N.{q_proj, k_proj, v_proj,
attn_out, attn_norm, ff_norm, ff_proj, up_proj, ff_out}, ln_f, ff_out}`), so the hub safetensors load
as they are. The computation is the published `LLaDALlamaBlock`'s (pre-norm RMSNorm, RoPE on queries
and keys, full bidirectional attention, `act(ff_proj(x)) * up_proj(x)` MLP), written with
transformers' attention backends and `Cache.update`: the class also takes a 4-D attention mask,
`position_ids` and a transformers `Cache`, which the remote code does not.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Cache, DynamicCache, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from dllm_edit.hf import EditGenerationMixin
from dllm_edit.models.common import (
    CACHE_FIELD,
    RMSNorm,
    apply_rotary,
    attention_function,
    attention_mask_4d,
    cache_argument,
    default_position_ids,
    rope_inv_freq,
    rotary_cos_sin,
)

from .configuration_llada import LLaDAConfig


class LLaDARMSNorm(RMSNorm):
    """RMSNorm with the optional bias of LLaDA's `RMSLayerNorm` (`include_bias` / `bias_for_layer_norm`)."""

    def __init__(self, hidden_size: int, eps: float, bias: bool) -> None:
        super().__init__(hidden_size, eps)
        self.bias = nn.Parameter(torch.zeros(hidden_size)) if bias else None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = super().forward(hidden_states)  # [..., H]
        return out if self.bias is None else out + self.bias


def _norm(config: LLaDAConfig) -> LLaDARMSNorm:
    bias = config.bias_for_layer_norm if config.bias_for_layer_norm is not None else config.include_bias
    return LLaDARMSNorm(config.d_model, config.rms_norm_eps, bool(bias))


class LLaDALlamaBlock(GradientCheckpointingLayer):
    """One LLaDA block: `x + attn_out(attention(attn_norm(x)))`, then `x + ff_out(act(ff_proj(h)) *
    up_proj(h))` with `h = ff_norm(x)`. The attention projections live on the block itself, as in the
    checkpoints. Attention is bidirectional (`is_causal = False`).
    """

    is_causal = False

    def __init__(self, config: LLaDAConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.n_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias, qkv_bias = config.include_bias, bool(config.include_bias or config.include_qkv_bias)
        d, kv, hidden = config.d_model, self.num_key_value_heads * self.head_dim, config.intermediate_size
        self.attn_norm = _norm(config)
        self.ff_norm = _norm(config)
        self.q_proj = nn.Linear(d, d, bias=qkv_bias)
        self.k_proj = nn.Linear(d, kv, bias=qkv_bias)
        self.v_proj = nn.Linear(d, kv, bias=qkv_bias)
        self.attn_out = nn.Linear(d, d, bias=bias)
        self.ff_proj = nn.Linear(d, hidden, bias=bias)
        self.up_proj = nn.Linear(d, hidden, bias=bias)
        self.ff_out = nn.Linear(hidden, d, bias=bias)
        self.act = ACT2FN[config.activation_type]
        self.dropout = nn.Dropout(config.residual_dropout)

    def attention(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None,
        cache_position: torch.Tensor | None,
    ) -> torch.Tensor:
        """Self-attention of the normed `hidden_states` `[B, T, d]` -> `[B, T, d]` (before `attn_out`'s
        residual)."""
        batch, length, _ = hidden_states.shape
        dtype = hidden_states.dtype
        q = self.q_proj(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        k = (
            self.k_proj(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)
        )  # [B, Hkv, T, D]
        v = (
            self.v_proj(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)
        )  # [B, Hkv, T, D]
        cos, sin = position_embeddings  # [B, T, D] float32
        if self.config.rope_full_precision:
            q, k = apply_rotary(q.float(), k.float(), cos, sin)  # [B, H, T, D], [B, Hkv, T, D] float32
            q, k = q.to(dtype), k.to(dtype)
        else:
            q, k = apply_rotary(q, k, cos.to(dtype), sin.to(dtype))  # [B, H, T, D], [B, Hkv, T, D]
        if past_key_values is not None:
            cache_kwargs = {"sin": sin, "cos": cos, "cache_position": cache_position}
            k, v = past_key_values.update(k, v, self.layer_idx, cache_kwargs)  # [B, Hkv, K, D]
        impl = self.config._attn_implementation
        mask = _mask_for_keys(attention_mask, k.shape[-2])  # [B, 1, T, K] or None
        out, _ = attention_function(impl)(
            self,
            q,
            k,
            v,
            mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=False,
        )  # [B, T, H, D]
        return self.attn_out(out.reshape(batch, length, -1))  # [B, T, d]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        past_key_values: Cache | None = None,
        cache_position: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """`hidden_states` `[B, T, d]` -> `[B, T, d]`; `position_embeddings` is RoPE's `(cos, sin)`
        `[B, T, D]` at the queries' positions."""
        assert position_embeddings is not None
        attn = self.attention(
            self.attn_norm(hidden_states),
            position_embeddings,
            attention_mask,
            past_key_values,
            cache_position,
        )  # [B, T, d]
        hidden_states = hidden_states + self.dropout(attn)  # [B, T, d]
        normed = self.ff_norm(hidden_states)  # [B, T, d]
        mlp = self.ff_out(self.act(self.ff_proj(normed)) * self.up_proj(normed))  # [B, T, d]
        return hidden_states + self.dropout(mlp)  # [B, T, d]


def _mask_for_keys(mask: torch.Tensor | None, keys: int) -> torch.Tensor | None:
    """The 4-D mask `[B, 1, T, K']` cut to the `keys` keys the attention reads (the last ones).

    Raises:
        ValueError: the mask covers fewer keys than the attention reads (cached ones included).
    """
    if mask is None or mask.shape[-1] == keys:
        return mask
    if mask.shape[-1] < keys:
        raise ValueError(
            f"`attention_mask` covers {mask.shape[-1]} keys, but the attention reads {keys} (the cached "
            "keys and this forward's); pass a mask over every key."
        )
    return mask[..., -keys:]  # [B, 1, T, K]


class LLaDAPreTrainedModel(PreTrainedModel):
    """Common base of the LLaDA classes: config class, backends, gradient checkpointing, init
    (transformers' default, with `init_std` as `initializer_range`)."""

    config_class = LLaDAConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LLaDALlamaBlock"]  # noqa: RUF012 (transformers declares it an instance variable)
    _skip_keys_device_placement = ["past_key_values"]  # noqa: RUF012
    _supports_sdpa = True
    _supports_flex_attn = False  # flex takes a BlockMask, not the adapters' tensor masks
    _supports_attention_backend = True
    _supports_cache_class = True


class LLaDAModel(LLaDAPreTrainedModel):
    """The LLaDA transformer without its output layer's call: `transformer` is an `nn.ModuleDict`
    (`wte`, `emb_drop`, `blocks`, `ln_f`, and `ff_out` unless `weight_tying`), as in the checkpoints.

    `forward` returns the final-normed hidden states; `LLaDAModelLM` applies the output layer.

    Examples:
        >>> import torch
        >>> from dllm_edit.models.llada import LLaDAConfig, LLaDAModel
        >>> config = LLaDAConfig(d_model=32, n_heads=4, n_kv_heads=4, n_layers=1, mlp_hidden_size=48,
        ...                      vocab_size=64, embedding_size=64, mask_token_id=63, eos_token_id=1,
        ...                      pad_token_id=1)
        >>> LLaDAModel(config)(torch.tensor([[1, 2, 3]])).last_hidden_state.shape
        torch.Size([1, 3, 32])
    """

    def __init__(self, config: LLaDAConfig) -> None:
        super().__init__(config)
        modules: dict[str, nn.Module] = {
            "wte": nn.Embedding(config.padded_vocab_size, config.d_model),
            "emb_drop": nn.Dropout(config.embedding_dropout),
            "ln_f": _norm(config),
            "blocks": nn.ModuleList(LLaDALlamaBlock(config, i) for i in range(config.n_layers)),
        }
        if not config.weight_tying:
            modules["ff_out"] = nn.Linear(config.d_model, config.padded_vocab_size, bias=config.include_bias)
        self.transformer = nn.ModuleDict(modules)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.transformer["wte"]

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.transformer["wte"] = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        """Hidden states `[B, T, d]` after `ln_f`; see `LLaDAModelLM.forward` for the arguments."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")
        past_key_values = cache_argument(past_key_values, kwargs)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            use_cache, past_key_values = False, None  # a replayed layer would write its cache twice
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        if inputs_embeds is None:
            inputs_embeds = self.transformer["wte"](input_ids)  # [B, T, d]
        batch, length = inputs_embeds.shape[:2]
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        device = inputs_embeds.device
        positions = torch.arange(past_length, past_length + length, device=device)  # [T]
        slots = cache_position if cache_position is not None else positions  # [T]
        if position_ids is None:
            position_ids = default_position_ids((batch, length), past_length, device)  # type: ignore[assignment]
        inv_freq = rope_inv_freq(self.config.head_dim, self.config.rope_theta).to(device)  # [D / 2]
        position_embeddings = rotary_cos_sin(
            cast(torch.Tensor, position_ids), inv_freq, torch.float32
        )  # [B, T, D] x 2
        mask = attention_mask_4d(
            attention_mask,
            query_length=length,
            key_length=attention_mask.shape[-1] if attention_mask is not None else 0,
            dtype=inputs_embeds.dtype,
            attn_implementation=self.config._attn_implementation,
        )  # [B, 1, T, K] or None
        hidden_states = self.transformer["emb_drop"](inputs_embeds)  # [B, T, d]
        all_hidden_states: list[torch.Tensor] = []
        for block in cast(nn.ModuleList, self.transformer["blocks"]):
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            hidden_states = block(
                hidden_states,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                past_key_values=past_key_values,
                cache_position=slots,
            )  # [B, T, d]
        hidden_states = self.transformer["ln_f"](hidden_states)  # [B, T, d]
        if output_hidden_states:
            all_hidden_states.append(hidden_states)
        fields: dict[str, Any] = {CACHE_FIELD: past_key_values if use_cache else None}
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            **fields,
        )


class LLaDAModelLM(EditGenerationMixin, LLaDAPreTrainedModel):
    """LLaDA-8B / LLaDA-1.5 with its output layer: the class the checkpoints' `architectures` name.

    Logits have `embedding_size` columns (126464 for LLaDA-8B), as the remote code's; the output
    layer is `model.transformer.ff_out`, or the input embedding when `weight_tying` is set.

    Examples:
        >>> import torch
        >>> from dllm_edit.models.llada import LLaDAConfig, LLaDAModelLM
        >>> config = LLaDAConfig(d_model=32, n_heads=4, n_kv_heads=4, n_layers=2, mlp_hidden_size=48,
        ...                      vocab_size=60, embedding_size=64, mask_token_id=59, eos_token_id=1,
        ...                      pad_token_id=1)
        >>> model = LLaDAModelLM(config).eval()
        >>> model(torch.tensor([[1, 2, 59, 59]])).logits.shape
        torch.Size([1, 4, 64])
        >>> sorted(model.state_dict())[-3:]
        ['model.transformer.ff_out.weight', 'model.transformer.ln_f.weight', 'model.transformer.wte.weight']
    """

    def __init__(self, config: LLaDAConfig) -> None:
        super().__init__(config)
        self.model = LLaDAModel(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.transformer["wte"]

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.transformer["wte"] = value

    def get_output_embeddings(self) -> nn.Module | None:
        """`model.transformer.ff_out`; None with `weight_tying` (the logits then use the input
        embedding's weight directly, so there is nothing for transformers to tie)."""
        return None if self.config.weight_tying else self.model.transformer["ff_out"]

    def set_output_embeddings(self, value: nn.Module) -> None:
        if self.config.weight_tying:
            raise ValueError("With `weight_tying` the output layer is the input embedding: set that instead.")
        self.model.transformer["ff_out"] = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Logits of every position.

        Args:
            input_ids: LongTensor `[B, T]` (or `inputs_embeds` `[B, T, d]`).
            attention_mask: None (every query sees every key), `[B, K]` padding mask (1 = token), or
                `[B, 1, T, K]` (bool, True = attend, or additive float), K counting cached keys.
            position_ids: LongTensor `[B, T]`; default `past_length + arange(T)`.
            past_key_values: a transformers `Cache` (also accepted as `cache=`, transformers 5.x's name).
            use_cache: return the cache (a new `DynamicCache` when none is given); default
                `config.use_cache`.
            cache_position: LongTensor `[T]`, passed to `Cache.update`.
            output_hidden_states: also return the input of every block and the final normed states.
            return_dict: accepted for transformers' API; the output is always a `CausalLMOutputWithPast`.

        Returns:
            `CausalLMOutputWithPast` with `logits` `[B, T, embedding_size]`, the cache and hidden states.
        """
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            cache_position=cache_position,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        hidden_states = out.last_hidden_state  # [B, T, d]
        if self.config.weight_tying:
            logits = F.linear(hidden_states, self.model.transformer["wte"].weight)  # [B, T, V]
        else:
            logits = self.model.transformer["ff_out"](hidden_states)  # [B, T, V]
        cache = getattr(out, CACHE_FIELD)
        return CausalLMOutputWithPast(logits=logits, hidden_states=out.hidden_states, **{CACHE_FIELD: cache})
