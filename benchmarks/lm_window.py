"""What a sliding window costs and buys a language model: full causal attention against
``--window 256`` at context 2,048 on kjv characters, trained side by side on the same clock.

    python -m benchmarks.lm_window --minutes 20 --out /tmp/lm-window

starts the two runs together, one thread each (two processes on a two-core machine):

    qkv train lm --arch gpt --data kjv --context 2048 --positions rope [--window 256] \\
        --max-minutes M --threads 1 --batch-size B --out OUT/<name>

then scores both on the same text, the first ``--tokens`` tokens of the kjv validation split
(its own books), cut into windows of 2,049 tokens: the mean next-token loss with up to 2,048
tokens in view (:func:`qkv.tasks.lm.context_loss`).  Tokens/s is the median of the runs'
logged training throughput (``log.jsonl``; "—" for a run shorter than the trainer's logging
interval).  ``--score-only`` scores the runs already in ``--out``.  The windowed model attends at most 256 keys per
query, so its attention costs about 256/2048 of the full one's; what that buys in steps, and
costs in loss, is the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import table
from qkv.data.text import load_text
from qkv.tasks.lm import context_loss, encode_text, load_lm

CONTEXT = 2048
CONTENDERS = {"full causal": [], "window 256": ["--window", "256"]}


def launch(name: str, flags: list[str], out: Path, args: argparse.Namespace) -> subprocess.Popen:
    command = [sys.executable, "-m", "qkv.cli.main", "train", "lm", "--data", "kjv"]
    command += [
        "--arch",  # GPT-2's layout with RoPE, as the documented runs (the default then)
        "gpt",
        "--context",
        str(CONTEXT),
        "--positions",
        "rope",
        "--out",
        str(out),
        "--max-minutes",
        str(args.minutes),
    ]
    command += ["--threads", "1", "--batch-size", str(args.batch_size), "--device", "cpu"]
    print(f"{name}: {' '.join(command[1:] + flags)}", flush=True)
    log = (out.parent / f"{out.name}.log").open("w")  # a file: a pipe could fill and stall it
    return subprocess.Popen([*command, *flags], stdout=log, stderr=subprocess.STDOUT)


def throughput(out: Path) -> tuple[float | None, int]:
    """The median logged tokens/s of a run (None: it took fewer steps than the trainer's
    logging interval) and the steps it took."""
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    speeds = [r["tokens_per_second"] for r in records if r["event"] == "train"]
    return (statistics.median(speeds) if speeds else None), records[-1]["step"]


def train_side_by_side(runs: dict[str, Path], args: argparse.Namespace) -> None:
    started = time.perf_counter()
    processes = {name: launch(name, CONTENDERS[name], runs[name], args) for name in CONTENDERS}
    for name, process in processes.items():
        if process.wait() != 0:
            log = (runs[name].parent / f"{runs[name].name}.log").read_text().strip()
            raise SystemExit(f"{name} failed: {log.splitlines()[-1:]}")
    print(f"trained side by side in {time.perf_counter() - started:.0f} s; scoring", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="each run's budget")
    parser.add_argument("--out", type=Path, required=True, help="a new folder for both runs")
    parser.add_argument("--batch-size", type=int, default=2, help="windows of 2,048 per batch")
    parser.add_argument("--tokens", type=int, default=64 * 1024, help="validation tokens scored")
    parser.add_argument(
        "--score-only", action="store_true", help="score the runs already in --out, train none"
    )
    args = parser.parse_args()
    runs = {name: args.out / name.replace(" ", "-") for name in CONTENDERS}
    if not args.score_only:
        if args.out.exists():
            parser.error(f"--out {args.out} exists; give a new folder (or --score-only)")
        args.out.mkdir(parents=True)
        train_side_by_side(runs, args)
    text = load_text("kjv").valid
    rows = []
    for name, out in runs.items():
        lm = load_lm(out)
        ids = encode_text(lm.tokenizer, text)[: args.tokens + 1]
        tokens_per_second, steps = throughput(out)
        loss = context_loss(lm.model, ids, context=CONTEXT, batch_size=2)
        speed = "—" if tokens_per_second is None else f"{tokens_per_second:.0f}"
        rows.append([name, steps, speed, f"{loss:.4f}"])
    budget = "" if args.score_only else f", {args.minutes:g} min each, one thread each"
    print(f"\nkjv characters, context {CONTEXT}{budget}")
    print(table(["attention", "steps", "tokens/s", f"valid loss @ {CONTEXT}"], rows))


if __name__ == "__main__":
    main()
