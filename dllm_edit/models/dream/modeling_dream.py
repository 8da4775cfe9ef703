"""`DreamModel`: Dream-7B / Dream-Coder-7B / DiffuCoder-7B, a Qwen2 run with full attention.

Dream was initialised from Qwen2.5 and keeps its module tree and parameter names
(`model.embed_tokens`, `model.layers.N.self_attn.{q,k,v}_proj` with biases, `o_proj` without,
`mlp.{gate,up,down}_proj`, `model.norm`, `lm_head`), so the hub checkpoints load as they are. It
differs from Qwen2 in two ways: attention is bidirectional (no causal mask), and the checkpoints'
class `DreamModel` is the LM with its head. Its logits keep the autoregressive convention: the
output at position `i` predicts the token at `i + 1` (dllm_edit's `shifted` adapter reads them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from dllm_edit.hf import EditGenerationMixin
from dllm_edit.models.common import (
    CACHE_FIELD,
    RMSNorm,
    apply_rotary,
    attend,
    attention_mask_4d,
    cache_argument,
    default_position_ids,
    rope_inv_freq,
    rotary_cos_sin,
    run_layers,
)

from .configuration_dream import DreamConfig


class DreamMLP(nn.Module):
    """SwiGLU MLP: `down_proj(act(gate_proj(x)) * up_proj(x))`, no biases."""

    def __init__(self, config: DreamConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))  # [B, T, H]


class DreamAttention(nn.Module):
    """Grouped-query self-attention with RoPE, biased q/k/v projections, over every key (not causal)."""

    def __init__(self, config: DreamConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        cache_position: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        batch, length, _ = hidden_states.shape
        heads = (batch, length, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(heads).transpose(1, 2)  # [B, Hq, T, D]
        k = self.k_proj(hidden_states).view(heads).transpose(1, 2)  # [B, Hkv, T, D]
        v = self.v_proj(hidden_states).view(heads).transpose(1, 2)  # [B, Hkv, T, D]
        q, k = apply_rotary(q, k, *position_embeddings)  # [B, Hq, T, D], [B, Hkv, T, D]
        out = attend(
            self, q, k, v, position_embeddings, attention_mask, past_key_values, cache_position, **kwargs
        )  # [B, T, H * D]
        return self.o_proj(out)  # [B, T, H]


class DreamDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm decoder layer: `x + attn(norm(x))`, then `x + mlp(norm(x))`."""

    def __init__(self, config: DreamConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = DreamAttention(config, layer_idx)
        self.mlp = DreamMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        cache_position: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        attended = self.self_attn(
            self.input_layernorm(hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            cache_position=cache_position,
            **kwargs,
        )
        hidden_states = hidden_states + attended  # [B, T, H]
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))  # [B, T, H]


class DreamPreTrainedModel(PreTrainedModel):
    """Shared settings of the Dream classes. Init is transformers' default `_init_weights`, as in the
    checkpoints' code: normal linear and embedding weights (std `initializer_range`, the padding
    row zeroed), zero biases, unit norm weights."""

    config_class = DreamConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DreamDecoderLayer"]  # noqa: RUF012 (transformers' class attribute)
    _skip_keys_device_placement = ["past_key_values", "cache"]  # noqa: RUF012 (transformers' class attribute)
    _supports_sdpa = True
    _supports_flex_attn = False  # flex takes a BlockMask, not the adapters' tensor masks
    _supports_attention_backend = True
    _supports_cache_class = True


class DreamBaseModel(DreamPreTrainedModel):
    """The decoder stack (`model.*` in the checkpoints): embeddings, layers, final norm.

    Examples:
        >>> import torch
        >>> config = DreamConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        ...                      mask_token_id=63, pad_token_id=0)
        >>> DreamBaseModel(config)(torch.tensor([[1, 2, 3]])).last_hidden_state.shape
        torch.Size([1, 3, 32])
    """

    def __init__(self, config: DreamConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.embed_tokens: nn.Module = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(DreamDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        """Hidden states `[B, T, H]` after the final norm (a `BaseModelOutputWithPast`).

        See `DreamModel.forward` for the arguments.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("DreamModel: pass exactly one of `input_ids` and `inputs_embeds`.")
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # [B, T, H]
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        batch, length = inputs_embeds.shape[:2]
        if cache_position is None:
            cache_position = torch.arange(
                past_length, past_length + length, device=inputs_embeds.device
            )  # [T]
        if position_ids is None:
            position_ids = default_position_ids((batch, length), past_length, inputs_embeds.device)  # [B, T]
        elif position_ids.dim() == 1:
            position_ids = position_ids[None].expand(batch, -1)  # [B, T]
        mask = attention_mask_4d(
            attention_mask,
            query_length=length,
            key_length=past_length + length,
            dtype=inputs_embeds.dtype,
            attn_implementation=self.config._attn_implementation,
        )  # None or [B, 1, T, K]
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        inv_freq = rope_inv_freq(head_dim, self.config.rope_theta).to(inputs_embeds.device)  # [D/2]
        position_embeddings = rotary_cos_sin(position_ids, inv_freq, inputs_embeds.dtype)  # 2 x [B, T, D]

        # checkpointed layers are recomputed in the backward pass: they must not write a cache twice
        layer_cache = None if self.gradient_checkpointing and self.training else past_key_values
        hidden_states, all_hidden = run_layers(
            self.layers,
            inputs_embeds,
            self.norm,
            bool(output_hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=mask,
            past_key_values=layer_cache,
            cache_position=cache_position,
            **kwargs,
        )  # [B, T, H]
        cache_out: dict[str, Any] = {CACHE_FIELD: past_key_values}
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden,
            **cache_out,
        )


class DreamModel(EditGenerationMixin, DreamPreTrainedModel):
    """Dream's language model: the decoder stack (`model`) and the unembedding (`lm_head`).

    The checkpoints' `architectures` name this class; it is the LM with its head (the hub's
    `DreamModel`). Logits at position `i` predict the token at `i + 1` (decode with the `shifted`
    adapter). Attention is bidirectional unless `attention_mask` restricts it.

    Examples:
        >>> import torch
        >>> config = DreamConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        ...                      mask_token_id=63, pad_token_id=0)
        >>> model = DreamModel(config).eval()
        >>> out = model(torch.tensor([[1, 2, 63, 63]]), attention_mask=torch.tensor([[1, 1, 1, 1]]))
        >>> out.logits.shape
        torch.Size([1, 4, 64])
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # noqa: RUF012 (4.57 reads its keys)

    def __init__(self, config: DreamConfig) -> None:
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """Logits `[B, T, V]` (float, the model's dtype) of every position.

        Args:
            input_ids: LongTensor `[B, T]` (or give `inputs_embeds` `[B, T, H]`).
            attention_mask: None (every token sees every token), `[B, K]` 0/1 padding mask over the
                cached and new keys, or a 4-D `[B, 1, T, K]` mask (bool True = attend, or additive).
            position_ids: LongTensor `[B, T]`; default `past_length + arange(T)`.
            past_key_values: a transformers `Cache`; the new keys/values are appended to it (also
                taken as `cache=`, transformers 5.2x's name).
            use_cache: create a `DynamicCache` when none is given (default
                `config.use_cache`, False for Dream).
            cache_position: LongTensor `[T]`, the slots the new keys take in the cache.
            output_hidden_states: also return the input of every layer and the final normed states.
            return_dict: accepted for transformers' API; the output is always a `CausalLMOutputWithPast`.
            **kwargs: `labels` LongTensor `[B, T]` (the loss is transformers' `loss_function`, the
                causal-LM loss for this class name, as in the checkpoints' code: logits at `i` are
                scored against `labels[i + 1]`); `logits_to_keep` / `num_logits_to_keep` (an int `n`:
                the logits of the last `n` positions only, 0 = all); the rest goes to the attention
                backend.

        Returns:
            `CausalLMOutputWithPast` with `loss` (when `labels` is given), `logits` `[B, T, V]`
            (`[B, n, V]` with `logits_to_keep=n`), `past_key_values` (when caching) and
            `hidden_states` (when asked).
        """
        labels = kwargs.pop("labels", None)
        keep_new, keep_old = kwargs.pop("logits_to_keep", None), kwargs.pop("num_logits_to_keep", None)
        keep = int(keep_new or keep_old or 0)
        outputs = self.model(
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
        logits = self.lm_head(outputs.last_hidden_state[:, -keep:])  # [B, T, V] (T = keep when keep > 0)
        cache_out: dict[str, Any] = {CACHE_FIELD: getattr(outputs, CACHE_FIELD)}
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            **cache_out,
        )
