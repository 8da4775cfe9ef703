"""LLaDA2.0 / LLaDA2.1 (mini, flash): a mixture-of-experts diffusion LM, `model_type: "llada2_moe"`.

The module tree and parameter names are the hub checkpoints' (`model.word_embeddings`,
`model.layers.N.attention.query_key_value`, `attention.dense`, `mlp.gate` with its `expert_bias`,
`mlp.experts.E.gate_proj`, `mlp.shared_experts`, `model.norm`, `lm_head`), so their safetensors load
as they are. Each layer: RMSNorm, attention (fused `query_key_value` projection, grouped key/value
heads, RMSNorm over each query and key head, RoPE on the first `partial_rotary_factor` share of each
head), RMSNorm, then a dense gated MLP (the first `first_k_dense_replace` layers) or the experts:
a sigmoid router with an expert bias picks `num_experts_per_tok` experts inside the `topk_group`
best of `n_group` groups, their outputs are weighted by the normalised router scores times
`routed_scaling_factor`, and the shared experts are added.

Attention has no causal mask: with no mask every token attends to every token; LLaDA2.x decodes
block-causally with a 4-D mask (`dllm_edit`'s `block_causal` adapter).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
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

from .configuration_llada2_moe import LLaDA2MoeConfig

try:  # transformers 5.x: initialisers that skip weights already loaded
    from transformers import initialization as init
except ImportError:  # transformers 4.x
    from torch.nn import init  # type: ignore[no-redef]


class LLaDA2MoeMLP(nn.Module):
    """Gated MLP `down(act(gate(x)) * up(x))`: the dense layers, each expert and the shared experts."""

    def __init__(self, config: LLaDA2MoeConfig, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))  # [..., H]


class LLaDA2MoeGate(nn.Module):
    """The router: sigmoid scores, group-limited top-k on the scores plus `expert_bias`, the chosen
    experts weighted by their (bias-free) scores, normalised when top-k > 1, times
    `routed_scaling_factor`. Runs in float32."""

    def __init__(self, config: LLaDA2MoeConfig) -> None:
        super().__init__()
        assert config.num_experts is not None
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.routed_scaling_factor = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.expert_bias: torch.Tensor
        self.register_buffer("expert_bias", torch.zeros(config.num_experts))
        init.kaiming_uniform_(self.weight, a=5**0.5)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`hidden_states` `[N, H]` -> expert ids `[N, K]`, their weights `[N, K]` (float32), router
        logits `[N, E]`."""
        tokens = hidden_states.shape[0]
        logits = F.linear(hidden_states.float(), self.weight.float())  # [N, E]
        scores = torch.sigmoid(logits)  # [N, E]
        routing = scores + self.expert_bias  # [N, E]
        grouped = routing.view(tokens, self.n_group, -1)  # [N, G, E/G]
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # [N, G]: sum of each group's best two
        groups = group_scores.topk(self.topk_group, dim=-1, sorted=False).indices  # [N, topk_group]
        group_kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, groups, True)  # [N, G]
        expert_kept = group_kept[:, :, None].expand_as(grouped).reshape(tokens, -1)  # [N, E]
        routing = routing.masked_fill(~expert_kept, float("-inf"))  # [N, E]
        experts = routing.topk(self.top_k, dim=-1).indices  # [N, K], best first
        weights = scores.gather(1, experts)  # [N, K]
        if self.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)  # [N, K]
        return experts, weights * self.routed_scaling_factor, logits


class LLaDA2MoeSparseMoeBlock(nn.Module):
    """Routed experts plus shared experts.

    The tokens are sorted by expert once; each expert runs on its slice (a loop over experts, none
    over tokens), and the K outputs of a token are summed in float32 with their router weights.
    """

    def __init__(self, config: LLaDA2MoeConfig) -> None:
        super().__init__()
        assert config.num_experts is not None and config.moe_intermediate_size is not None
        self.top_k = config.num_experts_per_tok
        self.experts = nn.ModuleList(
            [LLaDA2MoeMLP(config, config.moe_intermediate_size) for _ in range(config.num_experts)]
        )
        self.gate = LLaDA2MoeGate(config)
        self.shared_experts = (
            LLaDA2MoeMLP(config, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts is not None
            else None
        )

    @torch.compiler.disable
    def _dispatch(self, flat: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """Each token's K expert outputs `[N, K, H]`, for `flat` `[N, H]` and `experts` `[N, K]`.

        Which experts run, and on how many tokens, depends on the routing, so `torch.compile` runs
        this part eagerly: traced, its per-expert token counts (`tolist`) would guard each graph on
        the counts of one batch and recompile at nearly every forward."""
        slot_expert = experts.reshape(-1)  # [N*K]
        order = slot_expert.argsort(stable=True)  # [N*K] slots grouped by expert
        counts = torch.bincount(slot_expert, minlength=len(self.experts)).tolist()  # tokens per expert
        chunks = flat[order // self.top_k].split(counts)  # per expert: [n_e, H]
        outputs = [expert(chunk) for expert, chunk, n in zip(self.experts, chunks, counts, strict=True) if n]
        by_expert = torch.cat(outputs) if outputs else flat[:0]  # [N*K, H] in `order`
        return by_expert[order.argsort()].view(*experts.shape, flat.shape[-1])  # [N, K, H]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape  # [B, T, H]
        flat = hidden_states.reshape(-1, shape[-1])  # [N, H]
        experts, weights, _ = self.gate(flat)  # [N, K], [N, K]
        by_slot = self._dispatch(flat, experts)  # [N, K, H]
        routed = (by_slot.float() * weights[..., None]).sum(dim=1).to(flat.dtype)  # [N, H]
        if self.shared_experts is not None:
            routed = routed + self.shared_experts(flat)  # [N, H]
        return routed.view(shape)  # [B, T, H]


class LLaDA2MoeAttention(nn.Module):
    """Attention with a fused `query_key_value` projection, grouped key/value heads, per-head
    RMSNorm on queries and keys, partial RoPE and no causal mask."""

    is_causal = False

    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.query_key_value = nn.Linear(
            config.hidden_size,
            (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
            bias=config.use_qkv_bias,
        )
        if config.use_qk_norm:
            self.query_layernorm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.key_layernorm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.dense = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.use_bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        cache_position: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, length, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)  # [B, T, (H + 2 Hkv) * D]
        heads = self.num_heads + 2 * self.num_key_value_heads
        qkv = qkv.view(batch, length, heads, self.head_dim).transpose(1, 2)  # [B, H + 2 Hkv, T, D]
        query, key, value = qkv.split(
            [self.num_heads, self.num_key_value_heads, self.num_key_value_heads], dim=1
        )  # [B, H, T, D], [B, Hkv, T, D], [B, Hkv, T, D]
        if self.config.use_qk_norm:
            query, key = self.query_layernorm(query), self.key_layernorm(key)
        query, key = apply_rotary(query, key, *position_embeddings)  # the first R dims of each head
        output = attend(
            self, query, key, value, position_embeddings, attention_mask, past_key_values, cache_position
        )  # [B, T, H * D]
        return self.dense(output)  # [B, T, hidden]


class LLaDA2MoeDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm layer: attention, then the dense MLP (first layers) or the experts."""

    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int) -> None:
        super().__init__()
        self.attention = LLaDA2MoeAttention(config, layer_idx)
        dense = config.num_experts is None or layer_idx < config.first_k_dense_replace
        self.mlp: nn.Module
        if dense:
            assert config.intermediate_size is not None, "the dense layers need `intermediate_size`"
            self.mlp = LLaDA2MoeMLP(config, config.intermediate_size)
        else:
            self.mlp = LLaDA2MoeSparseMoeBlock(config)
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
        attended = self.attention(
            self.input_layernorm(hidden_states),
            position_embeddings,
            attention_mask,
            past_key_values,
            cache_position,
        )  # [B, T, H]
        hidden_states = hidden_states + attended  # [B, T, H]
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))  # [B, T, H]


class LLaDA2MoePreTrainedModel(PreTrainedModel):
    """Weights initialisation and the attributes transformers reads (attention backends, cache,
    gradient checkpointing, device placement)."""

    config_class = LLaDA2MoeConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LLaDA2MoeDecoderLayer"]  # noqa: RUF012 (transformers' class attribute)
    _skip_keys_device_placement = ["past_key_values", "cache"]  # noqa: RUF012 (transformers' class attribute)
    _supports_flash_attn = False
    _supports_flash_attn_2 = False
    _supports_sdpa = True
    _input_embed_layer = "word_embeddings"  # transformers' embedding accessors read it
    _supports_flex_attn = False  # flex takes a BlockMask, not the adapters' tensor masks
    _supports_attention_backend = True
    _supports_cache_class = True

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LLaDA2MoeGate):
            init.kaiming_uniform_(module.weight, a=5**0.5)
            init.zeros_(module.expert_bias)


class LLaDA2MoeModel(LLaDA2MoePreTrainedModel):
    """The decoder without its head: embeddings, layers, final norm.

    Examples:
        >>> import torch
        >>> config = LLaDA2MoeConfig(vocab_size=48, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
        ...     num_attention_heads=4, num_key_value_heads=1, num_experts=8, num_experts_per_tok=2, n_group=4,
        ...     topk_group=2, num_shared_experts=1, moe_intermediate_size=8, first_k_dense_replace=1,
        ...     pad_token_id=0)
        >>> LLaDA2MoeModel(config)(torch.tensor([[3, 4, 5]])).last_hidden_state.shape
        torch.Size([1, 3, 32])
    """

    def __init__(self, config: LLaDA2MoeConfig) -> None:
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(
            [LLaDA2MoeDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self.post_init()

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
    ) -> BaseModelOutputWithPast | tuple[Any, ...]:
        """Hidden states `[B, T, H]` of `input_ids` (or `inputs_embeds`).

        Args:
            input_ids: LongTensor `[B, T]`.
            attention_mask: None (every token attends to every token), `[B, K]` padding mask
                (1 = token) over the cached and new keys, or `[B, 1, T, K]` bool (True = attend) or
                additive float mask, used as given.
            position_ids: LongTensor `[B, T]`; default: cached length + `arange(T)`.
            past_key_values: a transformers `Cache`; the new keys and values are appended to it.
            inputs_embeds: `[B, T, H]` instead of `input_ids`.
            use_cache: return the cache (a new `DynamicCache` when none is given); default
                `config.use_cache`.
            cache_position: LongTensor `[T]`, passed to the cache; default: cached length + `arange(T)`.
            output_hidden_states: also return the input of every layer and the final output.
            return_dict: a `BaseModelOutputWithPast` (default) or a tuple.

        Raises:
            ValueError: both or neither of `input_ids` and `inputs_embeds`; a mask of another shape.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")
        past_key_values = cache_argument(past_key_values, kwargs)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # [B, T, H]
        assert inputs_embeds is not None
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        batch, length = inputs_embeds.shape[:2]
        device = inputs_embeds.device
        if cache_position is None:
            cache_position = torch.arange(past_length, past_length + length, device=device)  # type: ignore[assignment]
        if position_ids is None:
            position_ids = default_position_ids((batch, length), past_length, device)  # type: ignore[assignment]
        assert position_ids is not None
        mask = attention_mask_4d(
            attention_mask,
            query_length=length,
            key_length=past_length + length,
            dtype=inputs_embeds.dtype,
            attn_implementation=self.config._attn_implementation,
        )  # None or [B, 1, T, K]
        inv_freq = rope_inv_freq(self.config.rope_dim, self.config.rope_theta).to(device)  # [R / 2]
        position_embeddings = rotary_cos_sin(position_ids, inv_freq, inputs_embeds.dtype)  # [B, T, R] x 2

        hidden_states, all_hidden = run_layers(
            self.layers,
            inputs_embeds,
            self.norm,
            bool(output_hidden_states),
            position_embeddings=position_embeddings,
            attention_mask=mask,
            past_key_values=past_key_values,
            cache_position=cache_position,
        )  # [B, T, H]
        fields: dict[str, Any] = {CACHE_FIELD: past_key_values if use_cache else None}
        output = BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden,
            **fields,
        )
        return output if _return_dict(self.config, return_dict) else output.to_tuple()


class LLaDA2MoeForCausalLM(EditGenerationMixin, LLaDA2MoePreTrainedModel):
    """LLaDA2.x with its language-modelling head (the hub checkpoints' `LLaDA2MoeModelLM`).

    Examples:
        >>> import torch
        >>> config = LLaDA2MoeConfig(vocab_size=48, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
        ...     num_attention_heads=4, num_key_value_heads=1, num_experts=8, num_experts_per_tok=2, n_group=4,
        ...     topk_group=2, num_shared_experts=1, moe_intermediate_size=8, first_k_dense_replace=1,
        ...     pad_token_id=0)
        >>> model = LLaDA2MoeForCausalLM(config).eval()
        >>> blocks = torch.arange(4) // 2  # two blocks of two tokens, attended block-causally
        >>> mask = (blocks[None, :] <= blocks[:, None])[None, None]
        >>> model(torch.tensor([[3, 4, 5, 47]]), attention_mask=mask).logits.shape
        torch.Size([1, 4, 48])
    """

    # used when tie_word_embeddings; 5.x reads {target: source}, 4.57 its keys
    _tied_weights_keys = {"lm_head.weight": "model.word_embeddings.weight"}  # noqa: RUF012

    def __init__(self, config: LLaDA2MoeConfig) -> None:
        super().__init__(config)
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

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
        labels: torch.LongTensor | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """Logits `[B, T, V]` (float32) at every position (a diffusion LM predicts each position's own
        token, no shift). Arguments as `LLaDA2MoeModel.forward`, plus:

        Args:
            labels: LongTensor `[B, T]`: the cross-entropy of each position's logits against its own
                label (-100: ignored), as the published code computes it.
            logits_to_keep: compute the logits of the last `logits_to_keep` positions only (0: all).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            cache_position=cache_position,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden_states = outputs.last_hidden_state  # [B, T, H]
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]  # [B, keep, H]
        logits = self.lm_head(hidden_states).float()  # [B, T, V]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).to(logits.device))
        fields: dict[str, Any] = {CACHE_FIELD: getattr(outputs, CACHE_FIELD)}
        output = CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, **fields
        )
        return output if _return_dict(self.config, return_dict) else output.to_tuple()


#: The hub checkpoints' name of the class (`architectures: ["LLaDA2MoeModelLM"]`).
LLaDA2MoeModelLM = LLaDA2MoeForCausalLM


#: The outputs' cache field: `cache` from transformers 5.2x, `past_key_values` before.


def _return_dict(config: Any, return_dict: bool | None) -> bool:
    return bool(getattr(config, "return_dict", True) if return_dict is None else return_dict)
