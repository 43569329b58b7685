"""A trained captioner with its vocabulary, ready to caption images (greedy or beam search
from ``qkv.decoding``), and the plot of where it looked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..data import BOS_ID, PAD_ID
from ..data.captions import WordVocab
from ..data.karpathy import load_image
from ..decoding import decode
from ..decoding.search import check_search
from ..errors import CheckpointError
from ..models import LoadedModel
from ..plotting import plot_image_attention
from ..training import Checkpoint, load_checkpoint

__all__ = [
    "CAPTIONER",
    "VOCAB_FILE",
    "Caption",
    "ImageCaptioner",
    "load_captioner",
    "vocabulary_of",
    "plot_caption_attention",
]

#: The vocabulary's name among the checkpoint's tokenizers (file ``tokenizer_vocab.json``).
VOCAB_FILE = "vocab"


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


def vocabulary_of(checkpoint: Checkpoint) -> WordVocab:
    """The word vocabulary a captioning checkpoint holds among its tokenizers (files written
    before it was a tokenizer, ``{"kind": "words", "tokens": [...]}``, read the same)."""
    if VOCAB_FILE not in checkpoint.tokenizers:
        raise CheckpointError(
            f"{checkpoint.directory} has no word vocabulary; it was not written by qkv train "
            "captioning"
        )
    return WordVocab.from_tokenizer(checkpoint.tokenizers[VOCAB_FILE])


#: The captioner's model type (``qkv.models.register_model``'s name).
CAPTIONER = "captioner"


def load_captioner(path: str | Path, *, device: str = "cpu") -> LoadedModel:
    """A captioner's checkpoint (run or step folder): its model (eval mode) and word
    vocabulary (the loaded model's tokenizer), with the fields of its setup as the run
    stored them (a dict)."""
    checkpoint = load_checkpoint(path, map_location=device)
    if checkpoint.model_type != CAPTIONER:
        raise ValueError(
            f"{checkpoint.directory} holds a {checkpoint.model_type!r} model, not a "
            "captioner; use the command for that model's task"
        )
    setup = checkpoint.metadata.get("setup", {})
    return LoadedModel(
        checkpoint.model.eval(),
        vocabulary_of(checkpoint),
        type(checkpoint.model).__name__,
        CAPTIONER,
        source=str(path),
        setup=dict(setup) if isinstance(setup, Mapping) else {},
    )


class ImageCaptioner:
    """A loaded captioner (its model and word vocabulary: ``loaded``) run on batches of
    images: captions of at most ``max_caption_len`` words, ``batch_size`` images at a time."""

    def __init__(self, loaded: LoadedModel, *, max_caption_len: int, batch_size: int = 64):
        model, vocab = loaded.model, loaded.tokenizer
        if len(vocab) != model.config.vocab_size:
            raise ValueError(
                f"the vocabulary has {len(vocab)} words but the model {model.config.vocab_size}"
            )
        self.loaded = loaded
        self.max_caption_len, self.batch_size = max_caption_len, batch_size

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str = "cpu") -> ImageCaptioner:
        """The captioner of a checkpoint (:func:`load_captioner`), its captions as long as
        its run's ``max_caption_len`` (a run without one: the model's positions)."""
        loaded = load_captioner(path, device=device)
        setup = loaded.setup if isinstance(loaded.setup, Mapping) else {}
        longest = setup.get("max_caption_len", loaded.model.config.max_len - 1)
        return cls(loaded, max_caption_len=int(longest))

    @property
    def model(self) -> nn.Module:
        return self.loaded.model

    @property
    def vocab(self) -> WordVocab:
        return self.loaded.tokenizer

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
        check_search(beam, length_penalty)
        images = _image_list(images)
        if need_attention and not self.has_attention:
            raise ValueError("this captioner is the no-attention baseline: it has no attention")
        self.model.eval()
        results: list[Caption] = []
        for start in range(0, len(images), self.batch_size):
            batch = torch.stack(images[start : start + self.batch_size]).to(self.device)
            found = decode(
                self.model,
                batch,
                beam=beam,
                length_penalty=length_penalty,
                max_len=self.max_caption_len + 1,
                need_attention=need_attention,
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


def plot_caption_attention(
    image: Tensor, caption: Caption, path: str | Path, *, grid: int | None = None
) -> Path:
    """A strip: the image, then the attention of each generated word overlaid on it
    (upsampled and smoothed), the word under each panel.  Shapes: image (3, H, W)."""
    if caption.attention is None:
        raise ValueError("the caption has no attention maps; caption with need_attention=True")
    shape = None if grid is None else (grid, grid)
    return plot_image_attention(image, caption.words, caption.attention, path, grid=shape)
