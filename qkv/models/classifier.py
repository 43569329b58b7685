"""Classifiers built on the captioner's CNN: one image -> one label, one clip -> one label
(many-to-one), one clip -> a label per frame (many-to-many).

All three share :class:`FrameEncoder`: the captioner's region encoder (``RegionEncoder``
over ``SmallResNet`` or a torchvision trunk, built by the captioner's own builder, so its
weights transfer as they are), optionally ``SelfAttention2d`` over its region grid, then the
regions pooled to one vector per picture (mean, or a learned attention query).  Pools, of
regions and of frames, are chosen by name from the registry of :mod:`.classifier_pools`.

Each model's config holds what that model reads: :class:`ClassifierConfig` the shared
fields (the image classifier's whole config), :class:`ClipClassifierConfig` adds the frame
pool, :class:`FrameTaggerConfig` the self-attention blocks; no config carries another
model's knobs.  Checkpoints written when one config held all of them load as they are
(``qkv.models.saved_configs`` drops the fields their model never read).

Labels ride the trainer's sequence format: class c is label id c + 1 and id 0 is ``<pad>``
(no label: a padded frame), so the logits have K + 1 columns, column 0 being the pad id,
which is never a target; predictions take the argmax over columns 1..K.  There is nothing
to teacher-force, so ``target_input`` is ignored.  A clip batch pads short clips with
frames of ``PAD_FRAME`` (real pixels lie in [0, 1]), and :func:`frame_mask` finds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor, nn

from qkv.errors import InputError
from qkv.layers import SelfAttention2d, SequenceTagger

from .base import Seq2SeqOutput
from .captioner_config import SMALL_RESNET, TORCHVISION_PREFIX
from .captioner_encoder import build_region_encoder
from .classifier_pools import available_pools, pool_kind
from .registry import register_model

__all__ = [
    "ClassifierConfig",
    "ClipClassifierConfig",
    "FrameTaggerConfig",
    "FrameEncoder",
    "ImageClassifier",
    "ClipClassifier",
    "FrameTagger",
    "PAD_FRAME",
    "frame_mask",
    "IMAGE_POOLS",
    "CLIP_POOLS",
]

PAD_FRAME = -1.0
#: The registered pools for an image's regions (those that read no order) and for a clip's
#: frames; the first of each is its task's default.
IMAGE_POOLS = ("mean", *(name for name in available_pools(ordered=False) if name != "mean"))
CLIP_POOLS = available_pools()


@dataclass(frozen=True)
class ClassifierConfig:
    """What every classifier reads; the image classifier's whole config.

    num_classes: K.  channels: 1 (grey, repeated to RGB for the encoder) or 3.
    image_size, encoder, pretrained_encoder, feature_dim, grid: as in ``CaptionerConfig``
    (the same encoder is built from them).  feature_attention: ``SelfAttention2d`` over the
    grid x grid regions.  region_pool: regions -> picture vector, a pool of
    :mod:`.classifier_pools` that reads no order ("mean" or "attention").  dropout: before
    the output layer (and inside the tagger)."""

    num_classes: int
    channels: int = 1
    image_size: int = 28
    encoder: str = SMALL_RESNET
    pretrained_encoder: bool = False
    feature_dim: int = 64
    grid: int = 7
    feature_attention: bool = False
    region_pool: str = "mean"
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise InputError(f"num_classes={self.num_classes} must be at least 2")
        if self.channels not in (1, 3):
            raise InputError(f"channels={self.channels} must be 1 (grey) or 3 (RGB)")
        if self.encoder != SMALL_RESNET and not self.encoder.startswith(TORCHVISION_PREFIX):
            raise InputError(
                f"encoder={self.encoder!r}: use {SMALL_RESNET!r} or torchvision:<name>"
            )
        for name in ("image_size", "feature_dim", "grid"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)} must be positive")
        pool_kind(self.region_pool, ordered=False, field="region_pool")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"dropout={self.dropout} must lie in [0, 1)")


@dataclass(frozen=True)
class ClipClassifierConfig(ClassifierConfig):
    """The clip classifier's: :class:`ClassifierConfig`'s fields and ``pool``, frames -> clip
    vector, a pool of :mod:`.classifier_pools` ("attention", "mean" or "last": the final
    state of a GRU over the frames)."""

    pool: str = "attention"

    def __post_init__(self) -> None:
        super().__post_init__()
        pool_kind(self.pool, field="pool")


@dataclass(frozen=True)
class FrameTaggerConfig(ClassifierConfig):
    """The frame tagger's: :class:`ClassifierConfig`'s fields and its self-attention blocks
    over the frames, ``tagger_layers`` of ``num_heads`` heads (0 layers = each frame
    classified alone), with position encodings unless ``positions`` is False."""

    tagger_layers: int = 2
    num_heads: int = 4
    positions: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tagger_layers < 0 or self.num_heads < 1:
            raise InputError(
                f"tagger_layers={self.tagger_layers} must be >= 0 and num_heads="
                f"{self.num_heads} positive"
            )


def frame_mask(clips: Tensor) -> Tensor:
    """Which frames of a padded clip batch are real.  Shapes: (B, T, C, S, S) -> (B, T) bool."""
    return clips[:, :, 0, 0, 0] != PAD_FRAME


class FrameEncoder(nn.Module):
    """Pictures -> regions (captioner encoder [+ SelfAttention2d]) -> one vector each.

    Shapes: images (N, C, S, S) in [0, 1] -> (vectors (N, D), attention dict)."""

    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.channels = config.channels
        # build_region_encoder reads encoder, pretrained_encoder, feature_dim, image_size and
        # grid, which ClassifierConfig carries with the same meaning.
        self.encoder = build_region_encoder(config)  # type: ignore[arg-type]
        self.feature_attention = (
            SelfAttention2d(config.feature_dim) if config.feature_attention else None
        )
        self.region_pool = pool_kind(config.region_pool).build(config.feature_dim)
        self.grid = config.grid

    def forward(self, images: Tensor, *, need_attention: bool = False) -> tuple[Tensor, dict]:
        if images.dim() != 4 or images.shape[1] != self.channels:
            raise InputError(
                f"images must be (N, {self.channels}, S, S), got {tuple(images.shape)}"
            )
        if self.channels == 1:
            images = images.expand(-1, 3, -1, -1)  # grey -> RGB for the ImageNet-normalised CNN
        regions = self.encoder(images)  # (N, P, D)
        attention: dict[str, list[Tensor]] = {}
        if self.feature_attention is not None:
            grid_map = regions.transpose(1, 2).unflatten(2, (self.grid, self.grid))  # (N, D, g, g)
            out = self.feature_attention(grid_map, need_weights=need_attention)
            regions = out.output.flatten(2).transpose(1, 2)  # (N, P, D)
            if out.weights is not None:
                attention["feature"] = [out.weights]  # (N, P, P)
        pooled = self.region_pool(regions)  # (N, D)
        if need_attention and pooled.weights is not None:
            attention["regions"] = [pooled.weights]  # (N, 1, P)
        return pooled.vector, attention


class ImageClassifier(nn.Module):
    """One picture, one label.  Shapes: source (B, C, S, S) -> logits (B, 1, K + 1)."""

    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        self.frames = FrameEncoder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.feature_dim, config.num_classes + 1)

    def classify(self, source: Tensor, *, need_attention: bool = False) -> Seq2SeqOutput:
        """Shapes: source (B, C, S, S) -> Seq2SeqOutput(logits (B, 1, K + 1), the attention maps
        when asked for)."""
        vectors, attention = self.frames(source, need_attention=need_attention)
        logits = self.output(self.dropout(vectors)).unsqueeze(1)  # (B, 1, K + 1)
        return Seq2SeqOutput(logits, attention or None)

    def forward(self, source: Tensor, target_input: Tensor | None = None) -> Seq2SeqOutput:
        """The trainer's call: :meth:`classify` (``target_input`` is not used)."""
        return self.classify(source)


def _encode_frames(
    frames: FrameEncoder, clips: Tensor, need_attention: bool
) -> tuple[Tensor, Tensor, dict]:
    """Encode the real frames only and put them back in place (zeros at the padding).
    Shapes: clips (B, T, C, S, S) -> (vectors (B, T, D), mask (B, T), attention)."""
    if clips.dim() != 5:
        raise InputError(f"clips must be (B, T, C, S, S), got {tuple(clips.shape)}")
    mask = frame_mask(clips)  # (B, T)
    vectors, attention = frames(clips[mask], need_attention=need_attention)  # (N, D)
    out = vectors.new_zeros(*mask.shape, vectors.shape[-1])  # (B, T, D)
    out[mask] = vectors
    return out, mask, attention


class ClipClassifier(nn.Module):
    """Many-to-one: frame vectors pooled over time by the pool ``config.pool`` names
    ("attention": a learned query's weighted mean; "mean": the plain mean; "last": a GRU's
    state after the last real frame), then a linear layer.  Shapes: source (B, T, C, S, S) -> logits (B, 1, K + 1); with
    ``need_attention`` the pooling weights ``attention["frames"] = [(B, 1, T)]``."""

    def __init__(self, config: ClipClassifierConfig):
        super().__init__()
        self.config = config
        self.frames = FrameEncoder(config)
        kind = pool_kind(config.pool)
        self._pool_attribute = kind.attribute  # the name its weights are saved under
        setattr(self, kind.attribute, kind.build(config.feature_dim))
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.feature_dim, config.num_classes + 1)

    def classify(self, source: Tensor, *, need_attention: bool = False) -> Seq2SeqOutput:
        """Shapes: source (B, T, C, S, S) -> Seq2SeqOutput(logits (B, 1, K + 1),
        ``attention['frames']`` when asked for)."""
        vectors, mask, attention = _encode_frames(self.frames, source, need_attention)
        pooled = getattr(self, self._pool_attribute)(vectors, mask)  # (B, D)
        if need_attention and pooled.weights is not None:
            attention["frames"] = [pooled.weights]  # (B, 1, T)
        logits = self.output(self.dropout(pooled.vector)).unsqueeze(1)  # (B, 1, K + 1)
        return Seq2SeqOutput(logits, attention or None)

    def forward(self, source: Tensor, target_input: Tensor | None = None) -> Seq2SeqOutput:
        """The trainer's call: :meth:`classify` (``target_input`` is not used)."""
        return self.classify(source)


class FrameTagger(nn.Module):
    """Many-to-many: frame vectors -> ``SequenceTagger`` (self-attention blocks over the
    frames, then a label per frame).  Shapes: source (B, T, C, S, S) -> logits (B, T, K + 1);
    with ``need_attention`` each block's weights ``attention["self"] = [(B, H, T, T)]``."""

    def __init__(self, config: FrameTaggerConfig):
        super().__init__()
        self.config = config
        self.frames = FrameEncoder(config)
        self.tagger = SequenceTagger(
            config.feature_dim,
            config.num_classes + 1,
            num_layers=config.tagger_layers,
            d_model=max(config.feature_dim, 2 * config.num_heads),
            num_heads=config.num_heads,
            dropout=config.dropout,
            positions=config.positions,
        )

    def classify(self, source: Tensor, *, need_attention: bool = False) -> Seq2SeqOutput:
        """Shapes: source (B, T, C, S, S) -> Seq2SeqOutput(logits (B, T, K + 1),
        ``attention['self']`` when asked for)."""
        vectors, mask, attention = _encode_frames(self.frames, source, need_attention)
        tagged = self.tagger(vectors, mask=mask, need_weights=need_attention)
        if tagged.attention:
            attention["self"] = tagged.attention
        return Seq2SeqOutput(tagged.logits, attention or None)  # (B, T, K + 1)

    def forward(self, source: Tensor, target_input: Tensor | None = None) -> Seq2SeqOutput:
        """The trainer's call: :meth:`classify` (``target_input`` is not used)."""
        return self.classify(source)


def _dropping(*unread: str):
    """Before 2026-12-02 the three classifiers shared one config holding every one's fields:
    a config saved then loses the ``unread`` fields its model never read (its weights do not
    depend on them)."""

    def upgrade(config: dict, shapes: Mapping[str, tuple[int, ...]]) -> dict:
        for name in unread:
            config.pop(name, None)
        return config

    return upgrade


register_model(
    "image-classifier",
    ClassifierConfig,
    ImageClassifier,
    upgrade=_dropping("pool", "tagger_layers", "num_heads", "positions"),
)
register_model(
    "clip-classifier",
    ClipClassifierConfig,
    ClipClassifier,
    upgrade=_dropping("tagger_layers", "num_heads", "positions"),
)
register_model("frame-tagger", FrameTaggerConfig, FrameTagger, upgrade=_dropping("pool"))
