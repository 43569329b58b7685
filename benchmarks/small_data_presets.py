"""Choosing ``--size small-data`` by measurement: candidate settings on ding-de-en's valid split.

    python -m benchmarks.small_data_presets                       # every candidate, 15 min each
    python -m benchmarks.small_data_presets --minutes 5 --only transformer

Each candidate is ``qkv train translation --data ding-de-en --size small-data`` plus a few
flags (the preset itself is the candidate without flags), trained for the same wall-clock
budget with one thread, two side by side.  The score is the trainer's own validation: greedy
BLEU on the first 300 valid sentences and the valid loss, at every ``--validate-every``
updates; a run's score is its best validation (the checkpoint it keeps).  The test split is
never read.  Prints one table per family and, with ``--json``, writes the numbers.

The preset's values (model, optimisation, vocabulary) live in ``qkv/tasks/presets.py``;
docs/results.md says what was tried and chosen.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import machine, table

#: family -> candidate name -> flags over ``--size small-data`` (first: the preset as it is)
CANDIDATES: dict[str, dict[str, list[str]]] = {
    "transformer": {
        "preset": [],  # chosen: dropout 0.1 everywhere, no word dropout, lr 2e-3
        "the published recipe's values": shlex.split(
            "--lr 1e-3 --dropout 0.3 --activation-dropout 0.3 --word-dropout 0.1"
        ),
    },
    "rnn-attention": {
        "preset": [],  # chosen: dropout 0.2, lr 2e-3
        "the published recipe's values": shlex.split("--lr 1e-3 --dropout 0.3"),
    },
}

MODEL_FLAGS = {
    "transformer": ["--model", "transformer"],
    "rnn-attention": ["--model", "rnn-attention", "--score", "additive"],
}


def train(family: str, name: str, flags: list[str], root: Path, minutes: float) -> dict:
    out = root / f"{family}-{name.replace(' ', '_').replace(',', '')}"
    command = [
        *MODEL_FLAGS[family],
        "--data",
        "ding-de-en",
        "--size",
        "small-data",
        "--out",
        str(out),
        "--max-minutes",
        str(minutes),
        "--epochs",
        "0",
        "--threads",
        "1",
        "--validate-every",
        "200",
        *flags,
    ]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "qkv.cli.main", "train", "translation", *command],
        capture_output=True,
        text=True,
    )
    result = {
        "family": family,
        "candidate": name,
        "flags": " ".join(flags),
        "minutes": (time.perf_counter() - started) / 60,
    }
    if done.returncode != 0:
        return {**result, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return {**result, **best_validation(out / "log.jsonl")}


def best_validation(log: Path) -> dict:
    """The run's best validation (by BLEU, as the trainer keeps it) and its last update."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    valid = [r for r in records if r["event"] == "valid"]
    if not valid:
        return {"error": "no validation in the log"}
    best = max(valid, key=lambda r: r.get("bleu", float("-inf")))
    return {
        "valid_bleu": best.get("bleu"),
        "valid_loss": min(r["valid_loss"] for r in valid),
        "best_step": best["step"],
        "updates": max(r["step"] for r in records if "step" in r),
        "final_lr": valid[-1].get("lr"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=15.0, help="training budget per run")
    parser.add_argument("--root", default="runs/small-data-presets", help="folder for the runs")
    parser.add_argument("--parallel", type=int, default=2, help="runs side by side (default 2)")
    parser.add_argument("--only", choices=sorted(CANDIDATES), help="one family")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    jobs = [
        (family, name, flags)
        for family, candidates in CANDIDATES.items()
        if args.only in (None, family)
        for name, flags in candidates.items()
    ]
    print(f"machine: {machine()}")
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        results = list(pool.map(lambda job: train(*job, root, args.minutes), jobs))
    for family in dict.fromkeys(r["family"] for r in results):
        rows = [
            [
                r["candidate"],
                r["flags"] or "-",
                r.get("updates", "-"),
                r.get("error") or f"{r['valid_bleu']:.2f} (update {r['best_step']})",
                "-" if "error" in r else f"{r['valid_loss']:.3f}",
                "-" if r.get("final_lr") is None else f"{r['final_lr']:.2g}",
            ]
            for r in results
            if r["family"] == family
        ]
        header = ["candidate", "flags over the preset", "updates", "best valid BLEU", "valid loss"]
        print(f"\n{family}, {args.minutes:g} minutes each, one thread, two side by side")
        print(table([*header, "last lr"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
