"""Context parallelism: ring attention over P gloo processes against one process, side by side.

    python -m benchmarks.context_parallel                      # T = 32768, causal, P = 2
    python -m benchmarks.context_parallel --lengths 8192 16384 --no-causal

B=1, H=8, Dh=64, fp32, forward+backward.  One process runs qkv's chunked kernel (the exact
O(T)-memory kernel ring attention runs per slice) with ``P`` threads; P spawned processes
run ``ring_attention`` with one thread each, so both sides use the same cores.  Per rank:

- peak tensor memory: the most bytes of tensor storage that the forward+backward's own ops
  held at once, counted exactly by a dispatch mode (:class:`~benchmarks.cp_memory.TensorMemory`;
  the inputs are not counted); with ``--accounting`` the same count on the meta device
  (:func:`~benchmarks.cp_memory.accounted`: every allocation, no arithmetic, seconds at
  T = 32768), with what is live at the peak;
- peak RSS: the resident high-water mark of a forward+backward minus the resident memory
  just before it, the inputs built (CPU PyTorch has no allocator statistics; a warm-up at
  T=1024 first starts the thread pools and the connections, the high-water mark is then
  reset through /proc/self/clear_refs, and glibc is told to return every large block);
- time: that same forward+backward (and the median with ``--repeats``), all ranks starting
  together (a barrier);
- bytes sent: what ``batch_isend_irecv`` was given to send, against the formulas
  (P-1)/P |K,V| forward (each key/value slice visits the P-1 other ranks) and
  (P-1)/P |K,V| + |dK,dV| backward (the slices again, and their gradients all the way home).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import socket
import time

import torch
import torch.distributed as dist

from benchmarks.common import _peak_rss_mib, _rss_mib, machine, table
from benchmarks.cp_memory import HEAD_DIM, HEADS, TensorMemory, accounted, describe
from qkv.distributed import ring_attention, shard_sequence
from qkv.functional.backends.chunked import chunked_attention


class SentBytes:
    """Counts the bytes handed to ``dist.batch_isend_irecv`` for sending (a wrapper)."""

    def __init__(self):
        self.total = 0
        self._original = dist.batch_isend_irecv

        def counting(ops):
            self.total += sum(op.tensor.nbytes for op in ops if op.op is dist.isend)
            return self._original(ops)

        dist.batch_isend_irecv = counting


def _inputs(length: int, world: int, causal: bool):
    """q, k, v (requiring grad) and the output's gradient: this rank's part of (1, H, T, Dh)."""
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(1, HEADS, length, HEAD_DIM, generator=generator) for _ in range(4)]
    if world > 1:
        tensors = [shard_sequence(t, 2, causal=causal) for t in tensors]
    return [t.requires_grad_(i < 3) for i, t in enumerate(tensors)]


def _forward_backward(q, k, v, grad, world, causal, sent: SentBytes | None = None) -> int:
    """One forward and backward; the bytes sent by the forward (with ``sent``)."""
    if world > 1:
        output = ring_attention(q, k, v, causal=causal)
    else:
        output = chunked_attention(q, k, v, causal=causal)
    forward_bytes = sent.total if sent is not None else 0
    output.backward(grad)
    return forward_bytes


def _worker(rank, world, port, length, causal, threads, repeats, queue):
    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(minutes=30)
        )
    _forward_backward(*_inputs(1024, world, causal), world, causal)  # warm-up
    q, k, v, grad = _inputs(length, world, causal)
    sent = SentBytes()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark VmHWM
    baseline = _rss_mib()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    memory = TensorMemory()
    with memory:
        forward_bytes = _forward_backward(q, k, v, grad, world, causal, sent)
    times = [time.perf_counter() - start]
    peak = _peak_rss_mib() - baseline
    tensors = memory.peak / 2**20
    backward_bytes = sent.total - forward_bytes
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        _forward_backward(q, k, v, grad, world, causal)
        times.append(time.perf_counter() - start)
    median = sorted(times)[len(times) // 2]
    queue.put((rank, peak, median, forward_bytes, backward_bytes, tensors))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def measure(world: int, length: int, causal: bool, threads: int, repeats: int) -> list[tuple]:
    """(rank, peak RSS MiB, seconds, forward bytes, backward bytes, peak tensor MiB) per rank."""
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 17)  # large blocks go back to the system
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = (world, port, length, causal, threads, repeats, queue)
    processes = [spawn.Process(target=_worker, args=(rank, *args)) for rank in range(world)]
    for process in processes:
        process.start()
    results = sorted(queue.get() for _ in processes)
    for process in processes:
        process.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32768])
    parser.add_argument("--processes", type=int, default=2, help="P, the ring's size")
    parser.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--repeats", type=int, default=0, help="more timed runs (median)")
    parser.add_argument(
        "--accounting", action="store_true", help="only count tensor memory (meta device)"
    )
    args = parser.parse_args()
    world = args.processes
    print(machine())
    print(f"B=1 H={HEADS} Dh={HEAD_DIM} fp32 forward+backward, causal={args.causal}, P={world}")
    if args.accounting:
        print_accounting(args.lengths, world, args.causal)
        return
    rows = []
    for length in args.lengths:
        single = measure(1, length, args.causal, world, args.repeats)[0]
        ring = measure(world, length, args.causal, 1, args.repeats)
        kv_bytes = 2 * length * HEADS * HEAD_DIM * 4  # |K| + |V|, the whole sequence
        peak = max(r[1] for r in ring)
        tensors = max(r[5] for r in ring)
        seconds = max(r[2] for r in ring)
        forward_bytes, backward_bytes = ring[0][3], ring[0][4]
        rows.append(
            [
                length,
                f"{single[5]:.0f}",
                f"{tensors:.0f}",
                f"{tensors / single[5]:.2f}x",
                f"{single[1]:.0f}",
                f"{peak:.0f}",
                f"{peak / single[1]:.2f}x",
                f"{single[2]:.2f}",
                f"{seconds:.2f}",
                f"{seconds / single[2]:.2f}x",
                f"{forward_bytes / 2**20:.0f} / {2 * (world - 1) / world * kv_bytes / 2**21:.0f}",
                f"{backward_bytes / 2**20:.0f} / {(2 * world - 1) / world * kv_bytes / 2**20:.0f}",
            ]
        )
    headers = [
        "T",
        "1 proc tensors MiB",
        "rank tensors MiB",
        "ratio",
        "1 proc RSS MiB",
        "rank RSS MiB",
        "RSS ratio",
        f"1 proc x{world} thr s",
        f"P={world} s",
        "time ratio",
        "fwd MiB sent / 2(P-1)/P |K|",
        "bwd MiB sent / (P-1)/P |K,V| + |dK,dV|",
    ]
    print(table(headers, rows))


def print_accounting(lengths: list[int], world: int, causal: bool) -> None:
    """Peak tensor MiB per rank against one process, counted on the meta device, and what
    each holds at its peak."""
    rows, held = [], []
    for length in lengths:
        single = accounted(1, length, causal)[0]
        ranks = accounted(world, length, causal)
        peak = max(r[1] for r in ranks)
        rows.append([length, f"{single[1]:.0f}", f"{peak:.0f}", f"{peak / single[1]:.2f}x"])
        held.append(f"T={length}, 1 proc: {describe(single[2])}")
        held += [f"T={length}, rank {r}: {describe(at)}" for r, _, at in ranks]
    print(table(["T", "1 proc tensors MiB", "max rank tensors MiB", "ratio"], rows))
    print("live at the peak (largest first):")
    print("\n".join(held))


if __name__ == "__main__":
    main()
