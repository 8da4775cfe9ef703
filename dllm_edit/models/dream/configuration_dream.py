"""`DreamConfig`: the configuration of Dream-7B, Dream-Coder-7B and DiffuCoder-7B checkpoints.

The fields and defaults are those of the checkpoints' `configuration_dream.py` (a Qwen2 config with
`mask_token_id`), under the checkpoints' own `model_type`, `"Dream"` (capital D). Fields that would
make the published code compute something dllm_edit's class does not (sliding-window attention,
scaled RoPE, M-RoPE) are refused by value, and fields no Dream checkpoint has are refused by name.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from dllm_edit.models.common import refuse_unknown_fields, refuse_value

#: transformers 5.x keeps RoPE settings in `rope_parameters` (`rope_scaling` is a property over it).
_ROPE_PARAMETERS = isinstance(getattr(PretrainedConfig, "rope_scaling", None), property)
#: The keys of a `rope_scaling` / `rope_parameters` dict standard RoPE reads.
_DEFAULT_ROPE_KEYS = frozenset({"rope_type", "type", "rope_theta"})
#: Fields some releases write and the computation ignores.
_INERT_FIELDS = ("max_window_layers", "keys_to_ignore_at_inference", "ignore_keys_at_rope_validation")


class DreamConfig(PretrainedConfig):
    """Configuration of a Dream model (Qwen2 layout, bidirectional attention, shifted logits).

    Args:
        vocab_size: tokens in the vocabulary (152064 in Dream-v0-7B).
        hidden_size: width of the residual stream.
        intermediate_size: width of the SwiGLU MLP.
        num_hidden_layers: decoder layers.
        num_attention_heads: query heads; `head_dim = hidden_size // num_attention_heads`.
        num_key_value_heads: key/value heads (grouped-query attention); None means one per query head.
        hidden_act: MLP activation (a key of transformers' `ACT2FN`).
        max_position_embeddings: longest position the checkpoint was trained for (not enforced).
        initializer_range: std of the normal init of linear and embedding weights.
        rms_norm_eps: epsilon of the RMS norms.
        use_cache: return a KV cache by default (Dream's default: False, diffusion decoding runs the
            whole canvas).
        tie_word_embeddings: share `lm_head.weight` with `model.embed_tokens.weight`.
        rope_theta: RoPE base.
        rope_scaling: None or a default-RoPE dict (`{"rope_type": "default"}`); scaled RoPE is refused.
        rope_parameters: transformers 5.x's name for `rope_scaling` (written by its `save_pretrained`).
        use_sliding_window: must be False (sliding-window attention is refused).
        sliding_window: kept for the round trip; None unless `use_sliding_window`.
        max_window_layers: kept for the round trip (inert without sliding windows).
        attention_dropout: dropout on the attention probabilities in training.
        mask_token_id: the `[MASK]` token (151666 in Dream).
        pad_token_id: the padding token (the embedding's `padding_idx`).
        use_mrope: must be False when given (Qwen2.5 checkpoints write it; Dream's code ignores it).
        **kwargs: transformers' generic fields (`bos_token_id`, `torch_dtype`, ...); any other field
            is refused by name.

    Raises:
        ValueError: a field or a value dllm_edit's class does not implement.

    Examples:
        >>> config = DreamConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        ...                      mask_token_id=63, pad_token_id=0)
        >>> config.model_type, config.mask_token_id, config.rope_theta
        ('Dream', 63, 10000.0)
        >>> DreamConfig(use_sliding_window=True)
        Traceback (most recent call last):
        ...
        ValueError: DreamConfig: `use_sliding_window=True` is not implemented by dllm_edit's native class (...
    """

    model_type = "Dream"
    keys_to_ignore_at_inference = ["past_key_values"]  # noqa: RUF012 (transformers' class attribute)

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 4096,
        intermediate_size: int = 22016,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        hidden_act: str = "silu",
        max_position_embeddings: int = 32768,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = False,
        tie_word_embeddings: bool = False,
        rope_theta: float | None = None,
        rope_scaling: dict[str, Any] | None = None,
        rope_parameters: dict[str, Any] | None = None,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        attention_dropout: float = 0.0,
        mask_token_id: int | None = 151666,
        pad_token_id: int | None = 151643,
        use_mrope: bool | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_unknown_fields(type(self), kwargs, known=_INERT_FIELDS)
        if use_sliding_window:
            refuse_value(type(self), "use_sliding_window", use_sliding_window, "False (full attention)")
        if use_mrope:
            refuse_value(type(self), "use_mrope", use_mrope, "False (standard 1-D RoPE)")
        rope = rope_parameters if rope_parameters is not None else rope_scaling
        rope_theta = _checked_rope(type(self), rope, rope_theta)
        if num_key_value_heads is None:
            num_key_value_heads = num_attention_heads
        if hidden_size % num_attention_heads or num_attention_heads % num_key_value_heads:
            raise ValueError(
                f"DreamConfig: hidden_size ({hidden_size}) must be a multiple of num_attention_heads "
                f"({num_attention_heads}), itself a multiple of num_key_value_heads ({num_key_value_heads})."
            )

        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window if use_sliding_window else None
        self.max_window_layers = max_window_layers
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        if _ROPE_PARAMETERS:  # 5.x: `rope_scaling` is a deprecated alias; its __init__ standardises this
            self.rope_parameters = dict(rope) if rope else None
        else:
            self.rope_scaling = dict(rope) if rope else None
        self.attention_dropout = attention_dropout
        if use_mrope is not None:
            self.use_mrope = use_mrope
        kwargs["tie_word_embeddings"] = tie_word_embeddings  # 4.57 takes it as an argument, 5.x as a field
        super().__init__(**kwargs)
        self.mask_token_id = mask_token_id
        self.pad_token_id = pad_token_id


def _checked_rope(config_class: type, rope: dict[str, Any] | None, rope_theta: float | None) -> float:
    """The RoPE base of a config whose RoPE dict (`rope_scaling` / `rope_parameters`) is standard RoPE.

    The dict's own `rope_theta` (transformers 5.x writes it there) takes precedence, as in 5.x.

    Raises:
        ValueError: a scaled RoPE type, a key standard RoPE does not read, or two different bases.
    """
    if rope is None:
        return 10000.0 if rope_theta is None else float(rope_theta)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default" or set(rope) - _DEFAULT_ROPE_KEYS:
        refuse_value(config_class, "rope_scaling", rope, "None or {'rope_type': 'default'} (standard RoPE)")
    inner = rope.get("rope_theta")
    if inner is not None and rope_theta is not None and float(inner) != float(rope_theta):
        raise ValueError(
            f"{config_class.__name__}: rope_theta={rope_theta} and rope_scaling/rope_parameters "
            f"rope_theta={inner} disagree; give one base."
        )
    base = inner if inner is not None else rope_theta
    return 10000.0 if base is None else float(base)
