"""Choosing the LM presets by measurement: candidate settings of `qkv train lm --size small`,
each trained for the same wall-clock budget on kjv and scored by one function.

    python -m benchmarks.lm_presets                          # every candidate, 6 minutes each
    python -m benchmarks.lm_presets --minutes 0.5 --only preset --only "dropout 0"

Each candidate is ``qkv train lm --data kjv --size small --max-minutes M --threads 1`` plus a
few flags (the preset itself is the candidate without flags), run one after another as
separate processes, so they share nothing but the machine.  The score is
``benchmarks.plain_lm_loop.score`` of the run's last checkpoint: the mean next-token loss over
non-overlapping 65-character windows of the kjv validation text, the yardstick of
``benchmarks.lm_end_to_end``.  A cosine candidate names its schedule's length in steps
(``--max-steps``), as nanoGPT's recipe does (2,000 iterations), and stops at whichever of its
steps and minutes ends first.  Prints one table; ``--json`` writes the numbers.

The preset's values live in ``qkv/tasks/presets.py`` (the ``("lm", size)`` records: model,
context, dropout, and the trainer's lr, warm-up and validation); docs/benchmarks.md says what
was run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import machine, table
from benchmarks.plain_lm_loop import score
from qkv.data.text import load_text
from qkv.tasks.lm import encode_text, load_lm
from qkv.training import read_pointer

NANO = "--context 64 --batch-size 12 --dropout 0"
NANO_OPT = "--weight-decay 0.1 --beta2 0.99"
#: candidate name -> flags over ``qkv train lm --size small`` (first: the preset as it is)
CANDIDATES: dict[str, list[str]] = {
    "preset": [],
    "dropout 0": shlex.split("--dropout 0"),
    "dropout 0, lr 1e-3": shlex.split("--dropout 0 --lr 1e-3"),
    "nanoGPT's shape (context 64, batch 12, dropout 0)": shlex.split(NANO),
    "nanoGPT's shape, wd 0.1, beta2 0.99": shlex.split(f"{NANO} --weight-decay 0.1 --beta2 0.99"),
    "nanoGPT's recipe (cosine to 1e-4 over 2,000 steps)": shlex.split(
        f"{NANO} --weight-decay 0.1 --beta2 0.99 --lr 1e-3 --schedule cosine --min-lr 1e-4"
        " --warmup-steps 100 --max-steps 2000"
    ),
    "nanoGPT's recipe over 6 minutes (cosine over 4,500 steps)": shlex.split(
        f"{NANO} --weight-decay 0.1 --beta2 0.99 --lr 1e-3 --schedule cosine --min-lr 1e-4"
        " --warmup-steps 100 --max-steps 4500"
    ),
    "nanoGPT's shape, lr 2e-3, cosine over 4,500 steps": shlex.split(
        f"{NANO} --weight-decay 0.1 --beta2 0.99 --lr 2e-3 --schedule cosine --min-lr 2e-4"
        " --warmup-steps 100 --max-steps 4500"
    ),
    "nanoGPT's shape, lr 2e-3, cosine to 2e-4 fitted to the clock": shlex.split(
        f"{NANO} {NANO_OPT} --lr 2e-3 --schedule cosine --min-lr 2e-4 --warmup-steps 100"
    ),
    "context 128, batch 8, lr 2e-3, cosine to 2e-4 fitted to the clock": shlex.split(
        f"--context 128 --batch-size 8 --dropout 0 {NANO_OPT} --lr 2e-3 --schedule cosine"
        " --min-lr 2e-4 --warmup-steps 100"
    ),
    "nanoGPT's shape, lr 3e-3, cosine to 3e-4 fitted to the clock": shlex.split(
        f"{NANO} {NANO_OPT} --lr 3e-3 --schedule cosine --min-lr 3e-4 --warmup-steps 100"
    ),
    "context 64, batch 16, lr 2e-3, cosine to 2e-4 fitted to the clock": shlex.split(
        f"--context 64 --batch-size 16 --dropout 0 {NANO_OPT} --lr 2e-3 --schedule cosine"
        " --min-lr 2e-4 --warmup-steps 100"
    ),
    "context 64, batch 16, lr 3e-3, cosine to 3e-4 fitted to the clock": shlex.split(
        f"--context 64 --batch-size 16 --dropout 0 {NANO_OPT} --lr 3e-3 --schedule cosine"
        " --min-lr 3e-4 --warmup-steps 100"
    ),
    "nanoGPT's shape, lr 5e-3, cosine to 5e-4 fitted to the clock": shlex.split(
        f"{NANO} {NANO_OPT} --lr 5e-3 --schedule cosine --min-lr 5e-4 --warmup-steps 100"
    ),
    "context 128, batch 16, dropout 0, wd 0.1, beta2 0.99": shlex.split(
        "--dropout 0 --weight-decay 0.1 --beta2 0.99"
    ),
}


def train(name: str, flags: list[str], out: Path, minutes: float, threads: int) -> dict:
    command = [sys.executable, "-m", "qkv.cli.main", "train", "lm", "--data", "kjv"]
    # the sweep chose the sizes in GPT-2's layout, the default then (docs/benchmarks.md)
    command += ["--arch", "gpt", "--size", "small", "--out", str(out)]
    command += ["--max-minutes", f"{minutes}"]
    command += ["--threads", str(threads), *flags]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {done.stderr.strip().splitlines()[-1:]}")
    last_line = done.stdout.strip().splitlines()[0]  # "done: N steps, ..."
    return {
        "name": name,
        "flags": " ".join(flags),
        "seconds": time.perf_counter() - started,
        "summary": last_line,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="each candidate's budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", action="append", choices=list(CANDIDATES))
    parser.add_argument("--valid-chars", type=int, help="score on the first this many chars")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    valid_text = load_text("kjv").valid[: args.valid_chars]
    results = []
    with tempfile.TemporaryDirectory() as root:
        for index, name in enumerate(args.only or CANDIDATES):
            out = Path(root) / str(index)
            result = train(name, CANDIDATES[name], out, args.minutes, args.threads)
            lm = load_lm(read_pointer(out, "last"))
            lm.model.eval()
            ids = encode_text(lm.tokenizer, valid_text)
            result["score"] = score(lambda x: lm.model(x).logits, ids)  # noqa: B023
            print(f"{name}: {result['score']:.4f} ({result['summary']})", flush=True)
            results.append(result)
    rows = [[r["name"], r["flags"] or "—", r["score"], r["summary"]] for r in results]
    print(f"\n## kjv validation loss after {args.minutes:g} minutes (nats/char)\n")
    print(table(["candidate", "flags", "valid loss", "the run"], rows))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
