"""The configuration of the image captioner (Xu et al. 2015, "Show, Attend and Tell")."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any

from qkv.errors import InputError
from qkv.layers.scores import available_scores

from .checks import check_dropout, check_positive_ints

__all__ = ["CaptionerConfig", "SMALL_RESNET", "TORCHVISION_PREFIX", "torchvision_available"]

#: The encoder written here, trained from scratch: ``qkv.layers.cnn.SmallResNet``.
SMALL_RESNET = "resnet-small"
#: ``"torchvision:<name>"``, e.g. "torchvision:resnet18": a torchvision network's trunk.
TORCHVISION_PREFIX = "torchvision:"


def torchvision_available() -> bool:
    """Whether the optional ``torchvision`` package can be imported."""
    try:
        return importlib.util.find_spec("torchvision") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class CaptionerConfig:
    """Every hyper-parameter of :class:`qkv.models.captioner.Captioner`.

    vocab_size: V, caption words including the special tokens.
    image_size: the side of the (square) training images in pixels; it sets how often the
        small ResNet halves the resolution and the pixel boxes of the regions.  Images of
        other sizes still work: the feature map is pooled to ``grid`` x ``grid``.
    encoder: "resnet-small" (the small residual network of ``qkv.layers.cnn``, trained from
        scratch) or "torchvision:<name>" (e.g. "torchvision:resnet18"; needs the optional
        torchvision package, never required otherwise).
    pretrained_encoder: load torchvision's ImageNet weights for a torchvision encoder
        (downloaded by torchvision on first use).
    feature_dim: D, the width of a region feature (a torchvision trunk of another width is
        followed by a 1x1 convolution to D).
    grid: regions per side; P = grid * grid regions (8 -> 64 regions for 64 x 64 images).
    embedding_dim: E, word embedding width (also the deep output's width).
    hidden_dim: H, the LSTM state width.
    attention_dim: width of the additive score's hidden layer (``None``: hidden_dim).
    score: the alignment function comparing h_{t-1} with each region, by registered name
        ("additive" is the paper's).  For "dot" / "scaled_dot" the regions are projected
        to H-wide keys so the widths match.
    attention: False builds the baseline whose decoder sees only the mean region feature,
        the same context at every step, instead of attending.
    gate: the paper's gating scalar beta_t = sigmoid(w_beta . h_{t-1} + b) on the context.
    doubly_stochastic: lambda of the regulariser
        lambda * sum_p (1 - sum_t alpha_tp)^2, which asks every region to be looked at
        about once per caption; 0 disables it (as does ``attention=False``).
    dropout: before the output layer.
    pad_id: padding token id.  eos_id: the end token; steps that read pad_id or eos_id
        predict nothing and are left out of the regulariser.
    max_len: the longest caption a caller should generate by default.
    """

    vocab_size: int
    image_size: int = 64
    encoder: str = SMALL_RESNET
    pretrained_encoder: bool = False
    feature_dim: int = 128
    grid: int = 8
    embedding_dim: int = 128
    hidden_dim: int = 256
    attention_dim: int | None = 128
    score: str = "additive"
    attention: bool = True
    gate: bool = True
    doubly_stochastic: float = 1.0
    dropout: float = 0.1
    pad_id: int = 0
    eos_id: int = 2
    max_len: int = 30

    def __post_init__(self) -> None:
        check_positive_ints(
            self,
            (
                "vocab_size",
                "image_size",
                "feature_dim",
                "grid",
                "embedding_dim",
                "hidden_dim",
                "max_len",
                "attention_dim",  # optional: None means hidden_dim
            ),
        )
        if self.grid > self.image_size:
            raise InputError(
                f"grid={self.grid} regions per side cannot exceed image_size={self.image_size} "
                "pixels; use a smaller grid or larger images"
            )
        self._check_encoder()
        if self.score not in available_scores():
            raise InputError(
                f"score={self.score!r} is not a known score; choose from {available_scores()} "
                "(or register_score() a new one)"
            )
        for name in ("attention", "gate", "pretrained_encoder"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r} must be a bool")
        if not self.doubly_stochastic >= 0.0:
            raise InputError(
                f"doubly_stochastic={self.doubly_stochastic} is the weight lambda of the "
                "regulariser; it must be >= 0 (0 disables it)"
            )
        check_dropout(self.dropout)
        for name in ("pad_id", "eos_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise InputError(
                    f"{name}={value!r} must be a token id below vocab_size={self.vocab_size}"
                )
        if self.pad_id == self.eos_id:
            raise InputError(f"pad_id and eos_id must differ, both are {self.pad_id}")

    def _check_encoder(self) -> None:
        if self.encoder == SMALL_RESNET:
            if self.pretrained_encoder:
                raise InputError(
                    f"pretrained_encoder=True needs a torchvision encoder; {SMALL_RESNET!r} "
                    "trains from scratch (set pretrained_encoder=False)"
                )
            return
        if not self.encoder.startswith(TORCHVISION_PREFIX) or self.encoder == TORCHVISION_PREFIX:
            raise InputError(
                f"encoder={self.encoder!r} is unknown; use {SMALL_RESNET!r} or "
                f"'{TORCHVISION_PREFIX}<name>' such as 'torchvision:resnet18'"
            )
        if not torchvision_available():
            raise InputError(
                f"encoder={self.encoder!r} needs the optional torchvision package, which is "
                f"not installed; install a torchvision matching your torch, or use "
                f"encoder={SMALL_RESNET!r} (no extra dependency)"
            )

    @property
    def num_regions(self) -> int:
        """P, the number of image regions attended over."""
        return self.grid * self.grid

    def replace(self, **changes: Any) -> CaptionerConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
