"""Whole jobs built from the library: train, translate, evaluate, plot (what the CLI calls)."""

from .captioner_eval import CaptionScores, evaluate_captioning
from .captioning import CaptioningSetup, caption_examples, train_captioning
from .captioning_demo import demo_captioning
from .demo import run_demo
from .image_captioner import Caption, ImageCaptioner, plot_caption_attention
from .plots import plot_translation_attention
from .translation import (
    MODEL_BUILDERS,
    TranslationSetup,
    build_translation_model,
    train_translation,
)
from .translator import (
    Translation,
    TranslationReport,
    Translator,
    evaluate_translation,
    reading_errors,
    score_translator,
)

__all__ = [
    "run_demo",
    "plot_translation_attention",
    "MODEL_BUILDERS",
    "TranslationSetup",
    "build_translation_model",
    "train_translation",
    "Translation",
    "Translator",
    "evaluate_translation",
    "TranslationReport",
    "score_translator",
    "reading_errors",
    "CaptioningSetup",
    "caption_examples",
    "train_captioning",
    "Caption",
    "CaptionScores",
    "ImageCaptioner",
    "evaluate_captioning",
    "plot_caption_attention",
    "demo_captioning",
]
