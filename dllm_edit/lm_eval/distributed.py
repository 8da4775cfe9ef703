"""The process group lm-eval shards requests over (`accelerate launch` / `torchrun`)."""

from __future__ import annotations

from typing import Any

import torch

from dllm_edit.trainers.distributed import all_gather_objects

__all__ = [
    "all_gather_objects",
    "all_gather_stacked",
    "barrier",
    "end_process_group",
    "gather_to",
    "process_group",
]


def process_group() -> tuple[int, int]:
    """`(rank, world_size)` of this process; starts the default process group (gloo on CPU, nccl on
    CUDA) through accelerate when launched with several processes (`accelerate launch --multi_gpu
    --num_processes N`, or `torchrun --nproc_per_node N`; on a machine without CUDA both give
    CPU processes joined by gloo — `accelerate launch --cpu` starts a single process).
    """
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    return state.process_index, state.num_processes


def all_gather_stacked(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor`, stacked: `[world_size, *tensor.shape]`."""
    import torch.distributed as dist

    parts = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.stack(parts)


def gather_to(obj: Any, dst: int) -> list[Any] | None:
    """Every rank's `obj` as a list on rank `dst`; None elsewhere."""
    import torch.distributed as dist

    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    dist.gather_object(obj, out, dst=dst)
    return out


def barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def end_process_group() -> None:
    """Destroy the default process group, if this process started one, before the interpreter exits.

    Left to the interpreter's shutdown, gloo's worker threads can be torn down while still joinable
    ("terminate called without an active exception", an abort after the results were written).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
