"""Live explorer pages (``qkv explore --live``): the page's size and the time of a 30-token
recompute in headless Chromium, per family (the bar: under 200 ms on a 2-core machine, and
under 5 MB for the ``dates`` demo's page).

    python -m benchmarks.live_page                 # every family, the default sizes
    python -m benchmarks.live_page --runs 11

The models have the sizes ``qkv train`` gives them on a character vocabulary of 64 ids (the
``dates`` alphabet's size): the Transformer ``small`` (the demo's model: 2 + 2 pre-LN blocks,
d_model 96, 4 heads), the RNN translator ``small`` (additive attention, GRU, 256 wide) and
the language model ``small`` (4 layers x 128, 4 heads, context 64).  Their weights are
random and seeded; the end token's output row is zeroed (its logit 0, below the best of the
others), so that each translation decodes the full 30 tokens.

What is timed: ``window.qkvLive.run`` (the forward pass alone: tokenize, encode, greedy
decode with a KV cache, every attention kept) and ``window.qkvLive.show`` (the same, then the
page's entry built -- rounded weights, summaries, rollout -- and drawn), each the median (and for
``run`` the fastest) of ``--runs`` calls after three warm-up calls, read from ``performance.now()`` in the page; also the time to open the page (navigation to the
page's ready mark) and of the first call, which decodes the weights from base64 too.  A
translator reads a 30-character source and decodes 30 tokens; the language model reads a
10-character prompt and generates 20 tokens greedily (30 positions), and is also timed on a
30-character prompt alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import machine, table
from benchmarks.explore_page import FLAGS
from qkv.data import EOS_ID, CharTokenizer
from qkv.explore import add_live, explore, render_html
from qkv.models import (
    DecoderLM,
    LMConfig,
    RNNConfig,
    RNNTranslator,
    Transformer,
    TransformerConfig,
)
from qkv.tasks.presets import preset_for

#: 60 characters + the 4 special ids: the size of the dates vocabulary.
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123 ,/-"
SOURCE = "Tuesday, March 3, 1998 at noon"  # 30 characters

#: The first call: it also decodes the weights from base64 (once per page).
FIRST = (
    "const t = performance.now(); window.qkvLive.run(arguments[0], arguments[1]);"
    " return performance.now() - t"
)
TIMED = (
    "const call = () => window.qkvLive[arguments[0]](arguments[1], arguments[2]);"
    " for (let i = 0; i < 3; i++) call();"
    " const times = []; for (let i = 0; i < arguments[3]; i++) {"
    " const t = performance.now(); call(); times.push(performance.now() - t); }"
    " times.sort((a, b) => a - b); return [times[Math.floor(times.length / 2)], times[0]]"
)


def models(tokenizer: CharTokenizer) -> dict[str, tuple[torch.nn.Module, str, dict]]:
    """family -> (model, text, options of qkvLive.run)."""
    torch.manual_seed(0)
    vocab = tokenizer.vocab_size
    transformer = Transformer(TransformerConfig.small(vocab)).eval()
    rnn_sizes = dict(preset_for("rnn", "small").model)
    rnn = RNNTranslator(RNNConfig(vocab, **rnn_sizes, dropout=0.0)).eval()
    lm_sizes = dict(preset_for("lm", "small").model)
    lm = DecoderLM(LMConfig(vocab, **lm_sizes)).eval()
    with torch.no_grad():  # every translation runs to its 30 tokens
        transformer.output.weight[EOS_ID] = 0.0
        rnn.output.weight[EOS_ID] = 0.0
        rnn.output.bias[EOS_ID] = -10.0
    return {
        "Transformer (small, dates)": (transformer, SOURCE, {"maxLen": 30}),
        "RNN translator (small)": (rnn, SOURCE, {"maxLen": 30}),
        "LM (small): 10 + 20 generated": (lm, SOURCE[:10], {"generate": 20}),
        "LM (small): 30-token prompt": (lm, SOURCE, {}),
    }


def main() -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed calls per family")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = CharTokenizer(list(ALPHABET))
    folder = Path(tempfile.mkdtemp())
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp()}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    rows = []
    try:
        for name, (model, text, run_options) in models(tokenizer).items():
            data = explore(model, [text], tokenizer=tokenizer, max_len=4)
            assert add_live(data, model, tokenizer, max_mb=1000) is None
            page = folder / "live.html"
            page.write_text(render_html(data), encoding="utf-8")
            driver.get(page.as_uri())
            while driver.execute_script("return document.body.dataset.ready") != "true":
                time.sleep(0.01)
            opened = driver.execute_script(
                "return performance.getEntriesByName('qkv-ready')[0].startTime"
            )
            first = driver.execute_script(FIRST, text, run_options)
            result = driver.execute_script(
                "return window.qkvLive.run(arguments[0], arguments[1])", text, run_options
            )
            steps = len(result["logits"])
            run_ms, run_best = driver.execute_script(TIMED, "run", text, run_options, args.runs)
            show_ms, _ = driver.execute_script(TIMED, "show", text, run_options, args.runs)
            rows.append(
                [
                    name,
                    f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M",
                    len(result["ids"]["source"]),
                    steps if "LM" not in name else len(result["ids"]["all"]),
                    page.stat().st_size / 2**20,
                    opened / 1000,
                    first,
                    run_ms,
                    run_best,
                    show_ms,
                ]
            )
    finally:
        driver.quit()
    print(f"{machine()}; Chromium {driver.capabilities.get('browserVersion', '?')} (headless)")
    headers = [
        "family",
        "parameters",
        "input tokens",
        "rows",
        "page MB",
        "open s",
        "first run ms",
        "run ms",
        "run ms (best)",
        "run + draw ms",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
