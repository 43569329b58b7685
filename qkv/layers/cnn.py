"""Image encoders that turn a picture into a grid of region features (SPEC section 8).

A CNN maps an image (B, 3, H, W) to a feature map (B, D, h, w); adaptive average pooling
brings the map to a fixed ``grid`` x ``grid``, so images of any size give the same
P = grid * grid regions; flattening row by row gives region p = row * grid + column as a
batch-first set of vectors (B, P, D) for attention to read.

:class:`SmallResNet` is a small residual network (He et al. 2016) that trains from scratch
on a CPU; :class:`RegionEncoder` wraps any backbone (this one, or a pretrained trunk) with
the ImageNet normalisation and the pooling.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageNormalization",
    "ResidualBlock",
    "SmallResNet",
    "RegionEncoder",
    "feature_map_to_regions",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageNormalization(nn.Module):
    """(x - mean) / std per RGB channel with the ImageNet statistics, so callers pass plain
    [0, 1] images.  Shapes: (B, 3, H, W) -> (B, 3, H, W)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: Tensor) -> Tensor:
        return (images - self.mean.to(images.dtype)) / self.std.to(images.dtype)


class ResidualBlock(nn.Module):
    """relu(F(x) + shortcut(x)) with F = conv3x3-BN-ReLU-conv3x3-BN; the shortcut is the
    identity, or a strided 1x1 conv + BN where the width or resolution changes.

    Shapes: (B, C_in, H, W) -> (B, C_out, H / stride, W / stride) (rounded up)."""

    def __init__(self, *, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        r"""$\mathrm{relu}(F(x) + \mathrm{shortcut}(x))$.  Shapes: x (B, C_in, H, W) -> (B, C_out, H
        / stride, W / stride)."""
        residual = self.norm2(self.conv2(self.norm1(self.conv1(x)).relu()))
        return (residual + self.shortcut(x)).relu()


class SmallResNet(nn.Module):
    """A stem conv then residual blocks, halving the resolution ``num_downsamples`` times
    (the stem takes the first halving) and doubling the width at each halving up to
    ``output_dim``.

    For 64 x 64 images and 3 halvings: stem 32 x 32 (D/4) -> block 32 x 32 (D/4) ->
    block 16 x 16 (D/2) -> block 8 x 8 (D).

    Shapes: (B, 3, H, W) -> (B, output_dim, H / 2^n, W / 2^n) (rounded up).
    """

    def __init__(self, *, output_dim: int, num_downsamples: int, min_width: int = 8):
        super().__init__()
        if output_dim < 1:
            raise ValueError(f"output_dim={output_dim} must be positive")
        if num_downsamples < 0:
            raise ValueError(f"num_downsamples={num_downsamples} must be 0 or more")
        num_blocks = max(num_downsamples, 1)  # one stride-1 block, then one per later halving
        widths = [
            max(output_dim // 2 ** (num_blocks - 1 - i), min(min_width, output_dim))
            for i in range(num_blocks)
        ]
        stem_stride = 2 if num_downsamples > 0 else 1
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, stride=stem_stride, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        blocks = [ResidualBlock(in_channels=widths[0], out_channels=widths[0])]
        for previous, width in zip(widths, widths[1:]):
            blocks.append(ResidualBlock(in_channels=previous, out_channels=width, stride=2))
        self.blocks = nn.Sequential(*blocks)
        self.output_dim = output_dim

    @staticmethod
    def downsamples_for(image_size: int, grid: int) -> int:
        """How many halvings bring ``image_size`` closest to ``grid`` without going below it."""
        if image_size < grid:
            raise ValueError(f"image_size={image_size} is smaller than grid={grid}")
        return int(math.floor(math.log2(image_size / grid) + 1e-9))

    def forward(self, images: Tensor) -> Tensor:
        """Shapes: images (B, 3, H, W) -> feature map (B, output_dim, H / 2^n, W / 2^n)."""
        return self.blocks(self.stem(images))


def feature_map_to_regions(feature_map: Tensor) -> Tensor:
    """Flatten a feature map row by row into region vectors (region p = row * w + column).

    Shapes: (B, D, h, w) -> (B, h * w, D)."""
    if feature_map.dim() != 4:
        raise ValueError(f"feature_map must be (B, D, h, w), got {tuple(feature_map.shape)}")
    return feature_map.flatten(2).transpose(1, 2)  # (B, P, D)


class RegionEncoder(nn.Module):
    """Normalise [0, 1] RGB images, run a CNN backbone, pool its map to grid x grid, flatten.

    ``backbone`` maps (B, 3, H, W) to (B, feature_dim, h, w).

    Shapes: images (B, 3, H, W) float in [0, 1] -> regions (B, P, feature_dim),
    P = grid * grid.
    """

    def __init__(self, *, backbone: nn.Module, feature_dim: int, grid: int):
        super().__init__()
        if grid < 1:
            raise ValueError(f"grid={grid} must be a positive number of regions per side")
        self.normalize = ImageNormalization()
        self.backbone = backbone
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.feature_dim = feature_dim
        self.grid = grid

    @property
    def num_regions(self) -> int:
        """P = grid * grid, the number of region vectors per image."""
        return self.grid * self.grid

    def forward(self, images: Tensor) -> Tensor:
        """Shapes: images (B, 3, H, W), floats in [0, 1] -> regions (B, P, feature_dim)."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be RGB (B, 3, H, W), got {tuple(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"images must be floats in [0, 1], got {images.dtype}")
        feature_map = self.pool(self.backbone(self.normalize(images)))  # (B, D, g, g)
        if feature_map.shape[1] != self.feature_dim:
            raise ValueError(
                f"the backbone gave {feature_map.shape[1]} channels, expected "
                f"feature_dim={self.feature_dim}"
            )
        return feature_map_to_regions(feature_map)  # (B, P, D)
