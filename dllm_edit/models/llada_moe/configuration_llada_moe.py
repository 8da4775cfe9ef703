"""Configuration of LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-Base / -Instruct), dllm_edit's native class.

The fields are those of the checkpoints' `config.json` (the published `configuration_lladamoe.py`),
with the same names and meanings, so a hub checkpoint's config loads as it is. The published
defaults of the sizes are placeholders (`-1`); here they are the 7B-A1B architecture's.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from dllm_edit.models.common import refuse_unknown_fields, refuse_value

#: Fields the published config class does not declare but transformers writes or reads (5.x saves
#: `rope_parameters`, its form of `rope_scaling`).
_EXTRA_KNOWN = ("rope_parameters",)


def _rope_type(rope: Any) -> str | None:
    """The RoPE type a `rope_scaling` / `rope_parameters` dict declares (None when none)."""
    if not rope:
        return None
    if not isinstance(rope, dict):
        return f"<{type(rope).__name__}>"
    return rope.get("rope_type", rope.get("type", "default"))


class LLaDAMoEConfig(PretrainedConfig):
    """Configuration of LLaDA-MoE: an OLMoE-style decoder with full (bidirectional) attention.

    Every field of the published `LLaDAMoEConfig` is accepted under its own name. Values that would
    make the published code compute something the native class does not implement are refused with
    the fix (load the remote code instead); a field the published class does not know is refused
    by name.

    Fields the published modeling code reads but never lets change the routing, and which are
    therefore inert here too: `norm_topk_prob` (the published MoE block hard-codes `False`: the
    top-k softmax probabilities are used as they are). `router_aux_loss_coef` is the coefficient of
    the published load-balancing loss, which dllm_edit's trainers add from the router's recorded
    logits (the forward itself computes none). `moe_router_score_function`, `routed_scaling_factor`,
    `router_num_group` and `router_topk_group` are ignored by the published code too; values that
    declare another routing (sigmoid scores, a scaling factor other than 1, more than one expert
    group) are refused, since neither class would compute what they declare.

    Args:
        vocab_size: vocabulary size.
        hidden_size: model width.
        dense_intermediate_size: SwiGLU width of the dense layers (`moe_layer_freq[i] == 0`).
        expert_intermediate_size: SwiGLU width of each routed expert.
        shared_expert_intermediate_size: width of the shared expert of MoE layers, None for none.
        num_hidden_layers: decoder layers.
        num_attention_heads: query heads (`head_dim = hidden_size // num_attention_heads`).
        num_key_value_heads: key/value heads (grouped-query attention); None = `num_attention_heads`.
        hidden_act: activation of the SwiGLU MLPs (a key of transformers' `ACT2FN`).
        max_position_embeddings: longest sequence trained on (informative; RoPE is not cut).
        initializer_range: std of the normal init of linear and embedding weights.
        rms_norm_eps: epsilon of every RMSNorm.
        use_cache: default of `forward(use_cache=None)`.
        pad_token_id: padding id (the embedding's `padding_idx`, as in the published code).
        bos_token_id: begin-of-sequence id.
        eos_token_id: end-of-sequence id.
        tie_word_embeddings: share the input embedding with the output head.
        rope_theta: RoPE base.
        partial_rotary_factor: fraction of each head's dimensions rotated, in (0, 1].
        rope_scaling: None or a `{"rope_type": "default"}` dict; scaled RoPE types are refused.
        attention_bias: biases on the q/k/v/o projections.
        attention_dropout: dropout on the attention probabilities (training only).
        clip_qkv: clamp queries, keys and values to `[-clip_qkv, clip_qkv]`, or None.
        num_experts_per_tok: experts each token is routed to (top-k).
        num_experts: routed experts per MoE layer.
        output_router_logits: must be False (the forward returns no router logits: the trainers
            record them from the router modules).
        router_aux_loss_coef: the load-balancing loss's coefficient in dllm_edit's trainers (0 turns it
            off).
        norm_topk_prob: inert (the published code never renormalises the top-k probabilities).
        qk_layernorm: RMSNorm over each head's queries and keys (before RoPE).
        moe_layer_freq: one entry per layer, 0 = dense MLP, other = MoE; None = every layer MoE.
        moe_router_enable_expert_bias: a per-expert bias buffer `expert_bias`, added to the softmax
            probabilities before the top-k (it moves both the choice and the weights, as published).
        moe_router_score_function: None or "softmax".
        routed_scaling_factor: None or 1.
        router_num_group: None or at most 1 (no group-limited routing).
        router_topk_group: None or at most 1.
        **kwargs: transformers' generic fields (`architectures`, `torch_dtype`, ...).

    Raises:
        ValueError: a field the published class does not have, or a value the native class does
            not implement.

    Examples:
        >>> from dllm_edit.models.llada_moe import LLaDAMoEConfig
        >>> config = LLaDAMoEConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        ...     expert_intermediate_size=16, num_experts=16, num_experts_per_tok=2, pad_token_id=0,
        ...     eos_token_id=1)
        >>> config.model_type, config.num_key_value_heads, config.moe_layer_freq
        ('lladamoe', 4, [1, 1])
        >>> LLaDAMoEConfig(moe_router_score_function="sigmoid")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: LLaDAMoEConfig: `moe_router_score_function='sigmoid'` is not implemented by ...
    """

    model_type = "lladamoe"
    keys_to_ignore_at_inference = ["past_key_values"]  # noqa: RUF012 (transformers' class attribute)

    def __init__(
        self,
        vocab_size: int = 157184,
        hidden_size: int = 2048,
        dense_intermediate_size: int = 8192,
        expert_intermediate_size: int = 1024,
        shared_expert_intermediate_size: int | None = None,
        num_hidden_layers: int = 16,
        num_attention_heads: int = 16,
        num_key_value_heads: int | None = None,
        hidden_act: str = "silu",
        max_position_embeddings: int = 4096,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-05,
        use_cache: bool = False,
        pad_token_id: int | None = 1,
        bos_token_id: int | None = None,
        eos_token_id: int | None = 50279,
        tie_word_embeddings: bool = False,
        rope_theta: float = 50000.0,
        partial_rotary_factor: float = 1.0,
        rope_scaling: dict[str, Any] | None = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        clip_qkv: float | None = None,
        num_experts_per_tok: int = 8,
        num_experts: int = 64,
        output_router_logits: bool = False,
        router_aux_loss_coef: float = 0.01,
        norm_topk_prob: bool | None = None,
        qk_layernorm: bool | None = True,
        moe_layer_freq: list[int] | None = None,
        moe_router_enable_expert_bias: bool | None = None,
        moe_router_score_function: str | None = "softmax",
        routed_scaling_factor: float | None = 1,
        router_num_group: int | None = None,
        router_topk_group: int | None = None,
        **kwargs: Any,
    ) -> None:
        rope_parameters = kwargs.pop("rope_parameters", None)  # what transformers 5.x saves
        # the hub checkpoints say `model_type: "llada"` (shared with dense LLaDA; their architectures
        # say `LLaDAMoEModelLM`): the instance keeps the class's "lladamoe"
        kwargs.pop("model_type", None)
        refuse_unknown_fields(type(self), kwargs, known=_EXTRA_KNOWN)
        if num_key_value_heads is None:
            num_key_value_heads = num_attention_heads
        if moe_layer_freq is None:
            moe_layer_freq = [1] * num_hidden_layers
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.dense_intermediate_size = dense_intermediate_size
        self.expert_intermediate_size = expert_intermediate_size
        self.shared_expert_intermediate_size = shared_expert_intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.partial_rotary_factor = partial_rotary_factor
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.clip_qkv = clip_qkv
        self.num_experts_per_tok = num_experts_per_tok
        self.num_experts = num_experts
        self.output_router_logits = output_router_logits
        self.router_aux_loss_coef = router_aux_loss_coef
        self.norm_topk_prob = norm_topk_prob
        self.qk_layernorm = qk_layernorm
        self.moe_layer_freq = list(moe_layer_freq)
        self.moe_router_enable_expert_bias = moe_router_enable_expert_bias
        self.moe_router_score_function = moe_router_score_function
        self.routed_scaling_factor = routed_scaling_factor
        self.router_num_group = router_num_group
        self.router_topk_group = router_topk_group
        self._check(rope_scaling if rope_scaling is not None else rope_parameters)
        # transformers 5.x turned `rope_scaling` into a property over `rope_parameters`: store it only
        # where it is a plain field (4.x), so both releases round-trip what they save.
        if not isinstance(getattr(type(self), "rope_scaling", None), property):
            self.rope_scaling = rope_scaling
        kwargs.update(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
        )
        super().__init__(**kwargs)

    def _check(self, rope: Any) -> None:
        """Refuse the values the native class does not implement (see the class docstring)."""
        cls = type(self)
        if self.hidden_size % self.num_attention_heads:
            refuse_value(cls, "num_attention_heads", self.num_attention_heads, "a divisor of hidden_size")
        if self.num_attention_heads % self.num_key_value_heads:
            refuse_value(
                cls, "num_key_value_heads", self.num_key_value_heads, "a divisor of num_attention_heads"
            )
        if self.hidden_act not in ACT2FN:
            refuse_value(cls, "hidden_act", self.hidden_act, "a key of transformers' ACT2FN")
        if _rope_type(rope) not in (None, "default"):
            refuse_value(cls, "rope_scaling", rope, "None or {'rope_type': 'default'}")
        if not 0 < self.partial_rotary_factor <= 1:
            refuse_value(cls, "partial_rotary_factor", self.partial_rotary_factor, "a value in (0, 1]")
        if not 0 < self.num_experts_per_tok <= self.num_experts:
            refuse_value(cls, "num_experts_per_tok", self.num_experts_per_tok, "1 .. num_experts")
        if len(self.moe_layer_freq) < self.num_hidden_layers:
            refuse_value(cls, "moe_layer_freq", self.moe_layer_freq, "one entry per layer")
        shared = self.shared_expert_intermediate_size
        if shared is not None and shared <= 0:
            refuse_value(cls, "shared_expert_intermediate_size", shared, "None or a positive width")
        if self.output_router_logits:
            refuse_value(cls, "output_router_logits", True, "False (no router logits or auxiliary loss)")
        if self.moe_router_score_function not in (None, "softmax"):
            refuse_value(
                cls,
                "moe_router_score_function",
                self.moe_router_score_function,
                "None or 'softmax' (the published code always routes by softmax)",
            )
        if self.routed_scaling_factor not in (None, 1):
            refuse_value(
                cls,
                "routed_scaling_factor",
                self.routed_scaling_factor,
                "None or 1 (the published code never scales the routing weights)",
            )
        for field in ("router_num_group", "router_topk_group"):
            value = getattr(self, field)
            if value is not None and value > 1:
                refuse_value(
                    cls, field, value, "None or at most 1 (the published code has no group-limited routing)"
                )
