"""``qkv demo``: the main job on the embedded default data, start to finish on a CPU.

Trains a small Transformer on the generated ``dates`` task (human-written dates -> ISO
dates), prints a few translations and the exact-match accuracy on the test split, and
writes cross-attention heatmaps, one per example, and a live explorer page beside them
(``explore-live.html``: type a date and the page recomputes every attention, offline).

What both demos share (this one and ``qkv demo captioning``) lives here too: the training
budget (:func:`demo_train_config`, the family's recipe for at most 1,500 steps or a few
minutes) and the frame of progress lines (:class:`DemoRun`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from ..training import TrainConfig, TrainResult
from ..training.recipes import Recipe
from .plots import plot_translation_attention
from .presets import recipe_for
from .translation import TranslationSetup, train_translation
from .translator import Translator, evaluate_translation

__all__ = [
    "DEMO_TRAIN_CONFIG",
    "DEMO_THREADS",
    "demo_train_config",
    "DemoRun",
    "run_demo",
    "write_live_page",
]


def demo_train_config(recipe: Recipe, *, max_minutes: float, log_every: int) -> TrainConfig:
    """A demo's budget: the recipe's peak, warm-up and batch, at most 1,500 steps or
    ``max_minutes``, no label smoothing, a validation every 500 steps."""
    return TrainConfig(
        lr=recipe.lr,
        schedule="inverse_sqrt",
        warmup_steps=recipe.warmup_steps,
        label_smoothing=0.0,
        max_tokens=recipe.max_tokens,
        epochs=None,
        max_steps=1500,
        max_minutes=max_minutes,
        validate_every=500,
        log_every=log_every,
    )


#: Sized so the whole demo finishes in under 5 minutes on a 2-core laptop CPU; its 1,500
#: steps were measured with batches of 1,024 tokens (98.7 % exact match, docs/results.md).
DEMO_TRAIN_CONFIG = dataclasses.replace(
    demo_train_config(recipe_for("transformer", "small"), max_minutes=4.25, log_every=50),
    max_tokens=1024,
)

#: The CPU threads each demo asks its caller for (None: torch's choice).  The captioning
#: demo's steps are many small operations that a second thread barely speeds up, and on a
#: 2-core machine whose other core is busy, two threads made a step 40 times slower
#: (0.15 s -> 5.8 s, measured).
DEMO_THREADS: dict[str, int | None] = {"translation": None, "captioning": 1}

EXAMPLES = [
    "the 3rd of March 1998",
    "Tuesday, March 3, 1998",
    "3/3/98",
    "July 14th, 1969",
    "1 Jan 2000",
]


class DemoRun:
    """The frame of a demo: says what it trains, trains, says how it went, and finally where
    the pictures are and how long it all took."""

    def __init__(self, out_dir: str | Path, say: Callable[[str], object]):
        self.out_dir, self.say = Path(out_dir), say
        self.started = time.perf_counter()

    def train(self, what: str, train: Callable[[], TrainResult]) -> TrainResult:
        self.say(f"{what} (checkpoints in {self.out_dir}/)")
        result = train()
        self.say(f"trained {result.steps} steps in {result.elapsed:.0f} s ({result.stop_reason})")
        return result

    def finish(self, pictures: str) -> None:
        elapsed = time.perf_counter() - self.started
        self.say(f"{pictures}  ({elapsed:.0f} s in all)")


def write_live_page(translator: Translator, path: str | Path, *, say=print) -> Path:
    """The explorer page of the demo's examples with the model live in it (``qkv explore
    --live``): every view, and a bar where the learner types a date of their own."""
    from ..explore import add_live, explore, write_html

    data = explore(translator.model, EXAMPLES, tokenizer=translator.tokenizer)
    why_not = add_live(data, translator.model, translator.tokenizer)
    if why_not is not None:  # the demo's model is a few MB: never, unless resized
        say(why_not)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return write_html(data, path)


def run_demo(
    out_dir: str | Path = "qkv-demo", *, config: TrainConfig = DEMO_TRAIN_CONFIG, say=print
) -> dict:
    """Train, evaluate and plot; returns the test scores.  ``say`` prints progress lines."""
    demo = DemoRun(out_dir, say)
    setup = TranslationSetup(
        data="dates", model="transformer", size="small", max_len=48, valid_bleu_sentences=200
    )
    result = demo.train(
        "qkv demo: training a small Transformer on 'dates'",
        lambda: train_translation(setup, config, demo.out_dir),
    )
    translator = Translator.from_checkpoint(demo.out_dir)
    scores, _, _ = evaluate_translation(translator, "dates", split="test", beam=1)
    say(
        f"test split: exact match {scores.exact_match:.1%}, BLEU {scores.bleu:.1f} "
        f"({scores.num_sentences} dates)"
    )
    plots = demo.out_dir / "attention"
    for index, translation in enumerate(translator.translate(EXAMPLES)):
        say(f"  {translation.source!r:>28} -> {translation.text}")
        plot_translation_attention(translator, translation, plots / f"example-{index}.png")
    page = write_live_page(translator, plots / "explore-live.html", say=say)
    say(f"live explorer (type your own dates; opens offline): {page}")
    demo.finish(f"attention heatmaps: {plots}/example-*.png")
    return {"exact_match": scores.exact_match, "bleu": scores.bleu, "steps": result.steps}
