"""`LLaDAConfig`: the config of LLaDA-8B / LLaDA-1.5 checkpoints (`model_type: "llada"`), read as the
checkpoints' `config.json` spells it (OLMo-style names: `d_model`, `n_heads`, `n_layers`, ...).

Every field of the published configuration (`configuration_llada.py` of GSAI-ML/LLaDA-8B-Instruct,
and Fast-dLLM's copy, which adds `train_max_sequence_length`) is accepted. Values that would select a
computation dllm_edit's native class does not implement (ALiBi, the sequential or parallel block,
LayerNorm instead of RMSNorm, QK-norm, ...) are refused by name, and so is any field the published
configuration does not have.
"""

from __future__ import annotations

from typing import Any, ClassVar

from transformers import PretrainedConfig

from dllm_edit.models.common import refuse_unknown_fields, refuse_value

#: Activations of the MLP's gate (`act(ff_proj(x)) * up_proj(x)`), as transformers' `ACT2FN` names them.
ACTIVATIONS = ("silu", "gelu", "relu")

#: Fields of the published configuration that only the remote code's training or start-up reads
#: (FSDP init device, init scheme, AMP precision, flash-attn switch, Fast-dLLM's training length).
_INERT_FIELDS = ("train_max_sequence_length",)


class LLaDAConfig(PretrainedConfig):
    """Configuration of LLaDA-8B / LLaDA-1.5 (`model_type: "llada"`), with the checkpoints' field names.

    Defaults are LLaDA-8B-Instruct's `config.json` (the published `ModelConfig` defaults are GPT-2's;
    every released checkpoint writes all fields). `save_pretrained` writes every family field, so a
    saved config also loads with the checkpoint's own remote code.

    Args:
        d_model: hidden size.
        n_heads: attention heads.
        n_kv_heads: key/value heads (None: `n_heads`, or 1 with `multi_query_attention=True`).
        n_layers: transformer blocks.
        mlp_ratio: MLP width as a multiple of `d_model` when `mlp_hidden_size` is None.
        mlp_hidden_size: MLP width.
        activation_type: `"silu"`, `"gelu"` or `"relu"` (gate of the Llama MLP).
        block_type: `"llama"` only.
        block_group_size: 1 only (groups change the parameter names).
        alibi: False only. alibi_bias_max: read only with ALiBi.
        rope: True only. rope_full_precision: apply RoPE in float32 whatever the model dtype.
        rope_theta: RoPE base.
        flash_attention: the remote code's switch to `flash_attn`; the native class picks its attention
            through `attn_implementation` instead (the same attention).
        attention_dropout, residual_dropout, embedding_dropout: dropout probabilities (training).
        multi_query_attention: None, or True (one key/value head) / False (`n_heads`).
        attention_layer_norm: False only (no QK-norm). attention_layer_norm_with_affine: read only with it.
        input_emb_norm: False only.
        layer_norm_type: `"rms"` only. layer_norm_with_affine: True only (norm weights).
        rms_norm_eps: RMSNorm epsilon.
        max_sequence_length: training length (RoPE is computed at any position).
        include_qkv_bias: biases on the query/key/value projections.
        include_bias: biases on every linear layer (and the norms, unless `bias_for_layer_norm` says).
        bias_for_layer_norm: biases on the norms (None: `include_bias`).
        scale_logits: False only.
        vocab_size: tokens of the tokenizer.
        embedding_size: rows of the embedding and columns of the logits (>= `vocab_size`; None:
            `vocab_size`).
        weight_tying: the output layer reuses the input embedding.
        eos_token_id, pad_token_id, mask_token_id: special tokens.
        init_device, init_fn, init_std, init_cutoff_factor, precision: read by the remote code's training
            set-up; `init_std` is this config's `initializer_range`.
        use_cache: return a KV cache by default.
        **kwargs: transformers' generic fields, and Fast-dLLM's `train_max_sequence_length`.

    Raises:
        ValueError: an unknown field, or a value the native class does not implement.

    Examples:
        >>> from dllm_edit.models.llada import LLaDAConfig
        >>> config = LLaDAConfig(d_model=64, n_heads=4, n_kv_heads=4, n_layers=2, mlp_hidden_size=96)
        >>> config.hidden_size, config.num_key_value_heads, config.head_dim
        (64, 4, 16)
        >>> try:
        ...     LLaDAConfig(alibi=True)
        ... except ValueError as error:
        ...     print(str(error)[:70])
        LLaDAConfig: `alibi=True` is not implemented by dllm_edit's native cla
    """

    model_type = "llada"
    keys_to_ignore_at_inference: ClassVar[list[str]] = ["past_key_values"]
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
        "initializer_range": "init_std",
    }

    def __init__(
        self,
        d_model: int = 4096,
        n_heads: int = 32,
        n_kv_heads: int | None = 32,
        n_layers: int = 32,
        mlp_ratio: int = 4,
        mlp_hidden_size: int | None = 12288,
        activation_type: str = "silu",
        block_type: str = "llama",
        block_group_size: int = 1,
        alibi: bool = False,
        alibi_bias_max: float = 8.0,
        rope: bool = True,
        rope_full_precision: bool = True,
        flash_attention: bool = False,
        attention_dropout: float = 0.0,
        multi_query_attention: bool | None = None,
        attention_layer_norm: bool = False,
        residual_dropout: float = 0.0,
        embedding_dropout: float = 0.0,
        input_emb_norm: bool = False,
        layer_norm_type: str = "rms",
        layer_norm_with_affine: bool = True,
        rms_norm_eps: float = 1e-5,
        attention_layer_norm_with_affine: bool = True,
        max_sequence_length: int = 4096,
        rope_theta: float = 500000.0,
        include_qkv_bias: bool | None = False,
        include_bias: bool = False,
        bias_for_layer_norm: bool | None = False,
        scale_logits: bool = False,
        vocab_size: int = 126464,
        embedding_size: int | None = 126464,
        weight_tying: bool = False,
        eos_token_id: int | None = 126081,
        pad_token_id: int | None = 126081,
        mask_token_id: int | None = 126336,
        init_device: str | None = "meta",
        init_fn: str = "mitchell",
        init_std: float = 0.02,
        init_cutoff_factor: float | None = None,
        precision: str | None = "amp_bf16",
        use_cache: bool = False,
        **kwargs: Any,
    ) -> None:
        refuse_unknown_fields(type(self), kwargs, known=_INERT_FIELDS)
        fields = dict(locals())
        family = {name: fields[name] for name in FAMILY_FIELDS}
        _refuse_unimplemented(type(self), family)
        tie = kwargs.pop("tie_word_embeddings", None)
        if tie is not None and bool(tie) != bool(weight_tying):
            refuse_value(type(self), "tie_word_embeddings", tie, f"equal to weight_tying={weight_tying!r}")
        super().__init__(**kwargs)
        for name, value in family.items():
            setattr(self, name, value)
        self.tie_word_embeddings = bool(weight_tying)  # transformers ties only what LLaDA ties

    @property
    def num_key_value_heads(self) -> int:
        """Key/value heads, as the remote code's `effective_n_kv_heads` resolves them."""
        if self.n_kv_heads is None:
            return 1 if self.multi_query_attention is True else self.n_heads
        return int(self.n_kv_heads)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def intermediate_size(self) -> int:
        """MLP width: `mlp_hidden_size`, or `mlp_ratio * d_model`."""
        return self.mlp_hidden_size if self.mlp_hidden_size is not None else self.mlp_ratio * self.d_model

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and columns of the logits: `embedding_size`, or `vocab_size`."""
        return self.embedding_size or self.vocab_size

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        """The config of `config_dict`; LLaDA-MoE's hub checkpoints, which say `model_type: llada`,
        get `LLaDAMoEConfig` (told apart by their `architectures`, or their experts), so
        `AutoConfig` / `AutoModelForCausalLM.from_pretrained` build the MoE class for them."""
        if cls is LLaDAConfig and (
            "LLaDAMoEModelLM" in (config_dict.get("architectures") or []) or "num_experts" in config_dict
        ):
            from dllm_edit.models.llada_moe import LLaDAMoEConfig

            return LLaDAMoEConfig.from_dict(config_dict, **kwargs)
        return super().from_dict(config_dict, **kwargs)

    def to_diff_dict(self) -> dict[str, Any]:
        """transformers' diff dict plus every family field (so the remote code, whose defaults are
        GPT-2's, reads the same model from a saved `config.json`)."""
        out = super().to_diff_dict()
        out.update({name: getattr(self, name) for name in FAMILY_FIELDS})
        return out


#: The published `ModelConfig` fields plus `use_cache`, in its order.
FAMILY_FIELDS = (
    "d_model",
    "n_heads",
    "n_kv_heads",
    "n_layers",
    "mlp_ratio",
    "mlp_hidden_size",
    "activation_type",
    "block_type",
    "block_group_size",
    "alibi",
    "alibi_bias_max",
    "rope",
    "rope_full_precision",
    "flash_attention",
    "attention_dropout",
    "multi_query_attention",
    "attention_layer_norm",
    "residual_dropout",
    "embedding_dropout",
    "input_emb_norm",
    "layer_norm_type",
    "layer_norm_with_affine",
    "rms_norm_eps",
    "attention_layer_norm_with_affine",
    "max_sequence_length",
    "rope_theta",
    "include_qkv_bias",
    "include_bias",
    "bias_for_layer_norm",
    "scale_logits",
    "vocab_size",
    "embedding_size",
    "weight_tying",
    "eos_token_id",
    "pad_token_id",
    "mask_token_id",
    "init_device",
    "init_fn",
    "init_std",
    "init_cutoff_factor",
    "precision",
    "use_cache",
)

#: field -> (the values the native class implements, how the error states them).
_SUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "block_type": (("llama",), "'llama'"),
    "block_group_size": ((1,), "1"),
    "alibi": ((False,), "False"),
    "rope": ((True,), "True"),
    "attention_layer_norm": ((False,), "False"),
    "input_emb_norm": ((False,), "False"),
    "layer_norm_type": (("rms",), "'rms'"),
    "layer_norm_with_affine": ((True,), "True"),
    "scale_logits": ((False,), "False"),
    "activation_type": (ACTIVATIONS, f"one of {list(ACTIVATIONS)}"),
}


def _refuse_unimplemented(config_class: type, fields: dict[str, Any]) -> None:
    """Raise for a value that selects a computation the native class does not implement, or a shape
    the remote code itself refuses."""
    for name, (supported, said) in _SUPPORTED.items():
        value = fields[name]
        if value not in supported:
            refuse_value(config_class, name, value, said)
    d_model, n_heads, n_kv_heads = fields["d_model"], fields["n_heads"], fields["n_kv_heads"]
    mqa = fields["multi_query_attention"]
    if n_kv_heads is not None and mqa is not None and n_kv_heads != (1 if mqa else n_heads):
        raise ValueError(
            f"{config_class.__name__}: `multi_query_attention={mqa!r}` and `n_kv_heads={n_kv_heads!r}` "
            "disagree (the remote code refuses both set at once); set one of them."
        )
    kv_heads = n_kv_heads if n_kv_heads is not None else (1 if mqa else n_heads)
    if d_model % n_heads or n_heads % kv_heads:
        raise ValueError(
            f"{config_class.__name__}: d_model={d_model} must be a multiple of n_heads={n_heads}, and "
            f"n_heads a multiple of the key/value heads ({kv_heads})."
        )
    vocab, rows = fields["vocab_size"], fields["embedding_size"]
    if rows is not None and rows < vocab:
        refuse_value(config_class, "embedding_size", rows, f"None or >= vocab_size={vocab}")
