"""Soak: train, evaluate, translate, caption and plot in a loop in one process; watch memory.

    python -m benchmarks.soak --minutes 20
    python -m benchmarks.soak --minutes 5 --threads 1

Each round, in a fresh folder that is deleted afterwards, through the library calls the
``qkv`` commands make:

1. translation: ``train_translation`` (small Transformer on the generated dates, a few dozen
   steps), ``Translator.from_checkpoint``, ``evaluate_translation`` on part of the test split,
   ``translate`` with attention and ``plot_translation_attention``;
2. captioning: ``train_captioning`` (the demo's small captioner on generated scenes),
   ``ImageCaptioner.from_checkpoint``, ``evaluate_captioning`` and
   ``plot_caption_attention``.

The resident memory (VmRSS) is read before the first round, after the first round (when
the imports, caches and allocator pools have settled) and after the last.  Growth is
measured from the end of round 1 to the end (target: under 5%); any exception stops the
soak and is reported with its round.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import shutil
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

from benchmarks.common import machine
from qkv.tasks.captioner_eval import ImageCaptioner, evaluate_captioning, plot_caption_attention
from qkv.tasks.captioning import SCENES, caption_examples, train_captioning
from qkv.tasks.captioning_demo import DEMO_CAPTIONING_CONFIG, DEMO_CAPTIONING_SETUP
from qkv.tasks.demo import DEMO_TRAIN_CONFIG
from qkv.tasks.plots import plot_translation_attention
from qkv.tasks.translation import TranslationSetup, train_translation
from qkv.tasks.translator import Translator, evaluate_translation

TRANSLATION = TranslationSetup(data="dates", max_len=48, valid_bleu_sentences=20)
CAPTIONING = dataclasses.replace(DEMO_CAPTIONING_SETUP, valid_size=20)


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def one_round(folder: Path, steps: int) -> str:
    """One round of every task; a short line of what it produced."""
    config = dataclasses.replace(
        DEMO_TRAIN_CONFIG, max_steps=steps, max_minutes=None, validate_every=steps, log_every=10
    )
    train_translation(TRANSLATION, config, folder / "translation")
    translator = Translator.from_checkpoint(folder / "translation")
    scores, _, _ = evaluate_translation(translator, "dates", split="test", beam=2, limit=40)
    (translation,) = translator.translate(["July 14th, 1969"], need_attention=True)
    plot_translation_attention(translator, translation, folder / "translation.png")

    config = dataclasses.replace(
        DEMO_CAPTIONING_CONFIG, max_steps=steps, max_minutes=None, validate_every=steps
    )
    train_captioning(CAPTIONING, config, folder / "captioning")
    captioner = ImageCaptioner.from_checkpoint(folder / "captioning")
    test = caption_examples(SCENES, "test", image_size=CAPTIONING.image_size, size=20)
    caption_scores, _ = evaluate_captioning(captioner, test, beam=2)
    (caption,) = captioner.caption([test[0].image], need_attention=True)
    plot_caption_attention(test[0].image, caption, folder / "caption.png")
    return (
        f"dates BLEU {scores.bleu:.1f}, '{translation.text}'; scenes BLEU-4 "
        f"{caption_scores.bleu4:.1f}, '{caption.text}'"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=40, help="training steps per task a round")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    warnings.filterwarnings("ignore", message=".*truncat.*")  # dates longer than max_len
    print(machine())
    started, rounds, error = time.monotonic(), 0, None
    at_start = resident_mib()
    after_first = None
    print(f"resident memory at the start: {at_start:.1f} MiB", flush=True)
    while time.monotonic() - started < 60 * arguments.minutes:
        folder = Path(tempfile.mkdtemp(prefix="qkv-soak-"))
        try:
            produced = one_round(folder, arguments.steps)
        except Exception:  # noqa: BLE001 - the soak reports whatever breaks
            error = f"round {rounds + 1}: {traceback.format_exc()}"
            break
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        rounds += 1
        gc.collect()
        now = resident_mib()
        after_first = after_first or now
        elapsed = time.monotonic() - started
        print(f"round {rounds} ({elapsed:.0f} s): {now:.1f} MiB resident; {produced}", flush=True)
    at_end = resident_mib()
    print()
    print("| rounds | minutes | start MiB | after round 1 MiB | end MiB | growth after round 1 |")
    print("|--------|---------|-----------|-------------------|---------|----------------------|")
    growth = "n/a" if after_first is None else f"{100 * (at_end / after_first - 1):+.1f}%"
    first = "n/a" if after_first is None else f"{after_first:.1f}"
    minutes = (time.monotonic() - started) / 60
    print(f"| {rounds} | {minutes:.1f} | {at_start:.1f} | {first} | {at_end:.1f} | {growth} |")
    print(f"errors: {error or 'none'}")


if __name__ == "__main__":
    main()
