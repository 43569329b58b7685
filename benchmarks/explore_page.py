"""Size and opening time of the attention explorer's page (issue 14's targets: a 6-layer,
8-head Transformer, 5 inputs of 40 tokens: under 5 MB of HTML, open in under 2 s).

    OMP_NUM_THREADS=1 python -m benchmarks.explore_page            # the issue's case
    python -m benchmarks.explore_page --inputs 1 --length 100      # one long input
    python -m benchmarks.explore_page --lm --length 1024 --layers 12 --heads 12 --loads 2

``--lm``: issue 22's long page, a random-weight language model (d = 64 per head) on one
input of ``--length`` tokens, stored compactly (q and k in float16, weights computed in the
page); the bar is to open in under 2 s and to change head and hover in under 100 ms.  It
also times the last layer's mean over heads and its rollout, which the page computes from
every head (in slices between frames) when they are chosen.

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


def build_lm_page(*, length: int, layers: int, heads: int) -> tuple[str, float]:
    from qkv.data import CharTokenizer
    from qkv.models import DecoderLM, LMConfig

    torch.manual_seed(0)
    tokenizer = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz .,;"])
    config = LMConfig(
        tokenizer.vocab_size,
        d_model=64 * heads,
        num_heads=heads,
        num_layers=layers,
        d_ff=256,
        max_len=length,
        dropout=0.0,
    )
    model = DecoderLM(config).eval()
    ids = torch.randint(4, tokenizer.vocab_size, (length,)).tolist()
    start = time.perf_counter()
    page = render_html(explore(model, [ids], tokenizer=tokenizer))
    return page, time.perf_counter() - start


#: What a head change and a hover take in the page, in milliseconds (the bar: 100): five
#: head changes (to heads not shown before), their median and the slowest.
HEAD_CHANGE = (
    "const t = performance.now(); window.qkv.show({layer: arguments[0], head: arguments[1]});"
    " return performance.now() - t"
)
HEADS = [(1, 3), (2, 5), (3, 7), (4, 1), (5, 2)]
HOVER = (
    "const c = document.querySelector('.matrix-canvas, #matrix .cell');"
    " const b = c.getBoundingClientRect(); const t = performance.now();"
    " c.dispatchEvent(new MouseEvent(c.classList.contains('cell') ? 'mouseover' : 'mousemove',"
    " {bubbles: true, clientX: b.left + 5, clientY: b.top + 5})); return performance.now() - t"
)


def interactions(driver, layers: int) -> dict[str, float]:
    """Head change and hover times (ms); on a long page also the seconds until the last
    layer's mean over heads and its rollout, computed in the page, are drawn."""
    heads = driver.execute_script("return window.qkv.data.model.heads")
    changes = [
        driver.execute_script(HEAD_CHANGE, layer % layers, head % heads) for layer, head in HEADS
    ]
    found = {
        "head change ms (median)": statistics.median(changes),
        "head change ms (max)": max(changes),
        "hover ms": driver.execute_script(HOVER),
    }
    if driver.execute_script("return window.qkv.data.inputs[0].views[0].compact === true"):
        for head in ("mean", "rollout"):
            start = time.perf_counter()
            driver.execute_script(
                "window.qkv.show({layer: arguments[0], head: arguments[1]})", layers - 1, head
            )
            while driver.execute_script("return window.qkv.pending()"):
                time.sleep(0.02)
            found[f"last layer's {head} s"] = time.perf_counter() - start
    return found


def open_times(
    path: Path, loads: int, timings: dict | None = None, *, layers: int = 1
) -> list[float]:
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
        if timings is not None:
            timings.update(interactions(driver, layers))
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
    parser.add_argument("--lm", action="store_true", help="a language model's long page")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.lm:
        page, build_seconds = build_lm_page(
            length=args.length, layers=args.layers, heads=args.heads
        )
    else:
        page, build_seconds = build_page(
            inputs=args.inputs, length=args.length, layers=args.layers, heads=args.heads
        )
    folder = Path(tempfile.mkdtemp())
    path = folder / "explore.html"
    path.write_text(page, encoding="utf-8")
    timings: dict[str, float] = {}
    times = open_times(path, args.loads, timings, layers=args.layers)
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
                *timings,
            ],
            [
                [
                    f"{args.layers} x {args.heads}",
                    f"{1 if args.lm else args.inputs} x {args.length}",
                    path.stat().st_size / 1e6,
                    build_seconds,
                    statistics.median(times),
                    max(times),
                    *timings.values(),
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
