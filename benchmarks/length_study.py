"""The length study: does one fixed vector hold a long sentence?  (Bahdanau et al. 2015, Fig. 2)

    python -m benchmarks.length_study --minutes 7 --limit 500 --plot length-study.png

Trains three translators on the built-in ``lengths`` corpus (5-80-word sentences, evenly
over the length buckets; a 513-word lexicon, adjective-noun swap and verb-final clauses),
each for the same wall-clock budget and dropout:

- ``rnn``: the encoder's final state is all the decoder sees (no attention), width 256;
- ``rnn-attention``: Bahdanau's additive attention over the encoder states, width 256;
- ``transformer``: 2 + 2 blocks of width 96 (``--size small``, the default), or 3 + 3
  blocks of width 256 with the RNNs' dropout 0.3 (``--size medium``: far fewer updates per
  minute; 10 minutes on one shared core taught none of the three anything).

Then translates the test split (greedy unless ``--beam``), scores BLEU and exact match
per source-length bucket (0-10, 11-20, 21-30, 31-40, 41+: what ``qkv evaluate --by-length``
reports), prints one table and writes one PNG with BLEU and exact match against source
length, one curve per model.  Runs go two side by side (``--parallel``), one thread each.
``--skip-training`` scores runs already in ``--root``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import machine, table

#: model name -> `qkv train translation` options (the same width and dropout for all)
MODELS = {
    "rnn": ["--model", "rnn"],
    "rnn-attention": ["--model", "rnn-attention", "--score", "additive"],
    "transformer": ["--model", "transformer"],
}
COMMON = ["--data", "lengths", "--dropout", "0.1", "--epochs", "0"]


def train(name: str, root: Path, minutes: float, size: str = "small") -> dict:
    out = root / name
    command = ["train", "translation", *MODELS[name], *COMMON, "--size", size, "--out", str(out)]
    command += ["--max-minutes", str(minutes), "--threads", "1"]
    print("qkv " + " ".join(command), flush=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "qkv.cli.main", *command], text=True,
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{name}: training failed:\n{done.stderr[-2000:]}")
    steps = next(
        (line.split()[1] for line in done.stdout.splitlines() if line.startswith("done:")), "?"
    )
    return {"steps": steps, "minutes": (time.perf_counter() - started) / 60}


def score(name: str, root: Path, *, beam: int, limit: int | None) -> dict:
    """BLEU and exact match per source-length bucket of the test split."""
    import torch

    from qkv.evaluation import bleu_by_length
    from qkv.tasks import Translator, evaluate_translation

    torch.set_num_threads(1)
    translator = Translator.from_checkpoint(root / name)
    scores, translations, references = evaluate_translation(
        translator, "lengths", split="test", beam=beam, limit=limit
    )
    hypotheses = [t.text for t in translations]
    lengths = [len(t.source.split()) for t in translations]
    buckets = bleu_by_length(hypotheses, references, lengths)
    exact = []
    for bucket in buckets:
        low, _, high = bucket.label.replace("+", "-").partition("-")
        members = [
            h == r
            for h, r, n in zip(hypotheses, references, lengths, strict=True)
            if int(low) <= n and (not high or n <= int(high))
        ]
        exact.append(100 * sum(members) / len(members) if members else math.nan)
    return {
        "bleu": scores.bleu,
        "exact_match": 100 * scores.exact_match,
        "buckets": [b.label for b in buckets],
        "counts": [b.count for b in buckets],
        "bleu_by_length": [b.bleu for b in buckets],
        "exact_by_length": exact,
    }


def plot(results: dict[str, dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    first = next(iter(results.values()))
    labels = [f"{b}\n({c})" for b, c in zip(first["buckets"], first["counts"], strict=True)]
    for name, result in results.items():
        left.plot(labels, result["bleu_by_length"], marker="o", label=name)
        right.plot(labels, result["exact_by_length"], marker="o", label=name)
    left.set(xlabel="source length in words (sentences)", ylabel="BLEU", ylim=(0, 100))
    right.set(xlabel="source length in words (sentences)", ylabel="exact match (%)")
    right.set_ylim(0, 100)
    left.legend()
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per model")
    parser.add_argument("--root", default="runs/length-study", help="folder for the runs")
    parser.add_argument(
        "--size",
        default="small",
        choices=["small", "medium"],
        help="model size preset of every model (small: more updates per minute)",
    )
    parser.add_argument("--parallel", type=int, default=2, help="trainings side by side")
    parser.add_argument("--beam", type=int, default=1, help="beam size for the test (1: greedy)")
    parser.add_argument("--limit", type=int, help="score only the first N test sentences")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--plot", default="length-study.png", help="PNG to write")
    parser.add_argument("--json", help="write the numbers to this file")
    parser.add_argument("--skip-training", action="store_true", help="score existing runs")
    args = parser.parse_args(argv)
    root = Path(args.root)
    print(f"machine: {machine()}")
    runs = {name: {"steps": "?", "minutes": math.nan} for name in args.models}
    if not args.skip_training:
        root.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            trained = pool.map(lambda name: train(name, root, args.minutes, args.size), args.models)
            runs = dict(zip(args.models, trained, strict=True))
    results = {name: score(name, root, beam=args.beam, limit=args.limit) for name in args.models}
    first = results[args.models[0]]
    header = ["source words", "sentences"]
    header += [f"{name} BLEU / exact %" for name in args.models]
    rows = []
    for index, label in enumerate(first["buckets"]):
        row = [label, first["counts"][index]]
        for name in args.models:
            bleu, exact = (results[name][k][index] for k in ("bleu_by_length", "exact_by_length"))
            row.append(f"{bleu:.1f} / {exact:.1f}")
        rows.append(row)
    rows.append(["all", sum(first["counts"])] + [
        f"{results[n]['bleu']:.1f} / {results[n]['exact_match']:.1f}" for n in args.models
    ])  # fmt: skip
    print(table(header, rows))
    for name in args.models:
        print(f"{name}: {runs[name]['steps']} steps in {runs[name]['minutes']:.1f} min")
    title = f"lengths corpus, {args.minutes:g} min of training per model, beam {args.beam}"
    print(f"plot: {plot(results, Path(args.plot), title)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
