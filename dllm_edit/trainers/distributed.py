"""Collectives the trainers need across data-parallel processes (a no-op in a single process).

Each helper works whether or not `torch.distributed` is initialised (one process: the input
itself), on any backend (gloo on CPU, NCCL on GPUs): tensors travel as Python objects, so rows of
different lengths per process are fine. They are meant for small per-example tensors (rewards,
metrics, counts), not for model states.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of processes (1 without `torch.distributed`).

    Examples:
        >>> world_size()
        1
    """
    return dist.get_world_size() if _distributed() else 1


def all_gather_objects(obj: Any) -> list[Any]:
    """Every process's `obj` in rank order (`[obj]` in a single process).

    Examples:
        >>> all_gather_objects({"rows": 3})
        [{'rows': 3}]
    """
    if not _distributed():
        return [obj]
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, obj)
    return parts


def gather_rows(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Every process's `rows` `[n_p, ...]` concatenated in rank order, and where this process's start.

    Args:
        rows: a tensor whose first dimension may differ between processes.

    Returns:
        `(all_rows [sum n_p, ...] on rows' device, offset of this process's rows)`.

    Examples:
        >>> import torch
        >>> gather_rows(torch.tensor([1.0, 2.0]))
        (tensor([1., 2.]), 0)
    """
    if not _distributed():
        return rows, 0
    tensors: list[torch.Tensor] = all_gather_objects(rows.detach().cpu())
    offset = sum(int(p.shape[0]) for p in tensors[: dist.get_rank()])
    return torch.cat(tensors).to(rows.device), offset


def sum_across_processes(value: float) -> float:
    """`value` summed over the processes.

    Examples:
        >>> sum_across_processes(3.0)
        3.0
    """
    return float(sum(all_gather_objects(float(value))))


def global_mean_scale(local_count: int) -> float:
    """Factor turning a local mean over `local_count` items into this process's share of the global mean.

    Data-parallel training averages gradients over processes (DDP, FSDP, DeepSpeed), so a loss that
    is a mean over this process's items, times this factor (`local_count * world_size / total_count`),
    gives the gradient of the mean over every process's items: what one process holding the whole
    global batch computes. 0 when no process has an item.

    Examples:
        >>> global_mean_scale(4)
        1.0
    """
    total = sum_across_processes(local_count)
    return local_count * world_size() / total if total > 0 else 0.0


__all__ = ["gather_rows", "global_mean_scale", "sum_across_processes", "world_size"]
