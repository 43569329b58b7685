"""Training an image captioner: data -> word vocabulary -> Show, Attend and Tell -> the trainer.

One concept, one module (about 420 lines): the captioning task's parts of the training
skeleton, from its setup and sources to the batches the trainer takes, read top to bottom.

The data is either the generated shapes scenes (``data="shapes"``, no download) or a
Karpathy-split JSON (Flickr8k, Flickr30k, COCO) with its pictures in an images folder.
Whatever the source, images reach the model as (3, image_size, image_size) floats in [0, 1]
and captions as lowercase word lists.

How batches are sized: the trainer's token budget (``TrainConfig.max_tokens``) counts each
item as the longer of its source and its target, and an image's "source length" here is its
number of regions P, so ``max_tokens = 4096`` with 8 x 8 regions gives 64 captions per batch
(the batch size of Xu et al. 2015).  Captions longer than P tokens make smaller batches.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import BOS_ID, EOS_ID, Batch
from ..data.captions import (
    CaptionDataset,
    CaptionExample,
    CaptionTrainingData,
    WordVocab,
    remember_images,
)
from ..data.karpathy import read_karpathy
from ..data.scenes import scene_dataset
from ..errors import CheckpointError, DataError, InputError, MissingFileError
from ..layers import available_scores
from ..models import CaptionerConfig, LoadedModel, build_model
from ..training import TrainConfig, TrainResult, load_checkpoint
from .captioner_eval import evaluate_captioning
from .captioning_transfer import (
    ENCODER_FIELDS,
    CachedRegionData,
    fit_setup_to_classifier,
    freeze_encoder,
    load_transferred_encoder,
)
from .image_captioner import CAPTIONER, VOCAB_FILE, ImageCaptioner, vocabulary_of
from .presets import preset_for
from .task import TaskData, TaskSpec, setup_field, train_task
from .translator import reading_errors

__all__ = [
    "SCENES",
    "VOCAB_FILE",
    "CaptioningSetup",
    "CaptionTrainingData",
    "caption_examples",
    "remember_images",
    "MODEL_FIELDS",
    "build_captioner",
    "CAPTIONING",
    "train_captioning",
    "caption_splits",
    "PROBE_VOCAB",
    "probe_captioner",
    "synthetic_batch",
]


#: ``data`` value of the generated scenes.
SCENES = "shapes"


def caption_examples(
    data: str,
    split: str,
    *,
    image_size: int,
    images: str | Path | None = None,
    size: int | None = None,
) -> list[CaptionExample]:
    """The ``split`` ("train", "valid" / "val" or "test") of ``data``: "shapes" (the
    generated scenes, drawn at ``image_size``) or a Karpathy JSON whose pictures lie in
    ``images`` (default: the JSON's folder).  ``size`` keeps the first N images.

    Raises MissingFileError for a missing JSON or picture, DataError for anything else
    (not a JSON, missing fields, an empty split)."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise InputError(f"size={size!r} must be a positive number of images", fields=("size",))
    if data == SCENES:
        return scene_dataset(split, image_size=image_size, size=size)
    path = Path(data)
    if not path.exists():
        raise MissingFileError(
            f"data={data!r} is neither {SCENES!r} (the generated scenes) nor an existing "
            "Karpathy-format JSON file",
            fields=("data",),
        )
    if path.is_dir():
        raise DataError(
            f"data={data!r} is a folder; give the Karpathy JSON file inside it", fields=("data",)
        )
    folder = path.parent if images is None else Path(images)
    if not folder.is_dir():
        raise MissingFileError(f"images folder not found: {folder}", fields=("images",))
    examples = read_karpathy(path, folder, split, image_size=image_size)
    return examples if size is None else examples[:size]


def _karpathy_has_split(path: Path, split: str) -> bool:
    """Whether a Karpathy JSON lists any image of ``split`` (errors are left to the reader)."""
    wanted = {"valid": "val"}.get(split, split)
    try:
        records = json.loads(path.read_text(encoding="utf-8")).get("images", [])
        return any(isinstance(r, dict) and r.get("split") == wanted for r in records)
    except (OSError, ValueError, AttributeError):
        return True  # let read_karpathy report what is wrong, in its own words


def caption_splits(setup: CaptioningSetup) -> tuple[list[CaptionExample], list[CaptionExample]]:
    """The training and validation examples of a setup (no validation for a JSON without
    a val split)."""
    options = dict(image_size=setup.image_size, images=setup.images)
    train_examples = caption_examples(setup.data, "train", size=setup.train_size, **options)
    if setup.data != SCENES and not _karpathy_has_split(Path(setup.data), "val"):
        return train_examples, []  # a JSON without a val split trains without validation
    valid_examples = caption_examples(setup.data, "valid", size=setup.valid_size, **options)
    return train_examples, valid_examples


#: Vocabulary size of the captioner that is timed.
PROBE_VOCAB = 1000


def probe_captioner(
    setup: CaptioningSetup, build: Callable[[CaptioningSetup, int], nn.Module]
) -> nn.Module:
    """The captioner whose steps are timed; with a frozen encoder, steps read cached region
    features, so the decoder alone is timed."""
    model = build(setup, PROBE_VOCAB)
    if setup.freeze_encoder:
        model.encoder.requires_grad_(False)
    return model


def synthetic_batch(setup: CaptioningSetup, num_regions: int, config: TrainConfig) -> Batch:
    """A batch of the size the trainer will make: an image counts as its regions."""
    length = setup.max_caption_len + 2
    size = max(config.max_tokens // max(num_regions, length), 1)
    generator = torch.Generator().manual_seed(0)
    if setup.freeze_encoder:  # the batch carries the cached features (B, P, D)
        images = torch.rand(size, num_regions, setup.feature_dim, generator=generator)
    else:
        images = torch.rand(size, 3, setup.image_size, setup.image_size, generator=generator)
    words = torch.randint(4, PROBE_VOCAB, (size, length), generator=generator)
    words[:, 0], words[:, -1] = BOS_ID, EOS_ID
    return Batch(images, words, torch.arange(size))


#: The doubly stochastic regulariser's default lambda on the scenes and on a Karpathy JSON.
SCENES_LAMBDA, KARPATHY_LAMBDA = 0.0, 0.1


#: CaptionerConfig's defaults, which the setup's model fields keep (declared there, once).
_MODEL = {f.name: f.default for f in dataclasses.fields(CaptionerConfig)}


@dataclass(frozen=True)
class CaptioningSetup:
    """What to train on and which captioner to build (the trainer's knobs are a TrainConfig).

    data: "shapes" (the generated scenes) or the path of a Karpathy-format JSON file.
    images: the folder holding the JSON's pictures (None: the JSON file's own folder).
    image_size: the side, in pixels, that every image is resized (and centre-cropped) to.
    min_count: words seen fewer times in the training captions become ``<unk>``.
    max_caption_len: training captions are cut to this many words; captions are generated
        up to this many words.
    train_size / valid_size: use only the first N images of the split (None: all of it).
        The validation images give the validation loss and, decoded greedily, BLEU-4.
    score, attention, gate, doubly_stochastic, encoder, pretrained_encoder, grid,
    feature_dim, embedding_dim, hidden_dim, attention_dim, dropout: the
        :class:`~qkv.models.CaptionerConfig` fields of the same names and, but for
        ``doubly_stochastic``, the same defaults (``attention=False`` is the mean-feature
        baseline; ``doubly_stochastic`` is the regulariser's lambda).
        Lambda (None: by the data) is 0 on the scenes and 0.1 on a Karpathy JSON, not the
        paper's 1: the regulariser asks each of the 64 regions to be looked at about once
        per caption, while an object of these scenes covers under a tenth of the image.  On
        the scenes lambda = 0 gave about twice the grounding of 0.1 in each of 3 seeds (3
        minutes each: 4.4x / 4.7x / 4.0x against 2.0x / 2.4x / 2.3x the uniform share) at
        no loss of BLEU-4; see docs/results.md.
    encoder_from: a classifier checkpoint (``qkv train classifier``) whose CNN the
        captioner starts from; its encoder, image_size, feature_dim and grid replace the
        setup's (see :mod:`qkv.tasks.captioning_transfer`).
    freeze_encoder: the CNN is not trained; each training image's region features are
        computed once and cached.  Needs ``encoder_from`` or ``pretrained_encoder``.
    """

    data: str = setup_field(
        SCENES, "'shapes' (the generated scenes) or a Karpathy JSON file", group="data"
    )
    images: str | None = setup_field(
        None, "folder of the JSON's pictures (default: the JSON's folder)", group="data"
    )
    image_size: int = setup_field(64, "images are resized to this side", group="data")
    min_count: int = setup_field(5, "rarer words become <unk>", group="data")
    max_caption_len: int = setup_field(20, "words per caption", group="data")
    train_size: int | None = setup_field(None, "use only the first N training images", group="data")
    valid_size: int | None = setup_field(
        300, "validation images for the loss and greedy BLEU-4", group="data"
    )
    score: str = setup_field(
        _MODEL["score"],
        "attention score (additive is the paper's)",
        choices=tuple(available_scores()),
        group="model",
    )
    attention: bool = setup_field(
        _MODEL["attention"],
        "the baseline: the decoder sees the mean region feature at every word",
        group="model",
    )
    doubly_stochastic: float | None = setup_field(
        None,
        "weight of the doubly stochastic regulariser (0 = off; default: 0 "
        "on the scenes, where 0.1 halved the attention on the named object in 3 seeds of 3 "
        "minutes; 0.1 on a Karpathy JSON; the paper's 1)",
        group="model",
    )
    gate: bool = setup_field(_MODEL["gate"], "drop the gating scalar beta_t", group="model")
    encoder: str = setup_field(
        _MODEL["encoder"],
        "resnet-small (trained from scratch) or torchvision:<name>, e.g. torchvision:resnet18",
        group="model",
    )
    pretrained_encoder: bool = setup_field(
        _MODEL["pretrained_encoder"], "ImageNet weights for torchvision", group="model"
    )
    encoder_from: str | None = setup_field(
        None,
        "start the CNN from a classifier checkpoint (`qkv train classifier`): "
        "its weights load exactly, and its encoder, --image-size, --feature-dim and --grid "
        "replace the captioner's (giving other values than the classifier's is an error)",
        group="model",
    )
    freeze_encoder: bool = setup_field(
        False,
        "do not train the CNN (with --encoder-from or --pretrained-encoder): "
        "each training image's region features are computed once and cached in memory "
        "(float32, up to 2 GiB, checked at the start), so a step costs the decoder's time only",
        group="model",
    )
    grid: int = setup_field(_MODEL["grid"], "regions per side", group="model")
    feature_dim: int = setup_field(_MODEL["feature_dim"], "region feature width", group="model")
    embedding_dim: int = setup_field(_MODEL["embedding_dim"], "word embedding width", group="model")
    hidden_dim: int = setup_field(_MODEL["hidden_dim"], "LSTM width", group="model")
    attention_dim: int | None = setup_field(
        _MODEL["attention_dim"], "additive score width", group="model"
    )
    dropout: float = setup_field(
        _MODEL["dropout"], "dropout before the output layer", group="model"
    )

    def __post_init__(self) -> None:
        if self.doubly_stochastic is None:
            by_data = SCENES_LAMBDA if self.data == SCENES else KARPATHY_LAMBDA
            object.__setattr__(self, "doubly_stochastic", by_data)
        if self.freeze_encoder and self.encoder_from is None and not self.pretrained_encoder:
            raise InputError(
                "freeze_encoder would freeze a randomly initialised CNN; give encoder_from "
                "(a classifier checkpoint) or pretrained_encoder (torchvision's weights)",
                fields=("freeze_encoder", "encoder_from", "pretrained_encoder"),
            )
        for name in ("min_count", "max_caption_len", "image_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name}={value!r} must be a positive integer", fields=(name,))
        for name in ("train_size", "valid_size"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InputError(
                    f"{name}={value!r} must be a positive number of images or None",
                    fields=(name,),
                )


#: The setup fields that are CaptionerConfig fields of the same name and meaning.
MODEL_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(CaptioningSetup)
    if field.name in {f.name for f in dataclasses.fields(CaptionerConfig)}
)


# ---------------------------------------------------------------------------- model


def build_captioner(setup: CaptioningSetup, vocab_size: int) -> nn.Module:
    """The captioner the setup describes: every setup field that names a
    :class:`~qkv.models.CaptionerConfig` field passes through (CaptionerConfig validates)."""
    fields = {name: getattr(setup, name) for name in MODEL_FIELDS}
    config = CaptionerConfig(vocab_size=vocab_size, max_len=setup.max_caption_len + 1, **fields)
    return build_model("captioner", config)


# ---------------------------------------------------------------------------- training


def _vocabulary(setup: CaptioningSetup, splits: tuple[list, list]) -> WordVocab:
    captions = (caption for example in splits[0] for caption in example.captions)
    vocab = WordVocab.build(captions, min_count=setup.min_count)
    if len(vocab) <= 4:
        raise DataError(
            f"no word occurs {setup.min_count} times in the training captions of "
            f"{setup.data!r}; lower min_count",
            fields=("min_count",),
        )
    return vocab


def _prepare(setup: CaptioningSetup, say: Callable[[str], object]) -> CaptioningSetup:
    """The setup with its ``encoder_from`` classifier's encoder fields, said once."""
    if setup.encoder_from is None:
        return setup
    setup = fit_setup_to_classifier(setup)
    taken = ", ".join(f"{name}={getattr(setup, name)}" for name in ENCODER_FIELDS)
    say(f"encoder from {setup.encoder_from}: {taken}")
    return setup


def _saved_vocabulary(out_dir: Path) -> WordVocab:
    with reading_errors(CheckpointError):
        return vocabulary_of(load_checkpoint(out_dir))


def _build(setup: CaptioningSetup, splits: tuple, vocab: WordVocab) -> nn.Module:
    model = build_captioner(setup, len(vocab))
    if setup.encoder_from is not None:
        load_transferred_encoder(model, setup.encoder_from)
    return model


def _datasets(
    setup: CaptioningSetup, model: nn.Module, splits: tuple[list, list], vocab: WordVocab
) -> TaskData:
    train_examples, valid_examples = splits
    options = dict(max_caption_len=setup.max_caption_len, per_caption=True)
    train_data = _training_data(
        setup, model, CaptionDataset(remember_images(train_examples), vocab, **options)
    )
    valid_data, evaluate = None, None
    if valid_examples:
        valid_examples = remember_images(valid_examples)
        valid_data = _training_data(setup, model, CaptionDataset(valid_examples, vocab, **options))
        evaluate = _validation_metrics(vocab, valid_examples, setup.max_caption_len)
    regions = model.config.num_regions
    return TaskData(
        train_data,
        valid_data,
        evaluate,
        sample=lambda config: (synthetic_batch(setup, regions, config), None),
        probe=lambda: probe_captioner(setup, build_captioner),
    )


#: The captioning task's parts of the shared skeleton.
CAPTIONING = TaskSpec(
    task="captioning",
    preset=lambda setup: preset_for("captioner", "default"),
    prepare=_prepare,
    read=caption_splits,
    vocabulary=_vocabulary,
    saved_vocabulary=_saved_vocabulary,
    tokenizers=lambda vocab: {VOCAB_FILE: vocab.to_tokenizer()},
    build=_build,
    datasets=_datasets,
)


def train_captioning(
    setup: CaptioningSetup, config: TrainConfig, out_dir: str | Path, **options: Any
) -> TrainResult:
    """Train a captioner; checkpoints (weights, config, ``tokenizer_vocab.json``) go to
    ``out_dir``.  Each validation logs the loss and, on up to ``valid_size`` validation
    images decoded greedily, ``bleu`` (BLEU-4, 0-100, which picks the best checkpoint),
    ``exact_match`` and, on the scenes, ``grounding`` / ``grounding_uniform``.
    ``options``: ``resume``, ``schedule`` (the captioner's recipe) and ``say``, as
    :func:`qkv.tasks.task.train_task` takes them."""
    return train_task(CAPTIONING, setup, config, out_dir, **options)


def _training_data(
    setup: CaptioningSetup, model: nn.Module, dataset: CaptionDataset
) -> CaptionTrainingData | CachedRegionData:
    """The trainer's view of ``dataset``; with a frozen encoder, batches of cached region
    features (the encoder is frozen here)."""
    config = model.config
    data = CaptionTrainingData(dataset, num_regions=config.num_regions)
    if not setup.freeze_encoder:
        return data
    freeze_encoder(model)
    return CachedRegionData(
        data, model.encoder, num_regions=config.num_regions, feature_dim=config.feature_dim
    )


def _validation_metrics(
    vocab: WordVocab, examples: list[CaptionExample], max_caption_len: int
) -> Callable[[nn.Module], dict[str, float]]:
    def evaluate(model: nn.Module) -> dict[str, float]:
        # the model in training, scored as the captioner it is becoming
        loaded = LoadedModel(model, vocab, type(model).__name__, CAPTIONER)
        captioner = ImageCaptioner(loaded, max_caption_len=max_caption_len)
        scores, _ = evaluate_captioning(captioner, examples, beam=1)
        metrics = {"bleu": scores.bleu4, "exact_match": scores.exact_match}
        if scores.grounding is not None:
            metrics["grounding"] = scores.grounding
            metrics["grounding_uniform"] = scores.grounding_uniform
        return metrics

    return evaluate
