"""EBPO's rollout batch: the `Rollouts` record, the prompts dataset whose rows carry their index, the
training rows built from decoded completions, and the rollout metrics of the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .distributed import gather_rows
from .eos_extension import extend_to_block_end
from .rewards import reward_name


@dataclass
class Rollouts:
    """A decoded, scored micro-batch, ready for the loss.

    Attributes:
        clean: LongTensor `[B, T]`, prompt ⊕ completion, right-padded to whole blocks.
        valid: BoolTensor `[B, T]`, non-padding positions.
        supervised: BoolTensor `[B, T]`, completion positions (with EOS to the block end).
        seeds: LongTensor `[B]`, per-sample noise seeds.
        advantages: FloatTensor `[B]`.
        old_logp: FloatTensor `[B, T]`, ELBO summands of the rollout policy (None until the first loss
            forward on the batch, whose detached summands they are).
        ref_logp: FloatTensor `[B, T]` or None, of the reference policy (`beta > 0`).
        created_step: the optimizer step the rollouts were generated at.
    """

    clean: torch.Tensor
    valid: torch.Tensor
    supervised: torch.Tensor
    seeds: torch.Tensor
    advantages: torch.Tensor
    old_logp: torch.Tensor | None
    ref_logp: torch.Tensor | None
    created_step: int


def _identity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows


_INDEX = "__dllm_edit_example_index__"


class _IndexedRows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The prompts dataset, each row carrying its index (which seeds its rollouts and noise)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {**self.dataset[index], _INDEX: index}


def training_sequences(
    ids: torch.Tensor,
    attention: torch.Tensor,
    completion: torch.Tensor,
    first_eos: torch.Tensor,
    has_eos: torch.Tensor,
    eos_id: torch.Tensor,
    block_length: int,
    pad_token_id: int | None,
    mask_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `[prompt ⊕ completion + EOS to the block end]` rows, as the SFT trainer builds them.

    Returns:
        `(clean, valid, supervised)`, each `[B, T]` with T a multiple of the block length.
    """
    bl = block_length
    pad_id = pad_token_id
    pad = mask_token_id if pad_id is None else pad_id  # padding is never attended to or scored
    prompt_len = attention.sum(dim=1)  # [B]
    kept = torch.where(has_eos, first_eos + 1, first_eos)  # [B] completion tokens incl. the EOS
    end = prompt_len + kept  # [B]
    width = int(-(-int(end.max()) // bl) * bl)
    batch = ids.shape[0]
    pos = torch.arange(width, device=ids.device)[None]  # [1, T]
    # gather prompt tokens (they sit right-aligned in `ids`) and completion tokens into place
    prompt_src = (ids.shape[1] - prompt_len)[:, None] + pos  # [B, T]
    comp_src = pos - prompt_len[:, None]  # [B, T]
    in_prompt = pos < prompt_len[:, None]
    in_completion = ~in_prompt & (comp_src < kept[:, None])
    clean = torch.full((batch, width), pad, device=ids.device, dtype=torch.long)
    clean = torch.where(in_prompt, ids.gather(1, prompt_src.clamp(max=ids.shape[1] - 1)), clean)
    clean = torch.where(
        in_completion, completion.gather(1, comp_src.clamp(0, completion.shape[1] - 1)), clean
    )
    clean, _, end = extend_to_block_end(clean, end, has_eos, eos_id, bl)  # [B, T], _, [B]
    valid = pos < end[:, None]
    supervised = valid & ~in_prompt
    return clean, valid, supervised


def log_rollouts(
    metrics: dict[str, list[float]],
    reward_funcs: list[Any],
    out: dict[str, torch.Tensor | None],
    rewards: torch.Tensor,
    total: torch.Tensor,
    unscored: torch.Tensor,
    first_eos: torch.Tensor,
    has_eos: torch.Tensor,
) -> None:
    """Rollout metrics of the global batch (every process's rows gathered)."""
    device = rewards.device
    columns = [
        total,
        unscored.float(),
        ((first_eos == 0) & has_eos).float(),
        first_eos.float(),
        *(v.to(device) for v in out.values() if v is not None),
    ]
    gathered, _ = gather_rows(torch.cat([torch.stack(columns, dim=1), rewards], dim=1))  # [B_global, K]
    total, unscored_f, empty, length, *decoding = gathered[:, : len(columns)].unbind(dim=1)
    rewards = gathered[:, len(columns) :]  # [B_global, F]
    m = metrics
    m["reward"].append(total.mean().item())
    m["reward_std"].append(total.std().item() if total.numel() > 1 else 0.0)
    for j, func in enumerate(reward_funcs):
        column = rewards[:, j]
        if (~torch.isnan(column)).any():
            m[f"rewards/{reward_name(func)}"].append(torch.nanmean(column).item())
    m["completions/unscored_fraction"].append(unscored_f.mean().item())
    m["completions/empty_fraction"].append(empty.mean().item())
    m["completions/mean_length"].append(length.mean().item())
    names = [f"rollout/{k}" for k, v in out.items() if v is not None]
    for name, values in zip(names, decoding, strict=True):
        m[name].append(values.mean().item())


def unwrap_peft(model: Any) -> Any:
    """The PEFT model inside DDP-style wrappers."""
    while (
        hasattr(model, "module")
        and isinstance(model.module, torch.nn.Module)
        and not hasattr(model, "disable_adapter")
    ):
        model = model.module
    return model
