"""Using a trained captioner: caption images, score the captions, measure where it looked.

Scores (:func:`evaluate_captioning`):

- BLEU-1..4: corpus-level cumulative BLEU-n of the generated captions against *all*
  reference captions of each image, as in the captioning literature, on sacreBLEU's 0-100
  scale.  Tokenisation: captions are lowercase word lists (the scenes' words; a Karpathy
  file's ``tokens``, else its ``raw`` text split by ``tokenize_caption``), joined by single
  spaces and scored with sacreBLEU's ``tokenize='none'``, so BLEU sees exactly those words.
- exact_match: the share of images whose caption equals one of its references, word for word.
- grounding (scenes only): for every generated word that names an object, the share of that
  step's attention inside the object's box, averaged over those words; grounding_uniform is
  what a uniform map gives on the same words (the mean share of the image the boxes cover).
  A generated shape word names the one object of that shape and, if the word before it is
  a colour, of that colour; the colour word then names it too.  Words that fit no object,
  or several, are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..data import BOS_ID, EOS_ID, PAD_ID
from ..data.captions import CaptionExample, WordVocab
from ..data.karpathy import load_image
from ..data.scenes import COLOURS, SHAPES
from ..decoding import beam_search, greedy_search
from ..evaluation import bleu_1_to_4
from ..models.captioner_grounding import attention_mass_in_box, box_area_fraction
from ..plotting import plot_image_attention
from ..training import load_checkpoint
from ..training.files import read_json

__all__ = [
    "Caption",
    "ImageCaptioner",
    "CaptionScores",
    "GroundedWord",
    "BLEU_TOKENIZE",
    "read_vocab",
    "name_objects",
    "ground_caption",
    "evaluate_captioning",
    "plot_caption_attention",
]

#: sacreBLEU tokenizer for captions, which are already word lists.
BLEU_TOKENIZE = "none"


@dataclass
class Caption:
    """One generated caption.  attention: (len(words), P), row t the attention over the
    image regions of the step that produced ``words[t]``, when asked for."""

    words: list[str]
    ids: list[int]
    score: float
    attention: Tensor | None = None

    @property
    def text(self) -> str:
        return " ".join(self.words)


def read_vocab(directory: str | Path) -> WordVocab:
    """The word vocabulary stored beside a checkpoint's weights (step directory).

    ``load_checkpoint`` reads tokenizer files with ``qkv.data.tokenizers.load_tokenizer``,
    which does not know the WordVocab format; so captioners are loaded with
    ``load_tokenizers=False`` and the vocabulary is read here, by the file name that the
    checkpoint's config.json lists under "tokenizers"."""
    directory = Path(directory)
    names = read_json(directory / "config.json", what="checkpoint config").get("tokenizers", {})
    if "vocab" not in names:
        raise ValueError(
            f"{directory} has no word vocabulary; it was not written by qkv train captioning"
        )
    return WordVocab.load(directory / names["vocab"])


class ImageCaptioner:
    """A captioning model and its word vocabulary, ready to caption batches of images."""

    def __init__(
        self, model: nn.Module, vocab: WordVocab, *, max_caption_len: int, batch_size: int = 64
    ):
        if len(vocab) != model.config.vocab_size:
            raise ValueError(
                f"the vocabulary has {len(vocab)} words but the model {model.config.vocab_size}"
            )
        self.model, self.vocab = model, vocab
        self.max_caption_len, self.batch_size = max_caption_len, batch_size

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str = "cpu") -> ImageCaptioner:
        checkpoint = load_checkpoint(path, map_location=device, load_tokenizers=False)
        if checkpoint.model_type != "captioner":
            raise ValueError(
                f"{checkpoint.directory} holds a {checkpoint.model_type!r} model, not a "
                "captioner; use the command for that model's task"
            )
        setup = checkpoint.metadata.get("setup", {})
        max_caption_len = int(setup.get("max_caption_len", checkpoint.config.max_len - 1))
        vocab = read_vocab(checkpoint.directory)
        return cls(checkpoint.model, vocab, max_caption_len=max_caption_len)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def image_size(self) -> int:
        return self.model.config.image_size

    @property
    def has_attention(self) -> bool:
        return bool(self.model.config.attention)

    def load_images(self, paths: Sequence[str | Path]) -> list[Tensor]:
        """Picture files as the model's input: any mode converted to RGB (transparency on
        white), resized to image_size and centre-cropped.  Shapes: each (3, S, S)."""
        if isinstance(paths, (str, Path)):
            raise TypeError("load_images takes a list of paths, not one path")
        if not paths:
            raise ValueError("no image files given")
        return [load_image(path, self.image_size) for path in paths]

    @torch.no_grad()
    def caption(
        self,
        images: Sequence[Tensor] | Tensor,
        *,
        beam: int = 1,
        length_penalty: float = 1.0,
        need_attention: bool = False,
    ) -> list[Caption]:
        """Caption images in batches of ``batch_size``; beam=1 is greedy search.

        Shapes: images (B, 3, H, W) or B tensors (3, H, W), floats in [0, 1], one size."""
        images = _image_list(images)
        if need_attention and not self.has_attention:
            raise ValueError("this captioner is the no-attention baseline: it has no attention")
        self.model.eval()
        results: list[Caption] = []
        for start in range(0, len(images), self.batch_size):
            batch = torch.stack(images[start : start + self.batch_size]).to(self.device)
            options = dict(
                max_len=self.max_caption_len + 1,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                pad_id=PAD_ID,
                need_attention=need_attention,
            )
            if beam == 1:
                found = greedy_search(self.model, batch, **options)
            else:
                found = beam_search(
                    self.model, batch, beam_size=beam, length_penalty=length_penalty, **options
                )
            for row, ids in enumerate(found.tokens):
                # an undertrained model may emit <pad> or <s>: they are not words, so their
                # steps are dropped from the attention too, keeping row t on words[t]
                kept = [t for t, token in enumerate(ids) if token not in (PAD_ID, BOS_ID)]
                words = self.vocab.decode([ids[t] for t in kept])
                attention = None
                if need_attention and found.attention is not None:
                    attention = found.attention[row][kept].float().cpu()  # (T, P)
                results.append(Caption(words, list(ids), found.scores[row], attention))
        return results


def _image_list(images: Sequence[Tensor] | Tensor) -> list[Tensor]:
    if isinstance(images, Tensor):
        if images.dim() != 4:
            raise ValueError(f"images must be (B, 3, H, W), got {tuple(images.shape)}")
        images = list(images)
    images = list(images)
    if not images:
        raise ValueError("no images to caption")
    shapes = {tuple(image.shape) for image in images}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[0] != 3:
        raise ValueError(f"images must all be (3, H, W) of one size, got shapes {sorted(shapes)}")
    if not all(image.is_floating_point() for image in images):
        raise TypeError("images must be float tensors in [0, 1]")
    return images


# ---------------------------------------------------------------------------- grounding


@dataclass(frozen=True)
class GroundedWord:
    """A generated word that names a scene object: its attention inside the object's box
    (``mass``) and the share of the image that box covers (``uniform``)."""

    position: int
    word: str
    object_index: int
    mass: float
    uniform: float


def name_objects(words: Sequence[str], objects: Sequence) -> dict[int, int]:
    """Word position -> index of the object that word names, for a generated caption.

    A shape word names the one object with that shape and, when the word before it is a
    colour, that colour (the colour word then names it too); no or several matches: none."""
    named: dict[int, int] = {}
    for position, word in enumerate(words):
        if word not in SHAPES:
            continue
        before = words[position - 1] if position > 0 else None
        colour = before if before in COLOURS else None
        matches = [
            index
            for index, obj in enumerate(objects)
            if obj.shape == word and (colour is None or obj.colour == colour)
        ]
        if len(matches) == 1:
            named[position] = matches[0]
            if colour is not None:
                named[position - 1] = matches[0]
    return named


def ground_caption(
    words: Sequence[str], attention: Tensor, objects: Sequence, *, image_size: int, grid: int
) -> list[GroundedWord]:
    """The attention mass inside the named object's box, for each word that names one.

    Shapes: attention (len(words), P) with P = grid * grid."""
    if attention.dim() != 2 or attention.shape[0] != len(words):
        raise ValueError(
            f"attention must be (T, P) with T = {len(words)} words, got {tuple(attention.shape)}"
        )
    grounded = []
    for position, index in sorted(name_objects(words, objects).items()):
        box = objects[index].box
        grounded.append(
            GroundedWord(
                position=position,
                word=words[position],
                object_index=index,
                mass=attention_mass_in_box(attention[position], box, image_size, grid),
                uniform=box_area_fraction(box, image_size),
            )
        )
    return grounded


# ---------------------------------------------------------------------------- scores


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
    grounding = grounding_uniform = None
    if grounded:
        grounding = sum(word.mass for word in grounded) / len(grounded)
        grounding_uniform = sum(word.uniform for word in grounded) / len(grounded)
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


def plot_caption_attention(
    image: Tensor, caption: Caption, path: str | Path, *, grid: int | None = None
) -> Path:
    """A strip: the image, then the attention of each generated word overlaid on it
    (upsampled and smoothed), the word under each panel.  Shapes: image (3, H, W)."""
    if caption.attention is None:
        raise ValueError("the caption has no attention maps; caption with need_attention=True")
    shape = None if grid is None else (grid, grid)
    return plot_image_attention(image, caption.words, caption.attention, path, grid=shape)
