"""Checkpoints carry the decoding settings they were trained for, as `generation_config.json`.

Both trainers write a full `dllm_edit.EditGenerationConfig` next to the weights of every checkpoint
and of the final save (adapter folders included): the block length the model was trained with, the
mask / EOS / pad ids, and editing switched off for a model trained without the editing stream (T2T
edits at decode time can hurt a model never trained to make them). `dllm_edit.generate` and
`EditGenerationConfig.from_pretrained(checkpoint)` read it back, so a model trained with blocks of 16
decodes with blocks of 16 without being told.
"""

from __future__ import annotations

from typing import Any

from dllm_edit.config import EditGenerationConfig


class SavesDecodingConfig:
    """Trainer mixin: after transformers saves a model (`Trainer._save`), write `decoding_config()`."""

    def decoding_config(self) -> EditGenerationConfig:  # pragma: no cover - each trainer defines it
        """The decoding settings this training run implies."""
        raise NotImplementedError

    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        super()._save(output_dir, state_dict)  # type: ignore[misc]
        folder = output_dir if output_dir is not None else self.args.output_dir  # type: ignore[attr-defined]
        self.decoding_config().save_pretrained(folder)


def special_ids(tokenizer: Any, eos_token_id: int | None) -> dict[str, int]:
    """`eos_token_id` / `pad_token_id` of a saved decoding config (pad: the tokenizer's, else EOS)."""
    fields: dict[str, int] = {}
    if eos_token_id is not None:
        fields["eos_token_id"] = int(eos_token_id)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = eos_token_id if pad is None else pad
    if pad is not None:
        fields["pad_token_id"] = int(pad)
    return fields
