"""``qkv demo``: the main job on the embedded default data, start to finish on a CPU.

Trains a small Transformer on the generated ``dates`` task (human-written dates -> ISO
dates), prints a few translations and the exact-match accuracy on the test split, and
writes cross-attention heatmaps, one per example.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..training import TrainConfig
from .plots import plot_translation_attention
from .translation import TranslationSetup, train_translation
from .translator import Translator, evaluate_translation

__all__ = ["DEMO_TRAIN_CONFIG", "run_demo"]

#: Sized so the whole demo finishes in under 5 minutes on a 2-core laptop CPU.
DEMO_TRAIN_CONFIG = TrainConfig(
    lr=3e-3,
    schedule="inverse_sqrt",
    warmup_steps=200,
    label_smoothing=0.0,
    max_tokens=1024,
    epochs=None,
    max_steps=1500,
    max_minutes=4.25,
    validate_every=500,
    log_every=50,
)

EXAMPLES = [
    "the 3rd of March 1998",
    "Tuesday, March 3, 1998",
    "3/3/98",
    "July 14th, 1969",
    "1 Jan 2000",
]


def run_demo(
    out_dir: str | Path = "qkv-demo", *, config: TrainConfig = DEMO_TRAIN_CONFIG, say=print
) -> dict:
    """Train, evaluate and plot; returns the test scores.  ``say`` prints progress lines."""
    out_dir = Path(out_dir)
    started = time.perf_counter()
    say(f"qkv demo: training a small Transformer on 'dates' (checkpoints in {out_dir}/)")
    setup = TranslationSetup(
        data="dates", model="transformer", size="small", max_len=48, valid_bleu_sentences=200
    )
    result = train_translation(setup, config, out_dir)
    say(f"trained {result.steps} steps in {result.elapsed:.0f} s ({result.stop_reason})")
    translator = Translator.from_checkpoint(out_dir)
    scores, _, _ = evaluate_translation(translator, "dates", split="test", beam=1)
    say(
        f"test split: exact match {scores.exact_match:.1%}, BLEU {scores.bleu:.1f} ({scores.num_sentences} dates)"
    )
    plots = out_dir / "attention"
    for index, translation in enumerate(translator.translate(EXAMPLES)):
        say(f"  {translation.source!r:>28} -> {translation.text}")
        plot_translation_attention(translator, translation, plots / f"example-{index}.png")
    say(
        f"attention heatmaps: {plots}/example-*.png  ({time.perf_counter() - started:.0f} s in all)"
    )
    return {"exact_match": scores.exact_match, "bleu": scores.bleu, "steps": result.steps}
