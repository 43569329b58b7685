"""What ring attention holds per rank: an exact count of tensor storage, at any length.

:class:`TensorMemory` counts the bytes of tensor storage that the ops run inside it made
and that are still referenced, its peak, and what was live at the peak (by the shape each
storage was made with).  It counts the same whether the tensors hold numbers or not, so
:func:`accounted` runs one rank's forward+backward on PyTorch's ``meta`` device (shapes,
no arithmetic) inside a fresh spawned process whose process group is PyTorch's fake one
(``torch.testing``'s "fake" backend: the rank and world size of a real group, no
transport; ``batch_isend_irecv`` is stubbed to start nothing).  Every tensor ring attention
makes -- the receive buffers, the gradients in transit, the kernel's per-call copies and
tile buffers -- is made exactly as on the CPU; only the arithmetic is left out, so
T = 32768 costs seconds instead of half an hour.  ``python -m benchmarks.context_parallel``
compares this count with the real gloo run's at the lengths it runs.
"""

from __future__ import annotations

import multiprocessing
import weakref
from collections import Counter

import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HEADS, HEAD_DIM = 8, 64


class TensorMemory(TorchDispatchMode):
    """The bytes of tensor storage made by the ops run inside it that are still referenced,
    their peak, and ``at_peak``: MiB live at the peak per (shape made with, dtype).  The
    tensors that existed before are left out.  A storage is freed when the last tensor seen
    on it dies."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, list] = {}  # storage -> [bytes, tensors on it, label]
        self.now = self.peak = 0
        self.at_peak: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = {id(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, Tensor) and id(tensor) not in before:
                self._track(tensor)
        return out

    def _track(self, tensor: Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata  # the storage itself: also for meta tensors, which have no address
        if storage.nbytes() == 0:
            return
        entry = self.live.get(key)
        if entry is None:
            label = (tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            entry = self.live[key] = [storage.nbytes(), 0, label]
            self.now += entry[0]
            if self.now > self.peak:
                self.peak = self.now
                self.at_peak = Counter()
                for nbytes, _, seen in self.live.values():
                    self.at_peak[seen] += nbytes / 2**20
        entry[1] += 1
        weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.now -= entry[0]
                del self.live[key]


def forward_backward(q, k, v, grad, world: int, causal: bool) -> None:
    """One attention forward and backward: ring attention over the group, or qkv's chunked
    kernel (the one ring attention runs per piece) in one process."""
    from qkv.distributed import ring_attention
    from qkv.functional.backends.chunked import chunked_attention

    if world > 1:
        output = ring_attention(q, k, v, causal=causal)
    else:
        output = chunked_attention(q, k, v, causal=causal)
    output.backward(grad)


def _accounting_worker(rank: int, world: int, length: int, causal: bool, queue) -> None:
    if world > 1:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        dist.batch_isend_irecv = lambda ops: []  # the fake group sends nothing anyway
    q, k, v, grad = (
        torch.empty(1, HEADS, length // world, HEAD_DIM, device="meta") for _ in range(4)
    )
    for t in (q, k, v):
        t.requires_grad_()
    memory = TensorMemory()
    with memory:
        forward_backward(q, k, v, grad, world, causal)
    queue.put((rank, memory.peak / 2**20, memory.at_peak.most_common(12)))


def accounted(world: int, length: int, causal: bool) -> list[tuple[int, float, list]]:
    """(rank, peak tensor MiB, [((shape, dtype), MiB live at the peak), ...] (the 12 largest))
    for each rank
    of a forward+backward at ``length`` over ``world`` ranks (1: one process), each counted
    in its own fresh process on the meta device.  Inputs are not counted."""
    spawn = multiprocessing.get_context("spawn")
    results = []
    for rank in range(world):  # one at a time: each is alone in its fake group
        queue = spawn.Queue()
        process = spawn.Process(
            target=_accounting_worker, args=(rank, world, length, causal, queue)
        )
        process.start()
        while process.is_alive() and queue.empty():
            process.join(0.5)
        if queue.empty():
            raise RuntimeError(f"the accounting of rank {rank} of {world} failed (see above)")
        results.append(queue.get())
        process.join()
    return results


def describe(at_peak: list, limit: int = 8) -> str:
    """'MiB x shape' for the largest groups of storage live at the peak."""
    return ", ".join(f"{mib:.0f} MiB {list(shape)}" for (shape, _), mib in at_peak[:limit])
