"""Training and scoring classifiers: pictures (Fashion-MNIST, the scenes' colour + shape, a
folder of class subfolders) and clips (one label per clip, or one per frame).

One concept, one module (about 400 lines): the classifier task's setup, data, batches and
scores, shared by pictures and clips, which differ only in the frames a source holds.

Batches follow the trainer's format (``qkv.models.classifier``): source (B, C, S, S) floats
in [0, 1] for pictures, (B, T, C, S, S) for clips padded with ``PAD_FRAME`` frames; target
``<s>`` then the label id(s) (class + 1), padded with ``<pad>``.  The token budget
``max_tokens`` counts frames: a picture is one frame, a clip its number of frames.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..data import Batch
from ..data.batch import BOS_ID, PAD_ID
from ..data.clips import CLIP_TASKS, ClipSet, clip_split
from ..data.image_folders import read_image_folder
from ..data.labelled_images import LabelledImages, fashion_mnist_split, scene_classes
from ..decoding import check_scores
from ..errors import InputError, MissingFileError
from ..models import (
    ClassifierConfig,
    ClipClassifierConfig,
    FrameTaggerConfig,
    LoadedModel,
    build_model,
)
from ..models.classifier import CLIP_POOLS, IMAGE_POOLS, PAD_FRAME
from ..training import Checkpoint, TrainConfig, TrainResult, load_checkpoint
from ..training.loss import sequence_loss
from ..training.validation import scores_the_loss
from .presets import Preset, preset_for
from .task import TaskData, TaskSpec, setup_field, train_task

__all__ = [
    "IMAGE_DATA",
    "MODEL_TYPES",
    "ClassifierSetup",
    "ClassificationData",
    "ClassifierScores",
    "classification_data",
    "build_classifier",
    "CLASSIFIER",
    "train_classifier",
    "evaluate_classifier",
    "load_classifier",
    "classifier_checkpoint",
    "default_budget",
]


@dataclass
class ClassifierScores:
    """accuracy: share of labels right (per clip, picture or frame); loss: mean
    cross-entropy per label (the training loss without smoothing).  For per-frame clips,
    occluded_accuracy / clear_accuracy: the same on occluded / unoccluded frames.  For clips
    pooled by attention, marked_weight: mean attention weight on the marked frame (a
    uniform pooling gives 1 / frames, ``uniform_weight``)."""

    accuracy: float
    count: int
    loss: float | None = None
    occluded_accuracy: float | None = None
    clear_accuracy: float | None = None
    marked_weight: float | None = None
    uniform_weight: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items() if v is not None}


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module, data: ClassificationData, *, batch_size: int = 64
) -> ClassifierScores:
    """Score ``model`` (in eval mode; its mode is restored) on every item of ``data``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    clips = data.items.clips if isinstance(data.items, ClipSet) else None
    tally = _Tally()
    try:
        for start in range(0, len(data), batch_size):
            indices = list(range(start, min(start + batch_size, len(data))))
            batch = data.collate(indices).to(device)
            output = model.classify(batch.source, need_attention=data.task == "clip")
            gold = batch.target_output  # (B, T)
            check_scores(output.logits[..., 1:], "the classes")  # no accuracy from NaN
            guess = output.logits[..., 1:].argmax(dim=-1) + 1  # never the <pad> id
            hit = ((guess == gold) & (gold != PAD_ID)).cpu()
            tally.count(hit, int((gold != PAD_ID).sum()))
            tally.loss_sum += float(sequence_loss(output.logits, gold, pad_id=PAD_ID)[0])
            if clips is not None and data.task == "per-frame":
                occluded = torch.zeros_like(hit)
                for row, index in enumerate(indices):
                    occluded[row, : len(clips[index])] = torch.tensor(
                        [box is not None for box in clips[index].occluders]
                    )
                tally.count_occluded(hit, occluded)
            elif clips is not None and output.attention and "frames" in output.attention:
                weights = output.attention["frames"][0][:, 0].cpu()  # (B, T)
                for row, index in enumerate(indices):
                    tally.marked.append(float(weights[row, clips[index].marked]))
                    tally.uniform.append(1.0 / len(clips[index]))
    finally:
        model.train(was_training)
    return tally.scores()


@dataclass
class _Tally:
    """Running counts of :func:`evaluate_classifier`."""

    right: int = 0
    total: int = 0
    loss_sum: float = 0.0
    occluded_right: int = 0
    occluded: int | None = None
    marked: list[float] = dataclasses.field(default_factory=list)
    uniform: list[float] = dataclasses.field(default_factory=list)

    def count(self, hit: torch.Tensor, labels: int) -> None:
        self.right += int(hit.sum())
        self.total += labels

    def count_occluded(self, hit: torch.Tensor, occluded: torch.Tensor) -> None:
        self.occluded_right += int((hit & occluded).sum())
        self.occluded = (self.occluded or 0) + int(occluded.sum())

    def scores(self) -> ClassifierScores:
        total = max(self.total, 1)
        scores = ClassifierScores(self.right / total, self.total, self.loss_sum / total)
        if self.occluded is not None:
            clear = self.total - self.occluded
            scores.occluded_accuracy = self.occluded_right / max(self.occluded, 1)
            scores.clear_accuracy = (self.right - self.occluded_right) / max(clear, 1)
        if self.marked:
            scores.marked_weight = sum(self.marked) / len(self.marked)
            scores.uniform_weight = sum(self.uniform) / len(self.uniform)
        return scores


#: Built-in ``--data`` values besides "clips" and a folder path.
IMAGE_DATA = ("fashion-mnist", "shapes")
CLIPS = "clips"
#: task -> the model type it builds (``qkv.models.register_model``'s names).
MODEL_TYPES = {"image": "image-classifier", "clip": "clip-classifier", "per-frame": "frame-tagger"}
_CONFIGS = {"image": ClassifierConfig, "clip": ClipClassifierConfig, "per-frame": FrameTaggerConfig}


@dataclass(frozen=True)
class ClassifierSetup:
    """data: "fashion-mnist", "shapes" (one-object scenes: colour + shape), "clips" or a
    folder of class subfolders.  task: "image" for pictures; "clip" or "per-frame" for clips.
    pool: pictures pool their regions by "mean" (default) or "attention"; clips pool their
    frames by "attention" (default), "mean" or "last".  feature_attention: SelfAttention2d
    over the CNN's last feature map.  image_size: None = 28 (Fashion-MNIST, clips) or 64.
    feature_dim: the CNN's width; None = 32 for clips (the CNN runs on every frame), else 64.
    train_size / valid_size: the first N items of the split (None: all).  The remaining
    fields are the ``ClassifierConfig`` fields of the same names."""

    data: str = setup_field(
        "fashion-mnist",
        "fashion-mnist, shapes, clips, or a folder of class subfolders",
        group="data",
    )
    task: str | None = setup_field(
        None,
        "default: image for pictures, clip for --data clips",
        choices=tuple(MODEL_TYPES),
        group="data",
    )
    image_size: int | None = setup_field(
        None, "default: 28 (fashion-mnist, clips), 64", group="data"
    )
    train_size: int | None = setup_field(None, "use only the first N training items", group="data")
    valid_size: int | None = setup_field(1000, "validation items", group="data")
    pool: str | None = setup_field(
        None,
        "clips: frames pooled by attention (default), mean or last (a GRU's final "
        "state); pictures: regions pooled by mean (default) or attention",
        choices=("attention", "mean", "last"),
        group="model",
    )
    feature_attention: bool = setup_field(
        False,
        "SelfAttention2d over the CNN's last feature map (gate initialised at 0)",
        group="model",
    )
    feature_dim: int | None = setup_field(
        None, "CNN width (default: 32 for clips, else 64)", group="model"
    )
    grid: int | None = setup_field(
        None, "regions per side (default: 8 for 64-pixel pictures, else 7)", group="model"
    )
    tagger_layers: int = setup_field(2, "per-frame: self-attention blocks", group="model")
    positions: bool = setup_field(True, "per-frame: no position encodings", group="model")
    dropout: float = setup_field(0.1, "dropout", group="model")

    def __post_init__(self) -> None:
        task = self.task or ("clip" if self.data == CLIPS else "image")
        if (self.data == CLIPS) != (task in CLIP_TASKS):
            raise InputError(
                f"task={task!r} does not fit data={self.data!r}: clips take {CLIP_TASKS}, "
                "pictures 'image'",
                fields=("task", "data"),
            )
        pools = CLIP_POOLS if task == "clip" else IMAGE_POOLS
        pool = self.pool or pools[0]
        if pool not in pools:
            raise InputError(
                f"pool={pool!r} is not one of {pools} for task {task!r}", fields=("pool",)
            )
        size = self.image_size
        if size is None:
            size = 64 if self.data in ("shapes",) or self._is_folder() else 28
        given = (("image_size", size), ("feature_dim", self.feature_dim), ("grid", self.grid))
        for name, value in given:
            if value is not None and (isinstance(value, bool) or value < 1):
                raise InputError(f"{name}={value} must be a positive integer", fields=(name,))
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "pool", pool)
        object.__setattr__(self, "image_size", size)
        if self.grid is None:
            object.__setattr__(self, "grid", 8 if size >= 64 else 7)
        # clips run the CNN on every frame: a narrower one keeps a step affordable on a CPU
        object.__setattr__(
            self, "feature_dim", self.feature_dim or (32 if self.data == CLIPS else 64)
        )
        for name in ("train_size", "valid_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(
                    f"{name}={value} must be a positive number of items or None", fields=(name,)
                )

    def _is_folder(self) -> bool:
        return self.data not in IMAGE_DATA + (CLIPS,)


def classifier_preset(setup: ClassifierSetup) -> Preset:
    """The preset of the setup's data: clips, pictures of 64 pixels or more, or smaller."""
    if setup.data == CLIPS:
        return preset_for("classifier", "clips")
    return preset_for("classifier", "large-pictures" if setup.image_size >= 64 else "pictures")


def default_budget(setup: ClassifierSetup) -> dict[str, int]:
    """Batch size (``max_tokens``, in frames) and epochs of the setup's preset."""
    train = classifier_preset(setup).train
    return {"max_tokens": train["max_tokens"], "epochs": train["epochs"]}


# ---------------------------------------------------------------------------- data


class ClassificationData:
    """Pictures or clips in the form the trainer reads (``TrainingData``)."""

    def __init__(self, items: LabelledImages | ClipSet, task: str):
        self.items, self.task = items, task
        self.classes = items.classes
        if isinstance(items, ClipSet):
            self.source_lengths = [len(clip) for clip in items.clips]
        else:
            self.source_lengths = [1] * len(items)
        frames = task == "per-frame"
        # labels per item (the target's <s> is not counted), so that the sampler's
        # max(source, target) is the number of frames: --max-tokens counts frames
        self.target_lengths = [n if frames else 1 for n in self.source_lengths]

    def __len__(self) -> int:
        return len(self.source_lengths)

    def labels(self, index: int) -> list[int]:
        if isinstance(self.items, ClipSet):
            clip = self.items.clips[index]
            return list(clip.labels) if self.task == "per-frame" else [clip.label]
        return [int(self.items.labels[index])]

    def collate(self, indices: Sequence[int]) -> Batch:
        index = torch.as_tensor(list(indices), dtype=torch.long)
        if not isinstance(self.items, ClipSet):  # one label per image: no Python loop
            source = self.items.images.index_select(0, index).float().div_(255.0)  # (B, C, S, S)
            target = torch.full((len(index), 2), BOS_ID, dtype=torch.long)
            target[:, 1] = self.items.labels.index_select(0, index) + 1  # class c -> id c + 1
            return Batch(source, target, index)
        clips = [self.items.frames(i).float().div_(255.0) for i in indices]  # (T, 1, S, S)
        longest = max(len(clip) for clip in clips)
        source = torch.full((len(clips), longest, *clips[0].shape[1:]), PAD_FRAME)
        for row, clip in enumerate(clips):
            source[row, : len(clip)] = clip
        labels = [self.labels(i) for i in indices]
        target = torch.full((len(indices), 1 + max(map(len, labels))), PAD_ID, dtype=torch.long)
        target[:, 0] = BOS_ID
        for row, ids in enumerate(labels):
            target[row, 1 : 1 + len(ids)] = torch.as_tensor(ids) + 1  # class c -> id c + 1
        return Batch(source, target, index)


def classification_data(setup: ClassifierSetup, split: str, size: int | None = None):
    """The ``split`` of the setup's data as :class:`ClassificationData`."""
    if setup.data == CLIPS:
        items: LabelledImages | ClipSet = clip_split(setup.task, split, size=size)
    elif setup.data == "fashion-mnist":
        items = fashion_mnist_split(split, size=size)
    elif setup.data == "shapes":
        items = scene_classes(split, image_size=setup.image_size, size=size)
    elif Path(setup.data).is_dir():
        items = read_image_folder(setup.data, split, image_size=setup.image_size, size=size)
    else:
        raise MissingFileError(
            f"data={setup.data!r} is neither one of {IMAGE_DATA + (CLIPS,)} nor a folder of "
            "class subfolders",
            fields=("data",),
        )
    return ClassificationData(items, setup.task)


# ---------------------------------------------------------------------------- model


def build_classifier(setup: ClassifierSetup, num_classes: int, channels: int) -> nn.Module:
    """The model the setup describes (its config validates every value): the setup's
    ``pool`` pools a picture's regions, or a clip's frames; a frame tagger's regions and a
    clip's are pooled by their mean."""
    shared = dict(
        num_classes=num_classes,
        channels=channels,
        image_size=setup.image_size,
        feature_dim=setup.feature_dim,
        grid=setup.grid,
        feature_attention=setup.feature_attention,
        region_pool=setup.pool if setup.task == "image" else "mean",
        dropout=setup.dropout,
    )
    own = {
        "clip": dict(pool=setup.pool),
        "per-frame": dict(tagger_layers=setup.tagger_layers, positions=setup.positions),
    }.get(setup.task, {})
    return build_model(MODEL_TYPES[setup.task], _CONFIGS[setup.task](**shared, **own))


def _build(setup: ClassifierSetup, splits: tuple, vocabulary: None) -> nn.Module:
    train_data = splits[0]
    channels = int(train_data.collate([0]).source.shape[-3])
    return build_classifier(setup, len(train_data.classes), channels)


def _datasets(setup: ClassifierSetup, model: nn.Module, splits: tuple, vocabulary) -> TaskData:
    train_data, valid_data = splits

    @scores_the_loss
    def valid_scores(m: nn.Module) -> dict[str, float]:  # accuracy and loss in one pass
        scores = evaluate_classifier(m, valid_data)
        loss = {"valid_loss": scores.loss, "valid_ppl": math.exp(min(scores.loss, 700.0))}
        return {**scores.as_dict(), **loss}

    return TaskData(
        train_data, valid_data, valid_scores, metadata={"classes": list(train_data.classes)}
    )


#: The classifiers' parts of the shared skeleton (no vocabulary: the classes are data).
CLASSIFIER = TaskSpec(
    task="classification",
    preset=classifier_preset,
    read=lambda setup: (
        classification_data(setup, "train", setup.train_size),
        classification_data(setup, "valid", setup.valid_size),
    ),
    build=_build,
    datasets=_datasets,
)


def train_classifier(
    setup: ClassifierSetup, config: TrainConfig, out_dir: str | Path, *, resume: bool = False
) -> TrainResult:
    """Train; checkpoints go to ``out_dir``.  Each validation logs the loss and ``accuracy``
    (and for clips ``occluded_accuracy`` / ``marked_weight``, see :func:`evaluate_classifier`)."""
    return train_task(CLASSIFIER, setup, config, out_dir, resume=resume)


def load_classifier(path: str | Path, *, device: str = "cpu") -> LoadedModel:
    """A trained classifier (eval mode) with the setup it was trained with; it reads
    pictures or clips, no text: no tokenizer."""
    checkpoint, setup = classifier_checkpoint(path, device=device)
    name = type(checkpoint.model).__name__
    return LoadedModel(checkpoint.model, None, name, checkpoint.model_type, str(path), setup=setup)


def classifier_checkpoint(
    path: str | Path, *, device: str = "cpu"
) -> tuple[Checkpoint, ClassifierSetup]:
    """The checkpoint of a trained classifier (model in eval mode; its metadata holds the
    ``classes``) and the setup it was trained with."""
    checkpoint = load_checkpoint(path, map_location=device, load_tokenizers=False)
    if checkpoint.model_type not in MODEL_TYPES.values():
        raise InputError(
            f"{checkpoint.directory} holds a {checkpoint.model_type!r}, not a classifier"
        )
    checkpoint.model.eval()
    return checkpoint, ClassifierSetup(**checkpoint.metadata["setup"])
