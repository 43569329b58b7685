"""Size and opening time of the attention explorer's page (issue 14's targets: a 6-layer,
8-head Transformer, 5 inputs of 40 tokens: under 5 MB of HTML, open in under 2 s).

    OMP_NUM_THREADS=1 python -m benchmarks.explore_page            # the issue's case
    python -m benchmarks.explore_page --inputs 1 --length 100      # one long input

The model has random, seeded weights (the page's size and speed do not depend on training)
except that the end token's output row is zeroed, so that every translation runs to
``--length`` tokens: each input then fills encoder (S x S), decoder (T x T) and cross (T x S)
matrices of the full size, for every layer and head.  Random attention is close to uniform,
which is the page's worst case for size (a trained model's many near-zero weights are
written as "0").

Opening time: headless Debian chromium (chromium-driver, Selenium), the page loaded from
disk ``--loads`` times; the time is from navigation start to the page's "ready" mark (data
parsed, first view, grid and summaries drawn), read from ``performance.now()``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import machine, table
from qkv.data import EOS_ID
from qkv.data.captions import WordVocab
from qkv.explore import explore, render_html
from qkv.models import Transformer, TransformerConfig

FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync "
    "--window-size=1400,1000"
).split()


def build_page(*, inputs: int, length: int, layers: int, heads: int) -> tuple[str, float]:
    torch.manual_seed(0)
    vocab = WordVocab(["<pad>", "<s>", "</s>", "<unk>", *(f"w{i}" for i in range(996))])
    config = TransformerConfig(
        source_vocab_size=len(vocab),
        d_model=8 * heads,
        num_heads=heads,
        d_ff=64,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        dropout=0.0,
        max_len=max(64, length + 2),
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        model.output.weight[EOS_ID] = 0.0  # logit 0: below the best of ~1000 random logits
    sources = [torch.randint(4, len(vocab), (length,)).tolist() for _ in range(inputs)]
    start = time.perf_counter()
    data = explore(model, sources, tokenizer=vocab, max_len=length)
    page = render_html(data)
    seconds = time.perf_counter() - start
    lengths = {len(x["output_tokens"]) for x in data["inputs"]}
    assert lengths == {length}, f"outputs of {lengths} tokens, not {length}"
    return page, seconds


def open_times(path: Path, loads: int) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp()}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        times = []
        for _ in range(loads):
            driver.get(path.as_uri())
            while driver.execute_script("return document.body.dataset.ready") != "true":
                time.sleep(0.01)
            ready = driver.execute_script(
                "return performance.getEntriesByName('qkv-ready')[0]?.startTime"
                " ?? performance.now()"
            )
            times.append(ready / 1000)
        return times
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=5)
    parser.add_argument("--length", type=int, default=40, help="source and output tokens")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    page, build_seconds = build_page(
        inputs=args.inputs, length=args.length, layers=args.layers, heads=args.heads
    )
    folder = Path(tempfile.mkdtemp())
    path = folder / "explore.html"
    path.write_text(page, encoding="utf-8")
    times = open_times(path, args.loads)
    print(machine())
    print(
        table(
            [
                "layers x heads",
                "inputs x tokens",
                "HTML MB",
                "build s (python)",
                "open s (median)",
                "open s (max)",
            ],
            [
                [
                    f"{args.layers} x {args.heads}",
                    f"{args.inputs} x {args.length}",
                    path.stat().st_size / 1e6,
                    build_seconds,
                    statistics.median(times),
                    max(times),
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
