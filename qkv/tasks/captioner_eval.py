"""Scoring a trained captioner: caption a split's images, score the captions, measure where
it looked (the captioning itself is ``image_captioner``, grounding ``qkv.evaluation``).

Scores (:func:`evaluate_captioning`):

- BLEU-1..4: corpus-level cumulative BLEU-n of the generated captions against *all*
  reference captions of each image, as in the captioning literature, on sacreBLEU's 0-100
  scale.  Tokenisation: captions are lowercase word lists (the scenes' words; a Karpathy
  file's ``tokens``, else its ``raw`` text split by ``tokenize_caption``), joined by single
  spaces and scored with sacreBLEU's ``tokenize='none'``, so BLEU sees exactly those words.
- exact_match: the share of images whose caption equals one of its references, word for word.
- grounding (scenes only): for every generated word that names an object, the share of that
  step's attention inside the object's box, averaged over those words; grounding_uniform is
  what a uniform map gives on the same words (the mean share of the image the boxes cover);
  which words name which object: ``qkv.evaluation.grounding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..data.captions import CaptionExample
from ..evaluation import bleu_1_to_4
from ..evaluation.grounding import GroundedWord, ground_caption, mean_grounding
from .image_captioner import Caption, ImageCaptioner

__all__ = ["CaptionScores", "BLEU_TOKENIZE", "evaluate_captioning"]

#: sacreBLEU tokenizer for captions, which are already word lists.
BLEU_TOKENIZE = "none"


@dataclass(frozen=True)
class CaptionScores:
    """Corpus scores of a captioner (see the module docstring for each one's definition).

    grounding, grounding_uniform: None where there is nothing to ground (no scene objects,
    or the no-attention baseline); grounded_words counts the words averaged over."""

    bleu1: float
    bleu2: float
    bleu3: float
    bleu4: float
    exact_match: float
    num_images: int
    beam: int
    tokenize: str
    grounding: float | None = None
    grounding_uniform: float | None = None
    grounded_words: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def evaluate_captioning(
    captioner: ImageCaptioner,
    examples: Sequence[CaptionExample],
    *,
    beam: int = 4,
    length_penalty: float = 1.0,
) -> tuple[CaptionScores, list[Caption]]:
    """Caption every example's image and score the captions against all its references."""
    if not examples:
        raise ValueError("no images to evaluate: the split is empty")
    config = captioner.model.config
    scenes = any(example.objects for example in examples)
    need_attention = scenes and captioner.has_attention
    captions: list[Caption] = []
    grounded: list[GroundedWord] = []
    for start in range(0, len(examples), captioner.batch_size):
        chunk = examples[start : start + captioner.batch_size]
        images = [example.image for example in chunk]
        if scenes and images[0].shape[-1] != config.image_size:
            raise ValueError(
                f"the scenes are drawn at {images[0].shape[-1]} px but the captioner works at "
                f"{config.image_size} px; draw them at {config.image_size} to score grounding"
            )
        found = captioner.caption(
            images, beam=beam, length_penalty=length_penalty, need_attention=need_attention
        )
        if need_attention:
            for example, caption in zip(chunk, found, strict=True):
                grounded += ground_caption(
                    caption.words,
                    caption.attention,
                    example.objects,
                    image_size=config.image_size,
                    grid=config.grid,
                )
        captions += found
    hypotheses = [caption.text for caption in captions]
    references = [[" ".join(words) for words in example.captions] for example in examples]
    bleu = bleu_1_to_4(hypotheses, references, tokenize=BLEU_TOKENIZE)
    exact = sum(
        caption.words in example.captions
        for caption, example in zip(captions, examples, strict=True)
    )
    grounding, grounding_uniform = mean_grounding(grounded) or (None, None)
    scores = CaptionScores(
        **bleu,
        exact_match=exact / len(examples),
        num_images=len(examples),
        beam=beam,
        tokenize=BLEU_TOKENIZE,
        grounding=grounding,
        grounding_uniform=grounding_uniform,
        grounded_words=len(grounded),
    )
    return scores, captions
