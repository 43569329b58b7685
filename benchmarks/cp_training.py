"""The LM trained with ``--context-parallel 2`` beside one process with two threads.

    python -m benchmarks.cp_training --minutes 20                  # issue 24's run: kjv, 8192
    python -m benchmarks.cp_training --minutes 0.5 --data small.txt --out /tmp/cp  # a check

Runs, one after the other with the same budget, the same character LM on the same data:

- ``torchrun --nproc_per_node=2 -m qkv.cli.main train lm --context-parallel 2 --threads 1``
  (each window split over two processes, one thread each, ring attention between them);
- ``python -m qkv.cli.main train lm --threads 2`` (one process, the same two cores);

both ``--context 8192 --dropout 0 --positions rope`` (context parallelism needs dropout 0),
then reads their ``log.jsonl`` and prints the two loss curves side by side -- by step (the
same windows in the same order: the curves should agree up to rounding) and by elapsed
time (which is faster) -- and draws them into ``<out>/loss.png``.  Timings need a quiet
machine; the lead reruns the 20-minute version on one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import machine, table

RUNS = ("cp2", "single")


def commands(args: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    """The two training commands, by run name."""
    common = [
        "train", "lm", "--arch", "gpt", "--data", args.data, "--context", str(args.context),
        "--dropout", "0",
        "--positions", "rope", "--max-minutes", str(args.minutes), "--log-every", "1",
        "--batch-size", str(args.batch_size), "--eval-batches", str(args.eval_batches),
        "--seed", "0",
    ]  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    return {
        "cp2": [
            *torchrun,
            "-m",
            "qkv.cli.main",
            *common,
            "--context-parallel",
            "2",
            "--threads",
            "1",
            "--out",
            str(out / "cp2"),
        ],  # fmt: skip
        "single": [
            sys.executable,
            "-m",
            "qkv.cli.main",
            *common,
            "--threads",
            "2",
            "--out",
            str(out / "single"),
        ],  # fmt: skip
    }


def train_records(run: Path) -> list[dict]:
    """The ``train`` events of a run's log (step, loss, elapsed seconds, ...)."""
    lines = (run / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == "train"]


def side_by_side(curves: dict[str, list[dict]]) -> str:
    """One row per step either run reached: each run's loss and elapsed seconds there."""
    by_step = {name: {r["step"]: r for r in records} for name, records in curves.items()}
    steps = sorted(set().union(*by_step.values()))
    rows = []
    for step in steps:
        row: list = [step]
        for name in RUNS:
            record = by_step[name].get(step)
            row += (
                ["", ""]
                if record is None
                else [f"{record['loss']:.4f}", f"{record['elapsed']:.0f}"]
            )
        rows.append(row)
    headers = ["step", "P=2 loss", "P=2 s", "1 proc x2 thr loss", "1 proc s"]
    return table(headers, rows)


def draw(curves: dict[str, list[dict]], path: Path) -> None:
    """Loss against step and against elapsed time, both runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "cp2": "--context-parallel 2 (2 processes x 1 thread)",
        "single": "1 process x 2 threads",
    }
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, records in curves.items():
        losses = [r["loss"] for r in records]
        axes[0].plot([r["step"] for r in records], losses, label=labels[name])
        axes[1].plot([r["elapsed"] / 60 for r in records], losses, label=labels[name])
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("minutes")
    for axis in axes:
        axis.set_ylabel("training loss")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="budget of each run")
    parser.add_argument("--data", default="kjv", help="kjv or a UTF-8 text file")
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=1, help="windows per step")
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/cp_training"))
    parser.add_argument("--no-train", action="store_true", help="only read the runs in --out")
    args = parser.parse_args()
    print(machine())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for command in [] if args.no_train else commands(args, args.out).values():
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    curves = {name: train_records(args.out / name) for name in RUNS}
    print(side_by_side(curves))
    for name, records in curves.items():
        if records:
            last = records[-1]
            print(
                f"{name}: {last['step']} steps in {last['elapsed']:.0f} s, last loss {last['loss']:.4f}"
            )
    draw(curves, args.out / "loss.png")
    print(f"curves drawn in {args.out / 'loss.png'}")


if __name__ == "__main__":
    main()
