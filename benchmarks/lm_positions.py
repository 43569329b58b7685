"""Which positions extrapolate: validation loss of language models trained at context 128,
read at contexts 128, 256, 512 and 1024.

    python -m benchmarks.lm_positions --runs /tmp/lmruns --out docs/img/lm-positions.png

expects one run per position kind in ``RUNS/pos-<kind>`` (learned, sinusoidal, rope, alibi),
each trained by

    qkv train lm --data kjv --out RUNS/pos-<kind> --size small --positions <kind> \\
        --max-steps 60 --threads 1

Every model scores the same text, the first ``--tokens`` tokens of the kjv validation split
(its own books), cut into windows of ``context + 1`` tokens: the mean next-token loss with up
to ``context`` tokens in view.  Learned positions have no vector past position 127, so they
cannot be read at longer contexts at all (shown as "—").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.common import table
from qkv.data.text import load_text
from qkv.errors import InputError
from qkv.tasks.lm import context_loss, encode_text, load_lm

KINDS = ("learned", "sinusoidal", "rope", "alibi")
CONTEXTS = (128, 256, 512, 1024)


def losses_by_context(run: Path, text: str, tokens: int) -> list[float | None]:
    lm = load_lm(run)
    ids = encode_text(lm.tokenizer, text)[: tokens + 1]
    row: list[float | None] = []
    for context in CONTEXTS:
        try:
            row.append(context_loss(lm.model, ids, context=context))
        except InputError:  # learned positions stop at max_len
            row.append(None)
    return row


def plot(rows: dict[str, list[float | None]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for kind, values in rows.items():
        points = [(c, v) for c, v in zip(CONTEXTS, values, strict=True) if v is not None]
        axes.plot(*zip(*points, strict=True), marker="o", label=kind)
    axes.set_xscale("log", base=2)
    axes.set_xticks(CONTEXTS, [str(c) for c in CONTEXTS])
    axes.axvline(128, color="grey", linestyle=":", label="trained context")
    axes.set_xlabel("context read (tokens)")
    axes.set_ylabel("validation loss (nats / char)")
    axes.set_title("kjv, char LM trained at context 128")
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="runs", help="folder holding pos-<kind> runs")
    parser.add_argument("--out", help="PNG to write")
    parser.add_argument("--tokens", type=int, default=32768, help="tokens of text scored")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    text = load_text("kjv").valid
    rows = {}
    for kind in KINDS:
        run = Path(args.runs) / f"pos-{kind}"
        if run.exists():
            rows[kind] = losses_by_context(run, text, args.tokens)
    headers = ["positions", *(f"context {c}" for c in CONTEXTS)]
    cells = [
        [kind, *(None if v is None else f"{v:.3f}" for v in values)]
        for kind, values in rows.items()
    ]
    print(table(headers, cells))
    if args.out:
        plot(rows, args.out)
        print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
