"""The other families' `qkv train` runs end to end against their own bare step, one process.

    python -m benchmarks.family_end_to_end                     # 2 minutes each, 1 thread
    python -m benchmarks.family_end_to_end --minutes 0.5 --only translation

Each family's README command (translation: the Transformer on ``dates``; captioning and the
classifier on ``shapes``) runs for ``--minutes`` with timers around its pieces
(``benchmarks.run_breakdown``).  Interleaved with it, qkv's ``TrainStep`` alone (the bare
step) runs on the run's batches sampled so far, already in memory, for ``--probe-seconds``
every ``--probe-every`` seconds (the probes' time is left out of the run's clocks), so that
run and bare step read the same machine speed.  End-to-end items (examples) and
target tokens per second count the command's whole wall time, setup included; "clock"
counts the trainer's clock (what ``--max-minutes`` counts: after the trainer's setup, whose
first AdamW imports ``torch._dynamo``, a one-off of every PyTorch process).  The breakdown shows where the difference goes.
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from benchmarks.common import machine, table
from benchmarks.run_breakdown import breakdown_rows, clock_seconds, instrumented_run

COMMANDS = {
    "translation": ["train", "translation", "--model", "transformer", "--data", "dates"],
    "captioning": ["train", "captioning", "--data", "shapes"],
    "classifier": ["train", "classifier", "--data", "shapes"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="each run's budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=list(COMMANDS), action="append")
    parser.add_argument("--probe-every", type=float, default=5.0, help="seconds between probes")
    parser.add_argument("--probe-seconds", type=float, default=0.5, help="each probe's length")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    rows = []
    for family in args.only or COMMANDS:
        with tempfile.TemporaryDirectory() as out:
            argv = COMMANDS[family] + ["--out", out, "--max-minutes", f"{args.minutes}"]
            argv += ["--threads", str(args.threads)]
            print(f"\n## qkv {' '.join(argv).replace(out, 'OUT')}\n")
            run = instrumented_run(
                argv, [], probe_every=args.probe_every, probe_seconds=args.probe_seconds
            )
        bare_tokens, bare_items = run["probe"].rates()
        print(
            f"bare step: {run['probe'].totals['steps']} steps in "
            f"{run['probe'].totals['seconds_timed']:.1f} s, interleaved with the run"
        )
        print(table(["phase", "calls", "seconds", "share"], breakdown_rows(run)))
        items, trainer_items = run["items"] / run["seconds"], run["items"] / clock_seconds(run)
        tokens = run["tokens"] / run["seconds"]
        rows.append(
            [family, run["steps"], items, trainer_items, bare_items, items / bare_items]
            + [trainer_items / bare_items, tokens / bare_tokens]
        )
    print("\n## End to end against the bare step\n")
    headers = ["family", "steps", "items/s", "clock items/s", "bare items/s", "e2e / bare"]
    print(table(headers + ["clock / bare", "e2e tokens / bare"], rows))


if __name__ == "__main__":
    main()
