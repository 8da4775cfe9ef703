"""LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-Base / -Instruct) as a transformers model, without remote code.

An OLMoE-style decoder run with full (bidirectional) attention: RMSNorm pre-norm layers, attention
with per-head RMSNorm on queries and keys (`qk_layernorm`) and RoPE, and a sparse MoE MLP (softmax
router, top-k experts, optional expert bias and shared expert; dense layers where
`moe_layer_freq[i] == 0`). Module and parameter names are the checkpoints' (the published
`modeling_lladamoe.py`), so their safetensors load as they are. Attention runs through
transformers' backends (eager, SDPA, flex) and keys/values through `Cache.update`, so the
decoding adapters' 4-D masks and KV caches work; the published code takes neither.
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

try:  # where transformers keeps it: 5.x, then 4.x
    from transformers.utils.output_capturing import OutputRecorder
except ImportError:  # pragma: no cover - transformers 4.x
    from transformers.utils.generic import OutputRecorder  # type: ignore[no-redef, attr-defined]

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

from .configuration_llada_moe import LLaDAMoEConfig


class LLaDAMoEMLP(nn.Module):
    """SwiGLU MLP: a dense layer's MLP, one routed expert, or the shared expert.

    Args:
        config: the model config (`hidden_size`, `hidden_act`).
        intermediate_size: the MLP's width.
    """

    def __init__(self, config: LLaDAMoEConfig, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))  # [..., H]


class LLaDAMoERouter(nn.Linear):
    """The router's linear layer (`mlp.gate`), a class of its own so the trainers can record its
    logits `[N, E]` (`_can_record_outputs["router_logits"]`) for the load-balancing loss."""


class LLaDAMoESparseMoeBlock(nn.Module):
    """Top-k routed experts, as the published block routes.

    The router's softmax probabilities (float32) plus the optional `expert_bias` buffer choose the
    `num_experts_per_tok` experts and are their weights, not renormalised (the published block
    hard-codes `norm_topk_prob = False`, whatever the config says). The experts' outputs are summed
    per token in expert order. Tokens are processed together, one batched call per expert hit.
    """

    def __init__(self, config: LLaDAMoEConfig) -> None:
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.gate = LLaDAMoERouter(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            [LLaDAMoEMLP(config, config.expert_intermediate_size) for _ in range(config.num_experts)]
        )
        self.expert_bias: torch.Tensor | None
        if config.moe_router_enable_expert_bias:
            self.register_buffer("expert_bias", torch.zeros(config.num_experts))
        else:
            self.expert_bias = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(weights [N, k] in x's dtype, experts [N, k])` of the tokens `x` `[N, H]`."""
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)  # [N, E]
        if self.expert_bias is not None:
            probs = probs + self.expert_bias  # [N, E]
        weights, experts = torch.topk(probs, self.top_k, dim=-1)  # [N, k], [N, k]
        return weights.to(x.dtype), experts

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape  # [B, T, H]
        x = hidden_states.reshape(-1, shape[-1])  # [N, H]
        weights, experts = self.route(x)  # [N, k], [N, k]
        return self._dispatch(x, weights, experts).reshape(shape)  # [B, T, H]

    @torch.compiler.disable
    def _dispatch(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """The weighted sum of each token's experts `[N, H]`, for `x` `[N, H]`, `weights` and
        `experts` `[N, k]`.

        Which experts run, and on which tokens, depends on the routing, so `torch.compile` runs this
        part eagerly: traced, its loop over the experts hit (`tolist`) would guard each graph on the
        experts of one batch and recompile at nearly every forward."""
        out = torch.zeros_like(x)  # [N, H]
        hits = torch.nn.functional.one_hot(experts, self.num_experts).permute(2, 1, 0)  # [E, k, N]
        for expert in torch.nonzero(hits.sum(dim=(1, 2))).flatten().tolist():
            slot, token = torch.where(hits[expert])  # [n], [n]
            y = self.experts[expert](x[token]) * weights[token, slot, None]  # [n, H]
            out.index_add_(0, token, y.to(x.dtype))
        return out  # [N, H]


class LLaDAMoEAttention(nn.Module):
    """Multi-head (grouped-query) attention, full (not causal), through transformers' backends.

    Queries and keys get a per-head RMSNorm when `qk_layernorm` is set, then RoPE (on the first
    `partial_rotary_factor` of each head); `clip_qkv` clamps queries, keys and values.
    """

    is_causal = False

    def __init__(self, config: LLaDAMoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.qk_layernorm:
            self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)

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
        q = self.q_proj(hidden_states).view(batch, length, self.num_heads, self.head_dim)  # [B, T, H, D]
        k = self.k_proj(hidden_states).view(
            batch, length, self.num_key_value_heads, self.head_dim
        )  # [B, T, Hkv, D]
        v = self.v_proj(hidden_states).view(
            batch, length, self.num_key_value_heads, self.head_dim
        )  # [B, T, Hkv, D]
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # per head
        clip = self.config.clip_qkv
        if clip is not None:
            q, k, v = q.clamp(-clip, clip), k.clamp(-clip, clip), v.clamp(-clip, clip)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H(kv), T, D]
        q, k = apply_rotary(q, k, *position_embeddings)  # [B, H, T, D], [B, Hkv, T, D] (partial RoPE)
        out = attend(
            self, q, k, v, position_embeddings, attention_mask, past_key_values, cache_position, **kwargs
        )  # [B, T, H * D]
        return self.o_proj(out)  # [B, T, hidden]


class LLaDAMoEDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm decoder layer: attention, then the MoE (or, where `moe_layer_freq[i] == 0`, dense)
    MLP, plus the shared expert on MoE layers when the config has one."""

    def __init__(self, config: LLaDAMoEConfig, layer_idx: int) -> None:
        super().__init__()
        self.is_moe = config.moe_layer_freq[layer_idx] != 0
        self.self_attn = LLaDAMoEAttention(config, layer_idx)
        self.mlp: nn.Module = (
            LLaDAMoESparseMoeBlock(config)
            if self.is_moe
            else LLaDAMoEMLP(config, config.dense_intermediate_size)
        )
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.shared_expert: LLaDAMoEMLP | None = None
        if self.is_moe and config.shared_expert_intermediate_size is not None:
            self.shared_expert = LLaDAMoEMLP(config, config.shared_expert_intermediate_size)

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
        )  # [B, T, H]
        hidden_states = hidden_states + attended  # [B, T, H]
        normed = self.post_attention_layernorm(hidden_states)  # [B, T, H]
        mixed = self.mlp(normed)  # [B, T, H]
        if self.shared_expert is not None:
            mixed = mixed + self.shared_expert(normed)  # [B, T, H]
        return hidden_states + mixed  # [B, T, H]


class LLaDAMoEPreTrainedModel(PreTrainedModel):
    """Weights init and the transformers class attributes shared by the LLaDA-MoE classes."""

    config_class = LLaDAMoEConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LLaDAMoEDecoderLayer"]  # noqa: RUF012 (transformers' class attribute)
    _skip_keys_device_placement = ["past_key_values", "cache"]  # noqa: RUF012 (transformers' class attribute)
    _supports_sdpa = True
    _supports_flex_attn = False  # flex takes a BlockMask, not the adapters' tensor masks
    _supports_attention_backend = True
    _supports_cache_class = True
    # the router logits the trainers' load-balancing loss reads (the published model's auxiliary loss)
    _can_record_outputs = {"router_logits": OutputRecorder(LLaDAMoERouter, index=0)}  # noqa: RUF012

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LLaDAMoESparseMoeBlock) and module.expert_bias is not None:
            nn.init.zeros_(module.expert_bias)  # guarded against re-init of loaded weights on 5.x


class LLaDAMoEModel(LLaDAMoEPreTrainedModel):
    """The LLaDA-MoE decoder stack (`model.` in the checkpoints), returning the final hidden states.

    Args:
        config: an `LLaDAMoEConfig`.
    """

    def __init__(self, config: LLaDAMoEConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.embed_tokens: nn.Module = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [LLaDAMoEDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self._inv_freq: torch.Tensor | None = None  # not a buffer: the checkpoints have none
        self.post_init()

    def rotary(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """`(cos, sin)` `[B, T, R]` at `position_ids` `[B, T]`, R = the rotated dims of a head."""
        device = position_ids.device
        if self._inv_freq is None or self._inv_freq.device != device:
            head_dim = self.config.hidden_size // self.config.num_attention_heads
            dim = int(head_dim * self.config.partial_rotary_factor)
            self._inv_freq = rope_inv_freq(dim, self.config.rope_theta).to(device)  # [R / 2]
        return rotary_cos_sin(position_ids, self._inv_freq, dtype)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        """Hidden states `[B, T, H]` of `input_ids` (or `inputs_embeds`) under full attention.

        `attention_mask` is None (attend everywhere), a 2-D padding mask over every key (cached
        ones included) or a 4-D mask used as given (`dllm_edit.models.common.attention_mask_4d`).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # [B, T, H]
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None and not (self.gradient_checkpointing and self.training):
            past_key_values = DynamicCache()
        batch, length = inputs_embeds.shape[:2]
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if cache_position is None:
            cache_position = torch.arange(past, past + length, device=inputs_embeds.device)  # type: ignore[assignment]
        if position_ids is None:
            position_ids = default_position_ids((batch, length), past, inputs_embeds.device)  # type: ignore[assignment]
        # a 2-D mask covers the cached keys and these; a 4-D one is used as given: its keys are what
        mask = attention_mask_4d(
            attention_mask,
            query_length=length,
            key_length=past + length,
            dtype=inputs_embeds.dtype,
            attn_implementation=self.config._attn_implementation,
        )  # [B, 1, T, K] or None
        position_embeddings = self.rotary(position_ids, inputs_embeds.dtype)  # type: ignore[arg-type]
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        hidden_states, all_hidden = run_layers(
            self.layers,
            inputs_embeds,
            self.norm,
            bool(output_hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=mask,
            past_key_values=past_key_values,
            cache_position=cache_position,
            **kwargs,
        )  # [B, T, H]
        cache: dict[str, Any] = {CACHE_FIELD: past_key_values if use_cache else None}
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden,
            **cache,
        )


class LLaDAMoEModelLM(EditGenerationMixin, LLaDAMoEPreTrainedModel):
    """LLaDA-MoE with its output head (`architectures: ["LLaDAMoEModelLM"]` in the checkpoints).

    Logits are those of the published `LLaDAMoEModelLM` (within float rounding); the published
    class's router logits and auxiliary load-balancing loss are not computed, and `labels` are
    refused there as here (dllm_edit computes its diffusion losses outside the model).

    Args:
        config: an `LLaDAMoEConfig`.

    Examples:
        >>> import torch
        >>> from dllm_edit.models.llada_moe import LLaDAMoEConfig, LLaDAMoEModelLM
        >>> from dllm_edit.models.common import CACHE_FIELD
        >>> config = LLaDAMoEConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        ...     expert_intermediate_size=16, num_experts=16, num_experts_per_tok=2, pad_token_id=0,
        ...     eos_token_id=1)
        >>> model = LLaDAMoEModelLM(config).eval()
        >>> out = model(torch.tensor([[5, 6, 7]]), use_cache=True)
        >>> cache = getattr(out, CACHE_FIELD)  # `past_key_values` (transformers 4.x) or `cache` (5.x)
        >>> out.logits.shape, cache.get_seq_length()
        (torch.Size([1, 3, 64]), 3)
        >>> more = model(torch.tensor([[8]]), past_key_values=cache)
        >>> more.logits.shape
        torch.Size([1, 1, 64])
    """

    # 5.x's {target: source} form; 4.57 reads its keys. Used only with `tie_word_embeddings`.
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # noqa: RUF012

    def __init__(self, config: LLaDAMoEConfig) -> None:
        super().__init__(config)
        self.model = LLaDAMoEModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """Logits `[B, T, V]` of every position (see `LLaDAMoEModel.forward` for the arguments).

        Raises:
            ValueError: `labels` passed (no loss is computed inside the model).
        """
        if kwargs.pop("labels", None) is not None:
            raise ValueError(
                "LLaDAMoEModelLM computes no loss (as the published class): pass no `labels` and compute "
                "the diffusion loss from the logits (dllm_edit.trainers)."
            )
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
        logits = self.lm_head(outputs.last_hidden_state)  # [B, T, V]
        out = CausalLMOutputWithPast(
            logits=logits, hidden_states=outputs.hidden_states, **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)}
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return out if return_dict else out.to_tuple()
