"""`qkv train lm` end to end: where a run's time goes, its speed against the model's bare step
and against a plain nanoGPT-recipe loop, and the loss both reach at fixed wall clock.

    python -m benchmarks.lm_end_to_end                          # 6 minutes each, 1 thread
    python -m benchmarks.lm_end_to_end --minutes 1 --valid-chars 20000   # a short check
    python -m benchmarks.lm_end_to_end --qkv-args "--dropout 0 --context 64"

One process, in turn:

1. ``qkv train lm --data kjv --max-minutes M --threads N`` as a user types it (plus
   ``--qkv-args``), called in this process with timers around the pieces of the run
   (``benchmarks.run_breakdown``): corpus, tokenizer, encoding and windows; batching and
   collation; the step; logging and progress; validation; checkpoints; and the rest
   (building the model and optimizer, the loop's own bookkeeping).  The weights are copied
   at M/3, 2M/3 and M minutes of the trainer's clock (as `--max-minutes` counts);
2. interleaved with it, the bare step: qkv's ``TrainStep`` alone on the run's batches sampled
   so far, already in memory (a copy of the model, a fresh optimizer), for ``--probe-seconds``
   every ``--probe-every`` seconds, the probes' time left out of every clock of the run (so
   that run and bare step read the same machine speed: this VM's drifts by ±7 % between
   two stretches of a minute);
3. the plain loop of ``benchmarks.plain_lm_loop`` (nanoGPT's CPU recipe), until its 2,000
   iterations or M minutes, whichever ends first, weights copied at the same marks;
4. every snapshot scored by ``plain_lm_loop.score`` on the kjv validation text.

End-to-end tokens/s = the run's target tokens / the run's wall time (from the command's start:
setup, validation and checkpoints included); "on the trainer's clock" counts what
``--max-minutes`` counts: the trainer after its setup (validation and checkpoints included;
the corpus, tokenizer, model and optimizer left out, as the plain loop's clock leaves out
its own).  The first AdamW of a process imports ``torch._dynamo`` (seconds; a one-off that
a fresh nanoGPT process pays too, and that the plain loop here, run second, does not).
"""

from __future__ import annotations

import argparse
import shlex
import tempfile

import torch

import qkv.tasks.lm as lm_task
from benchmarks.common import machine, table
from benchmarks.plain_lm_loop import score_snapshots, train_plain
from benchmarks.run_breakdown import breakdown_rows, clock_seconds, instrumented_run
from qkv.data.text import TextDataset, load_text
from qkv.data.text_tokenizers import train_text_tokenizer

#: The LM task's own phases (beside run_breakdown.GENERIC_PHASES).
LM_PHASES = [
    ("setup: corpus", lm_task, "load_text"),
    ("setup: tokenizer", lm_task, "train_text_tokenizer"),
    ("setup: encoding, windows", lm_task, "encode_text"),
    ("setup: encoding, windows", TextDataset, "__init__"),
    ("data: collate", TextDataset, "collate"),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="each run's budget")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--qkv-args", default="", help="more `qkv train lm` options")
    parser.add_argument("--probe-every", type=float, default=5.0, help="seconds between probes")
    parser.add_argument("--probe-seconds", type=float, default=0.5, help="each probe's length")
    parser.add_argument("--skip-plain", action="store_true", help="qkv's run only")
    parser.add_argument(
        "--valid-chars", type=int, help="score on the first this many characters (default: all)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    marks = [args.minutes / 3, 2 * args.minutes / 3, args.minutes]
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as out:
        argv = ["train", "lm", "--data", "kjv", "--out", out, "--max-minutes", f"{args.minutes}"]
        argv += ["--threads", str(args.threads), *shlex.split(args.qkv_args)]
        print("qkv run: qkv " + " ".join(argv).replace(out, "OUT"))
        run = instrumented_run(
            argv,
            LM_PHASES,
            marks=marks,
            probe_every=args.probe_every,
            probe_seconds=args.probe_seconds,
        )
    bare, _ = run["probe"].rates()
    bare_steps, bare_seconds = run["probe"].totals["steps"], run["probe"].totals["seconds_timed"]
    end_to_end, in_loop = run["tokens"] / run["seconds"], run["tokens"] / clock_seconds(run)

    corpus = load_text("kjv")
    tokenizer = train_text_tokenizer("char", corpus.train)  # the run's (a char tokenizer)
    valid_ids = lm_task.encode_text(tokenizer, corpus.valid[: args.valid_chars])
    plain = None
    if not args.skip_plain:
        train_ids = lm_task.encode_text(tokenizer, corpus.train)
        plain_model, plain = train_plain(
            train_ids, tokenizer.vocab_size, minutes=args.minutes, marks=marks
        )
    print("\n## Where a `qkv train lm` run's time goes\n")
    print(table(["phase", "calls", "seconds", "share"], breakdown_rows(run)))
    print("\n## Target tokens/s\n")
    rows = [
        ["qkv train lm, end to end", end_to_end, end_to_end / bare],
        ["qkv train lm, on the trainer's clock", in_loop, in_loop / bare],
        ["the model's bare step, same shape", bare, 1.0],
    ]
    if plain is not None:
        plain_rate = plain.tokens / plain.seconds
        rows.append(["plain loop, nanoGPT's CPU recipe", plain_rate, plain_rate / bare])
        print(f"(qkv end to end / plain loop: {end_to_end / plain_rate:.2f}x)")
    print(table(["what", "tokens/s", "/ bare step"], rows))
    print(
        f"\nqkv: {run['steps']} steps in {run['seconds']:.0f} s; bare step: {bare_steps} steps "
        f"in {bare_seconds:.0f} s, interleaved with the run"
    )
    if plain is not None:
        print(f"plain loop: {plain.iterations} iterations in {plain.seconds:.0f} s")
    scored = f"its first {args.valid_chars} characters" if args.valid_chars else "all of it"
    print(f"\n## Validation loss (nats/char, 65-char windows of kjv valid, {scored})\n")
    qkv_scores = score_snapshots(
        run["model"], run["snapshots"], valid_ids, lambda x: run["model"](x).logits
    )
    plain_scores = {}
    if plain is not None:
        plain_scores = score_snapshots(plain_model, plain.snapshots, valid_ids, plain_model)
    rows = [[f"{mark:g}", qkv_scores[mark], plain_scores.get(mark)] for mark in marks]
    print(table(["minutes", "qkv train lm", "plain loop (nanoGPT recipe)"], rows))


if __name__ == "__main__":
    main()
