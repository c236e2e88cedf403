"""torch.distributed helpers: the analysis shards its points over ranks (torchrun), rank 0 merges;
training runs as DistributedDataParallel (``training.fit``).

Everything here is a no-op in a single process, so the same code runs with and without torchrun.
"""
from __future__ import annotations

import atexit
import os
from typing import Any, Sequence, TypeVar

import torch
import torch.distributed as dist

from ..errors import ConfigError

T = TypeVar("T")


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def process_rank() -> int:
    """This process's rank: the process group's when one is initialised, else torchrun's
    ``RANK`` (before the group is started), else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return int(os.environ.get("RANK", "0"))
    return 0


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """The items rank ``rank`` of ``world`` takes (round robin)."""
    return list(items[rank::world])


def broadcast(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (picklable Python objects of our own making only)."""
    if rank_and_world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    rank, world = rank_and_world()
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(value: float, device: torch.device | str = "cpu") -> float:
    """The sum of ``value`` over the ranks (``value`` itself in a single process)."""
    if rank_and_world()[1] == 1:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item()


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()


def init_from_env(device: Any = "auto") -> bool:
    """Initialise the process group when launched by torchrun (``WORLD_SIZE`` > 1).

    NCCL when the ranks run on GPUs (``device`` "auto" or "cuda" and CUDA available; each rank on
    ``cuda:LOCAL_RANK``), gloo on the CPU (``device="cpu"``, or no CUDA). A rank left without a
    GPU of its own (more processes per node than GPUs) is a one-line ConfigError. Returns whether
    a process group is active.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return False
    if not dist.is_initialized():
        use_cuda = ranks_on_gpus(device)
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        # destroyed while the interpreter is whole: left to interpreter shutdown, gloo's worker
        # threads can abort the process ("terminate called without an active exception",
        # pytorch/pytorch#190489) after all the work was done
        atexit.register(shutdown)
    return True


def ranks_on_gpus(device: Any) -> bool:
    """Whether this torchrun rank trains on its own GPU (``cuda:LOCAL_RANK``)."""
    if str(device).split(":")[0] == "cpu" or not torch.cuda.is_available():
        return False
    local, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
    if local >= gpus:
        have = "1 GPU" if gpus == 1 else f"{gpus} GPUs"
        raise ConfigError(f"torchrun started local rank {local} on a machine with {have} (one "
                          f"process per GPU): start `torchrun --nproc_per_node {gpus}`, or pass "
                          f"device='cpu' to run the {os.environ.get('LOCAL_WORLD_SIZE', 'ranks')} "
                          f"processes on the CPU (gloo)")
    return True


def shutdown() -> None:
    """Destroy the process group this process started (a no-op without one); safe to call twice."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - at exit; the work is written, nothing left to save
            pass
