"""Several processes, one training run: torchrun's environment, the process group, collectives.

Under ``torchrun --nproc_per_node=N`` every process runs the same ``train`` call.  Each reads
its RANK / WORLD_SIZE / LOCAL_RANK, joins the process group (gloo on CPU, nccl on CUDA), takes
its shard of the batches and keeps a DistributedDataParallel copy of the model.  Rank 0 alone
logs, shows progress and writes checkpoints.  Without those variables (or WORLD_SIZE=1) every
helper below is a no-op on a single process.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import InputError, RunError
from .devices import parse_device

__all__ = [
    "DistributedContext",
    "resolve_device",
    "setup_distributed",
    "teardown_distributed",
    "all_reduce_sum",
    "broadcast_object",
    "all_gather_object",
    "barrier",
    "PeerLostError",
    "peer_lost",
]

#: Long enough for rank 0 to decode a validation set while the others wait for it.
PROCESS_GROUP_TIMEOUT = datetime.timedelta(hours=2)


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: its rank among ``world_size`` and the device it trains on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_process_group: bool = False
    cpu_group: Any = None  # a gloo group for CPU tensors when the main group is nccl

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that logs and writes checkpoints."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """True when more than one process trains."""
        return self.world_size > 1


def resolve_device(preference: str, local_rank: int = 0) -> torch.device:
    """The device to train on: "auto" is this process's GPU when there is one, else the CPU;
    "cuda" insists on a GPU (InputError naming what this machine has, from
    :func:`~qkv.training.devices.parse_device`, when there is none)."""
    if preference not in ("auto", "cpu", "cuda"):
        raise InputError(
            f"device={preference!r} is unknown for training; use 'auto', 'cpu' or 'cuda'",
            fields=("device",),
        )
    device = parse_device(preference)
    if device.type == "cpu":
        return device
    index = local_rank % torch.cuda.device_count()  # under torchrun: this process's GPU
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def setup_distributed(device: str = "auto") -> DistributedContext:
    """Read torchrun's environment and join (or reuse) the process group."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    if dist.is_available() and dist.is_initialized():
        world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size <= 1:
        return DistributedContext(0, 1, 0, resolve_device(device))
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must lie in [0, WORLD_SIZE={world_size})")
    resolved = resolve_device(device, local_rank)
    owns = False
    if not dist.is_initialized():
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                raise ValueError(
                    f"WORLD_SIZE={world_size} but {name} is not set; launch with torchrun"
                )
        backend = "nccl" if resolved.type == "cuda" else "gloo"
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=PROCESS_GROUP_TIMEOUT
        )
        owns = True
    cpu_group = None
    if dist.get_backend() != "gloo":
        cpu_group = dist.new_group(backend="gloo", timeout=PROCESS_GROUP_TIMEOUT)
    return DistributedContext(rank, world_size, local_rank, resolved, owns, cpu_group)


def teardown_distributed(context: DistributedContext, *, wait_for_peers: bool = True) -> None:
    """Leave the process group if :func:`setup_distributed` created it.  ``wait_for_peers``:
    first wait at a barrier for every rank to finish; pass False after an error, when the
    other ranks may never get there."""
    if context.owns_process_group and dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(tensor: Tensor, context: DistributedContext) -> Tensor:
    """Sum ``tensor`` over all ranks, in place; returns it.  CPU tensors go through the gloo
    group (no wait on the GPU); device tensors through the main group."""
    if context.is_distributed:
        group = context.cpu_group if tensor.device.type == "cpu" else None
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def broadcast_object(value: Any, context: DistributedContext) -> Any:
    """Rank 0's ``value`` on every rank (any picklable object)."""
    if not context.is_distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=_collective_device(context))
    return box[0]


def all_gather_object(value: Any, context: DistributedContext) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    if not context.is_distributed:
        return [value]
    gathered: list[Any] = [None] * context.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def barrier(context: DistributedContext) -> None:
    if context.is_distributed:
        dist.barrier()


def _collective_device(context: DistributedContext) -> torch.device | None:
    return context.device if context.device.type == "cuda" else None


class PeerLostError(RunError):
    """Another process of the run stopped answering: it died, or hung past the timeout."""


def peer_lost(error: RuntimeError, context: DistributedContext) -> RuntimeError:
    """The one-line :class:`PeerLostError` for a failed collective or point-to-point op of a
    distributed run (torch raises gloo's and NCCL's transport failures, a closed connection
    or a timeout, as RuntimeErrors from C++, ``[file.cc:line] what``), else ``error`` itself."""
    text = str(error).strip()
    from_backend = isinstance(error, dist.DistError) or re.match(r"\[[^\]]*(gloo|nccl)", text)
    if not (context.is_distributed and from_backend):
        return error
    reason = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0] if text else "").split(". ")[0]
    return PeerLostError(
        f"rank {context.rank}: lost contact with another process of the run ({reason}); it "
        "died or hung.  Start the run again with resume=True to continue from its last "
        "checkpoint",
        fields=("resume",),
    )
