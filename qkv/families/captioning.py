"""The captioner: Show, Attend and Tell over a CNN's regions (`qkv train captioning`, scored
by BLEU-1..4 and attention grounding, explored picture by picture)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import CheckpointError, DataError
from ..explore import explorer_of_type
from ..tasks.captioner_eval import evaluate_captioning
from ..tasks.captioning import CAPTIONING, CaptioningSetup, caption_examples
from ..tasks.evaluate import Evaluation, EvaluationRequest, data_to_score
from ..tasks.image_captioner import CAPTIONER, ImageCaptioner, load_captioner
from ..tasks.presets import CAPTIONER_SIZES
from ..tasks.translator import reading_errors
from .record import ExplorerPage, Family, TrainCommand, ViewRequest, explore_with, train_with_spec

__all__ = ["FAMILY"]


def score(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """BLEU-1..4 against all references of each image, exact match, and on the scenes the
    attention on each object word's object."""
    with reading_errors(CheckpointError):
        captioner = ImageCaptioner.from_checkpoint(checkpoint, device=request.device)
    data, split = data_to_score(checkpoint, request), request.split or "test"
    with reading_errors(DataError):
        examples = caption_examples(
            data,
            split,
            image_size=captioner.image_size,
            images=request.images,
            size=request.limit,
        )
    scores, _ = evaluate_captioning(captioner, examples, beam=request.beam)
    lines = [
        f"{data} {split} ({scores.num_images} images, beam {request.beam})",
        f"BLEU-1 {scores.bleu1:.2f}   BLEU-2 {scores.bleu2:.2f}   BLEU-3 {scores.bleu3:.2f}   "
        f"BLEU-4 {scores.bleu4:.2f}   exact match {scores.exact_match:.1%}",
        "BLEU: corpus-level, against all references of each image; captions are lowercase "
        "words joined by spaces, sacreBLEU tokenize='none'",
    ]
    if scores.grounding is not None:
        lines.append(
            f"grounding: {scores.grounding:.1%} of each object word's attention falls on its "
            f"object; a uniform map gives {scores.grounding_uniform:.1%} "
            f"({scores.grounded_words} words)"
        )
    return Evaluation(scores.as_dict(), lines)


def view(checkpoint: str, inputs: Sequence[str], request: ViewRequest) -> ExplorerPage:
    """Each picture captioned, with the attention over its regions word by word."""
    captioner = ImageCaptioner.from_checkpoint(checkpoint, device=request.device)
    images = captioner.load_images(list(inputs))
    names = [Path(path).name for path in inputs]
    return explore_with(captioner.loaded, images, request, names=names)


FAMILY = Family(
    name="captioning",
    model_types=(CAPTIONER,),
    setup=CaptioningSetup,
    presets={"captioning": CAPTIONER_SIZES["default"]},
    spec=CAPTIONING,
    command=TrainCommand(
        help="train an image captioner (Show, Attend and Tell) on scenes or a Karpathy JSON",
        description="Train a captioner whose decoder attends over image regions at every "
        "word. --data shapes draws the generated scenes (no download); a JSON path reads a "
        "Karpathy split file (Flickr8k/30k, COCO) with its pictures under --images. "
        "Checkpoints, the word vocabulary and log.jsonl go to --out; validation logs BLEU-4 "
        "(0-100), exact match and, on the scenes, attention grounding. --max-tokens counts "
        "an image as its regions: 4096 makes batches of 64 images with the 8 x 8 grid.",
        examples="qkv train captioning --data shapes --out runs/shapes --max-minutes 20\n"
        "qkv train captioning --data dataset_flickr8k.json --images Flicker8k_Dataset "
        "--image-size 128 --out runs/flickr8k",
        out_help="run folder (checkpoints, vocab, log.jsonl)",
        flags={"doubly_stochastic": "--lambda"},
    ),
    train=train_with_spec(CAPTIONING),
    score=score,
    explorers={CAPTIONER: explorer_of_type(CAPTIONER)},
    view=view,
    loader=load_captioner,
    commands={CAPTIONER: "qkv caption --attention-out, qkv evaluate or qkv explore"},
)
