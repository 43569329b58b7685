"""The captioner's image encoder, chosen by ``CaptionerConfig.encoder``.

"resnet-small" is :class:`qkv.layers.cnn.SmallResNet`, trained from scratch.
"torchvision:<name>" takes a torchvision network's convolutional trunk (a ResNet's
conv1 .. layer4, or the ``features`` of VGG, MobileNet, EfficientNet, DenseNet, ...);
torchvision is optional and imported only here, only when asked for.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from qkv.layers.cnn import RegionEncoder, SmallResNet

from .captioner_config import SMALL_RESNET, TORCHVISION_PREFIX, CaptionerConfig

__all__ = ["build_region_encoder"]

_RESNET_TRUNK = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")


def build_region_encoder(config: CaptionerConfig) -> RegionEncoder:
    """Images (B, 3, H, W) in [0, 1] -> regions (B, P, feature_dim), as the config says."""
    if config.encoder == SMALL_RESNET:
        backbone: nn.Module = SmallResNet(
            output_dim=config.feature_dim,
            num_downsamples=SmallResNet.downsamples_for(config.image_size, config.grid),
        )
    else:
        backbone = torchvision_trunk(
            config.encoder.removeprefix(TORCHVISION_PREFIX),
            pretrained=config.pretrained_encoder,
            feature_dim=config.feature_dim,
            image_size=config.image_size,
        )
    return RegionEncoder(backbone=backbone, feature_dim=config.feature_dim, grid=config.grid)


def torchvision_trunk(
    name: str, *, pretrained: bool, feature_dim: int, image_size: int
) -> nn.Module:
    """The convolutional trunk of ``torchvision.models.<name>`` (no pooling, no classifier),
    followed by a 1x1 convolution to ``feature_dim`` channels if its width differs.

    Shapes: (B, 3, H, W) -> (B, feature_dim, h, w)."""
    try:
        models = importlib.import_module("torchvision.models")
    except ImportError as error:
        raise ValueError(
            f"encoder 'torchvision:{name}' needs torchvision, which cannot be imported "
            f"({error}); install it or use encoder={SMALL_RESNET!r}"
        ) from None
    factory = getattr(models, name, None)
    if not callable(factory):
        raise ValueError(
            f"torchvision.models has no network {name!r}; try e.g. 'torchvision:resnet18'"
        )
    network = factory(weights="DEFAULT" if pretrained else None)
    if all(hasattr(network, part) for part in _RESNET_TRUNK):
        trunk: nn.Module = nn.Sequential(*(getattr(network, part) for part in _RESNET_TRUNK))
    elif isinstance(getattr(network, "features", None), nn.Module):
        trunk = network.features
    else:
        raise ValueError(
            f"torchvision network {name!r} has neither a ResNet trunk (conv1 .. layer4) nor a "
            "'features' module; choose a ResNet, VGG, MobileNet, EfficientNet or DenseNet"
        )
    width = _output_width(trunk, image_size)
    if width == feature_dim:
        return trunk
    return nn.Sequential(trunk, nn.Conv2d(width, feature_dim, kernel_size=1))


@torch.no_grad()
def _output_width(trunk: nn.Module, image_size: int) -> int:
    """Channels of the trunk's feature map, read off one eval-mode pass on a blank image."""
    was_training = trunk.training
    trunk.eval()
    try:
        return int(trunk(torch.zeros(1, 3, image_size, image_size)).shape[1])
    finally:
        trunk.train(was_training)
