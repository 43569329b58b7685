"""Whole jobs built from the library: train, translate, evaluate, plot (what the CLI calls)."""

from .captioner_eval import CaptionScores, evaluate_captioning
from .captioning import CaptioningSetup, caption_examples, train_captioning
from .captioning_demo import demo_captioning
from .demo import run_demo
from .evaluate import Evaluation, EvaluationRequest
from .image_captioner import Caption, ImageCaptioner, plot_caption_attention
from .plots import plot_translation_attention
from .presets import PRESETS, Preset, preset_for, recipe_for
from .task import TaskData, TaskSpec, train_task, train_with_options, use_threads
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
    "Preset",
    "PRESETS",
    "preset_for",
    "recipe_for",
    "TaskSpec",
    "TaskData",
    "train_task",
    "train_with_options",
    "use_threads",
    "Evaluation",
    "EvaluationRequest",
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
