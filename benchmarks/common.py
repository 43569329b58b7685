"""Shared helpers for the benchmarks: timing, peak memory, tables, machine description."""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["timed", "peak_memory_mib", "machine", "table", "matmul_gflops"]


def interleaved(
    runs: dict[str, Callable[[], object]], *, rounds: int = 7, warmup: bool = True
) -> dict[str, float]:
    """Median seconds of each run, the runs taking turns round by round (after one warm-up
    each, unless ``warmup=False``), so a load that comes and goes on the machine hits every
    contender alike.  The order of the turns reverses every round (A B, B A, ...): neither
    contender always runs with the caches the other left behind."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values() if warmup else ():
        run()
    for index in range(rounds):
        order = list(runs.items())
        for name, run in order if index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def timed(
    fn: Callable[[], object], *, repeats: int = 3, warmup: int = 1, min_seconds: float = 0.0
) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    while len(times) < repeats or sum(times) < min_seconds:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mib() -> float:
    """This process's resident high-water mark (VmHWM).  Unlike getrusage's ru_maxrss, which
    Linux carries across exec from the parent, VmHWM belongs to this address space alone."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB -> MiB
    raise OSError("no VmHWM in /proc/self/status")


def _child(target: Callable[[], Callable[[], object]], queue: mp.Queue) -> None:
    try:
        fn = target()  # builds inputs; what it allocates is the baseline
        baseline = _rss_mib()
        fn()
        queue.put(max(0.0, _peak_rss_mib() - baseline))
    except Exception as error:  # report, don't hang the parent
        queue.put(f"error: {error}")


def peak_memory_mib(target: Callable[[], Callable[[], object]]) -> float | None:
    """Peak extra resident memory (MiB) of one call, measured in a fresh process.

    ``target`` is a picklable zero-argument function that builds the inputs and returns the
    call to measure; memory allocated while building inputs is not counted.  CPU PyTorch has
    no allocator statistics, so a fresh process and its high-water mark stand in for them."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(target, queue))
    # glibc raises its mmap threshold after each large free and then keeps freed blocks in
    # the heap, so the high-water mark would count memory already given back (runs of the
    # same call read 1.5x to 9x q); a fixed threshold makes it track what is held.
    previous = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    try:
        process.start()
    finally:
        if previous is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = previous
    result = queue.get()
    process.join()
    return result if isinstance(result, float) else None


def matmul_gflops(size: int = 2048, dtype: torch.dtype = torch.float32) -> float:
    """This machine's fp32 matrix-multiply rate: the ceiling for attention's FLOPs."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    seconds = timed(lambda: a @ b, repeats=5)
    return 2 * size**3 / seconds / 1e9


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}; {os.cpu_count()} cores; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); Python {platform.python_version()}"
    )


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A Markdown table (prints well in a terminal and pastes into docs/benchmarks.md)."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda items: "| " + " | ".join(s.rjust(w) for s, w in zip(items, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(out + [line(r) for r in cells])


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "—" if value is None else str(value)
