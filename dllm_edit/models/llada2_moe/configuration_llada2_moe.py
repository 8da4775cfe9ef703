"""Configuration of LLaDA2.0 / LLaDA2.1 (mini and flash): `model_type: "llada2_moe"`.

The fields and their defaults are the published `configuration_llada2_moe.py`'s, so a hub
checkpoint's `config.json` loads as it is. The checkpoints also carry fields the published modeling
file never reads (`score_function`, `router_dtype`, `norm_topk_prob`, ...): they are kept, and a
value other than the one the modeling file computes is refused, as is any field this class does
not know.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from dllm_edit.models.common import refuse_unknown_fields, refuse_value

#: Fields the published modeling file accepts and never reads (dropouts other than attention's,
#: sliding-window sizes when the window is off, the router-logits switch: no effect on the logits).
_INERT = (
    "embedding_dropout",
    "output_dropout",
    "sliding_window",
    "max_window_layers",
    "output_router_logits",
)


class LLaDA2MoeConfig(PretrainedConfig):
    """Configuration of the LLaDA2.x MoE diffusion LMs (LLaDA2.0-mini / -flash, LLaDA2.1-mini / -flash).

    Args:
        vocab_size: vocabulary size (157184 in the checkpoints).
        hidden_size: model width.
        intermediate_size: width of the dense MLP of the first `first_k_dense_replace` layers.
        num_hidden_layers: decoder layers.
        num_attention_heads: query heads.
        num_key_value_heads: key/value heads (GQA); 0 means `num_attention_heads`.
        hidden_act: activation of the gated MLPs.
        use_qkv_bias: bias of the fused `query_key_value` projection.
        use_qk_norm: RMSNorm over each query and key head before RoPE.
        use_bias: bias of the attention output projection `dense`.
        rms_norm_eps: epsilon of every RMSNorm.
        norm_head: only False (the published code has no normalized head).
        tie_word_embeddings: tie `lm_head` to `word_embeddings`.
        embedding_dropout: not used by the published code (kept for the checkpoints).
        attention_dropout: dropout on the attention probabilities in training.
        output_dropout: not used by the published code (kept for the checkpoints).
        initializer_range: std of the normal initialisation.
        max_position_embeddings: longest context trained.
        rope_theta: RoPE base.
        use_cache: default of `forward(use_cache=...)`.
        use_sliding_window: only False.
        sliding_window: not used while `use_sliding_window` is False.
        max_window_layers: not used while `use_sliding_window` is False.
        rope_scaling: only None or `{"rope_type": "default"}`.
        pad_token_id: padding id (the embedding's `padding_idx`).
        num_experts: routed experts per MoE layer (None: every layer dense).
        num_shared_experts: experts every token runs (one MLP `num_shared_experts` times as wide).
        num_experts_per_tok: routed experts per token (top-k).
        n_group: expert groups of the group-limited routing.
        topk_group: groups a token may route to.
        routed_scaling_factor: factor on the routed experts' weights.
        moe_intermediate_size: width of each expert.
        first_k_dense_replace: the first layers with a dense MLP instead of experts.
        head_dim: width of a head (default `hidden_size // num_attention_heads`).
        output_router_logits: accepted; the native class does not return router logits.
        partial_rotary_factor: share of each head's dims that RoPE rotates (the first ones).
        norm_topk_prob: only True (the routed weights are normalised to sum to one when top-k > 1).
        score_function: only "sigmoid".
        moe_router_enable_expert_bias: only True (the `expert_bias` buffer shifts the routing scores).
        router_dtype: only "fp32" (the router runs in float32).
        rotary_dim: None or `int(head_dim * partial_rotary_factor)`.
        use_rmsnorm: only True.
        norm_softmax: only False.
        using_split_qkv_in_self_attention: only False (one fused `query_key_value` projection).

    Raises:
        ValueError: an unknown field, or a value the native class does not implement.

    Examples:
        >>> config = LLaDA2MoeConfig(vocab_size=48, hidden_size=32, num_attention_heads=4,
        ...                          num_key_value_heads=1, num_experts=8, n_group=4, topk_group=2,
        ...                          moe_intermediate_size=8, intermediate_size=80)
        >>> config.head_dim, config.num_experts_per_tok
        (8, 2)
        >>> LLaDA2MoeConfig(score_function="softmax")
        Traceback (most recent call last):
        ...
        ValueError: LLaDA2MoeConfig: `score_function='softmax'` is not implemented by ...
    """

    model_type = "llada2_moe"
    keys_to_ignore_at_inference = ["past_key_values"]  # noqa: RUF012 (transformers' class attribute)
    #: a plain field, as in the checkpoints (transformers 5.x makes it a property over `rope_parameters`)
    rope_scaling: dict[str, Any] | None = None

    def __init__(
        self,
        vocab_size: int = 30592,
        hidden_size: int = 1024,
        intermediate_size: int | None = None,
        num_hidden_layers: int = 24,
        num_attention_heads: int = 16,
        num_key_value_heads: int = 0,
        hidden_act: str = "silu",
        use_qkv_bias: bool = False,
        use_qk_norm: bool = True,
        use_bias: bool = True,
        rms_norm_eps: float = 1e-05,
        norm_head: bool = False,
        tie_word_embeddings: bool = False,
        embedding_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        output_dropout: float = 0.1,
        initializer_range: float = 0.02,
        max_position_embeddings: int = 16384,
        rope_theta: float = 10000.0,
        use_cache: bool = True,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        rope_scaling: dict[str, Any] | None = None,
        pad_token_id: int | None = 126081,
        num_experts: int | None = 16,
        num_shared_experts: int | None = 0,
        num_experts_per_tok: int = 2,
        n_group: int = 8,
        topk_group: int = 4,
        routed_scaling_factor: float = 2.5,
        moe_intermediate_size: int | None = None,
        first_k_dense_replace: int = 0,
        head_dim: int | None = None,
        output_router_logits: bool = False,
        partial_rotary_factor: float = 0.5,
        norm_topk_prob: bool = True,
        score_function: str = "sigmoid",
        moe_router_enable_expert_bias: bool = True,
        router_dtype: str | None = "fp32",
        rotary_dim: int | None = None,
        use_rmsnorm: bool = True,
        norm_softmax: bool = False,
        using_split_qkv_in_self_attention: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        # LLaDA2.1's configuration: 0 key/value heads means one per query head (LLaDA2.0's divides by 0)
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.hidden_act = hidden_act
        self.use_qkv_bias = use_qkv_bias
        self.use_qk_norm = use_qk_norm
        self.use_bias = use_bias
        self.rms_norm_eps = rms_norm_eps
        self.norm_head = norm_head
        self.embedding_dropout = embedding_dropout
        self.attention_dropout = attention_dropout
        self.output_dropout = output_dropout
        self.initializer_range = initializer_range
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.use_cache = use_cache
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window
        self.max_window_layers = max_window_layers
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.rope_scaling = rope_scaling
        self.num_experts = num_experts
        self.num_shared_experts = num_shared_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.n_group = n_group
        self.topk_group = topk_group
        self.routed_scaling_factor = routed_scaling_factor
        self.moe_intermediate_size = moe_intermediate_size
        self.first_k_dense_replace = first_k_dense_replace
        self.output_router_logits = output_router_logits
        self.partial_rotary_factor = partial_rotary_factor
        self.norm_topk_prob = norm_topk_prob
        self.score_function = score_function
        self.moe_router_enable_expert_bias = moe_router_enable_expert_bias
        self.router_dtype = router_dtype
        self.rotary_dim = rotary_dim
        self.use_rmsnorm = use_rmsnorm
        self.norm_softmax = norm_softmax
        self.using_split_qkv_in_self_attention = using_split_qkv_in_self_attention
        self._refuse_unimplemented()
        refuse_unknown_fields(type(self), kwargs, known=_INERT)
        kwargs.update(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings)
        super().__init__(**kwargs)

    @property
    def rope_dim(self) -> int:
        """Dims of each head that RoPE rotates: `int(head_dim * partial_rotary_factor)`."""
        return int(self.head_dim * self.partial_rotary_factor)

    def _refuse_unimplemented(self) -> None:
        """Refuse the values that would make the native class compute another model."""
        cls = type(self)
        fixed: dict[str, Any] = {
            "norm_head": False,
            "use_sliding_window": False,
            "norm_topk_prob": True,
            "score_function": "sigmoid",
            "moe_router_enable_expert_bias": True,
            "use_rmsnorm": True,
            "norm_softmax": False,
            "using_split_qkv_in_self_attention": False,
        }
        for field, supported in fixed.items():
            if getattr(self, field) != supported:
                refuse_value(cls, field, getattr(self, field), repr(supported))
        if self.router_dtype not in (None, "fp32", "float32"):
            refuse_value(cls, "router_dtype", self.router_dtype, "'fp32' (the router runs in float32)")
        rope_type = (self.rope_scaling or {}).get(
            "rope_type", (self.rope_scaling or {}).get("type", "default")
        )
        if rope_type != "default":
            refuse_value(cls, "rope_scaling", self.rope_scaling, "None or {'rope_type': 'default'}")
        if self.rotary_dim is not None and self.rotary_dim != self.rope_dim:
            refuse_value(
                cls,
                "rotary_dim",
                self.rotary_dim,
                f"None or int(head_dim * partial_rotary_factor) = {self.rope_dim}",
            )
        if self.rope_dim % 2 or not 0 < self.rope_dim <= self.head_dim:
            refuse_value(
                cls, "partial_rotary_factor", self.partial_rotary_factor, "an even share of head_dim"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            refuse_value(
                cls, "num_key_value_heads", self.num_key_value_heads, "a divisor of num_attention_heads"
            )
        if self.num_experts is not None:
            if self.n_group < 1 or self.num_experts % self.n_group or self.num_experts // self.n_group < 2:
                refuse_value(
                    cls, "n_group", self.n_group, "a divisor of num_experts leaving two or more per group"
                )
            if not 1 <= self.topk_group <= self.n_group:
                refuse_value(cls, "topk_group", self.topk_group, "1 .. n_group")
            if not 1 <= self.num_experts_per_tok <= self.num_experts * self.topk_group // self.n_group:
                refuse_value(
                    cls,
                    "num_experts_per_tok",
                    self.num_experts_per_tok,
                    "1 .. the experts of topk_group groups",
                )
