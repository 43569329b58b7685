"""Stacks of Transformer blocks, and copying weights in from ``torch.nn.Transformer``.

A stack takes its blocks and an optional final LayerNorm as components; it works on vectors
(B, T, D), not tokens, so embeddings and positions are the model's business.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.block_mask import BlockMask
from qkv.layers.blocks import DecoderBlock, DecoderLayerState, EncoderBlock
from qkv.layers.multihead import MultiHeadAttention

__all__ = [
    "TransformerEncoder",
    "TransformerDecoder",
    "EncoderStackOutput",
    "DecoderStackOutput",
    "load_torch_transformer",
    "load_torch_encoder_layer",
    "load_torch_decoder_layer",
]


@dataclass
class EncoderStackOutput:
    """hidden: (B, S, D).  attention: per block (B, H, S, S) when asked for, else None."""

    hidden: Tensor
    attention: list[Tensor] | None = None


@dataclass
class DecoderStackOutput:
    """hidden: (B, T, D).  self_attention: per block (B, H, T, Tk); cross_attention: per
    block (B, H, T, S); both with ``need_weights=True``, else None.  alignment: the last
    block's cross-attention (B, H, T, S) with ``need_weights=True`` or ``"last"``, else None."""

    hidden: Tensor
    self_attention: list[Tensor] | None = None
    cross_attention: list[Tensor] | None = None
    alignment: Tensor | None = None


class TransformerEncoder(nn.Module):
    """Encoder blocks in sequence, then ``norm`` (a final LayerNorm, or None).

    Shapes: x (B, S, D), mask broadcastable to (B, H, S, S), True = may attend
    -> EncoderStackOutput(hidden (B, S, D), attention).
    """

    def __init__(self, layers: Iterable[EncoderBlock], *, norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        need_weights: bool = False,
        block_mask: BlockMask | None = None,
    ) -> EncoderStackOutput:
        """``block_mask``: a flex block mask for every block's self-attention (local
        attention), in place of ``mask``."""
        weights: list[Tensor] = []
        for block in self.layers:
            out = block(x, mask=mask, need_weights=need_weights, block_mask=block_mask)
            x = out.hidden
            if need_weights:
                weights.append(out.self_attention)
        if self.norm is not None:
            x = self.norm(x)
        return EncoderStackOutput(x, weights if need_weights else None)


class TransformerDecoder(nn.Module):
    """Decoder blocks in sequence, then ``norm`` (a final LayerNorm, or None).

    Teacher forcing: ``decoder(x, memory, memory_mask=...)``.  Incremental decoding:
    ``states = decoder.start(memory)``, then ``decoder(x_new, memory_mask=..., states=states)``
    per step (the caches in ``states`` grow in place).

    ``need_weights``: False (none: every block takes the fused path); ``"last"`` (only the
    last block's cross-attention, the ``alignment`` a decoding step reports); True (every
    block's self- and cross-attention, and the alignment).

    Shapes: x (B, T, D); memory (B, S, D); memory_mask broadcastable to (B, H, T, S)
    -> DecoderStackOutput(hidden (B, T, D), ...).
    """

    def __init__(self, layers: Iterable[DecoderBlock], *, norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm
        if len(self.layers) == 0:
            raise ValueError("a TransformerDecoder needs at least one DecoderBlock")

    def start(self, memory: Tensor) -> list[DecoderLayerState]:
        """One decoding state per block: empty caches, cross-attention K/V of ``memory``."""
        return [block.start(memory) for block in self.layers]

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        memory_mask: Tensor | None = None,
        self_mask: Tensor | None = None,
        states: list[DecoderLayerState] | None = None,
        need_weights: bool | Literal["last"] = False,
    ) -> DecoderStackOutput:
        if states is not None and len(states) != len(self.layers):
            raise InputError(f"got {len(states)} layer states for {len(self.layers)} blocks")
        if need_weights not in (False, True, "last"):
            raise InputError(f'need_weights={need_weights!r} must be False, True or "last"')
        every_block = need_weights is True
        self_weights: list[Tensor] = []
        cross_weights: list[Tensor] = []
        last = len(self.layers) - 1
        for index, block in enumerate(self.layers):
            out = block(
                x,
                memory,
                memory_mask=memory_mask,
                self_mask=self_mask,
                state=None if states is None else states[index],
                need_weights=every_block or (need_weights == "last" and index == last),
            )
            x = out.hidden
            if every_block:
                self_weights.append(out.self_attention)
                cross_weights.append(out.cross_attention)
        if self.norm is not None:
            x = self.norm(x)
        alignment = out.cross_attention  # the last block's; None unless asked for
        if not every_block:
            return DecoderStackOutput(x, alignment=alignment)
        return DecoderStackOutput(x, self_weights, cross_weights, alignment)


@torch.no_grad()
def load_torch_transformer(
    encoder: TransformerEncoder, decoder: TransformerDecoder, torch_transformer: nn.Transformer
) -> None:
    """Copy the weights of a ``torch.nn.Transformer`` into qkv stacks of the same shape.

    ``nn.Transformer`` always ends each stack in a LayerNorm (post-LN too), so both qkv stacks
    need ``norm=nn.LayerNorm(d_model)`` (``TransformerConfig(final_norm=True)``).  Blocks must
    agree on ``norm_first``, activation, widths and heads.  Raises ValueError naming the first
    disagreement.
    """
    if not isinstance(torch_transformer, nn.Transformer):
        raise TypeError(f"expected a torch.nn.Transformer, got {type(torch_transformer).__name__}")
    pairs = (
        ("encoder", encoder, torch_transformer.encoder),
        ("decoder", decoder, torch_transformer.decoder),
    )
    for name, ours, theirs in pairs:
        if len(ours.layers) != len(theirs.layers):
            raise ValueError(
                f"{name}: qkv stack has {len(ours.layers)} blocks, torch has {len(theirs.layers)}"
            )
        if (ours.norm is None) != (theirs.norm is None):
            raise ValueError(
                f"{name}: final norm present in qkv={ours.norm is not None}, torch="
                f"{theirs.norm is not None}; nn.Transformer has one, so build qkv's with "
                "final_norm=True"
            )
        if ours.norm is not None:
            _copy_module(ours.norm, theirs.norm, f"{name}.norm")
        for index, (block, layer) in enumerate(zip(ours.layers, theirs.layers)):
            if isinstance(block, DecoderBlock):
                load_torch_decoder_layer(block, layer, where=f"{name}.layers.{index}")
            else:
                load_torch_encoder_layer(block, layer, where=f"{name}.layers.{index}")


# (qkv's submodule, nn.Transformer*Layer's), in the order they are copied: a decoder layer
# is an encoder layer with cross-attention between its self-attention and its feed-forward.
_SELF_ATTENTION_PARTS = (("self_attention", "self_attn"), ("self_attention_norm", "norm1"))
_FEED_FORWARD_PARTS = (("feed_forward.expand", "linear1"), ("feed_forward.contract", "linear2"))
_ENCODER_PARTS = (*_SELF_ATTENTION_PARTS, *_FEED_FORWARD_PARTS, ("feed_forward_norm", "norm2"))
_DECODER_PARTS = (
    *_SELF_ATTENTION_PARTS,
    ("cross_attention", "multihead_attn"),
    ("cross_attention_norm", "norm2"),
    *_FEED_FORWARD_PARTS,
    ("feed_forward_norm", "norm3"),
)


@torch.no_grad()
def load_torch_encoder_layer(
    block: EncoderBlock, layer: nn.TransformerEncoderLayer, *, where: str = "layer"
) -> None:
    """Copy an ``nn.TransformerEncoderLayer``'s weights into an :class:`EncoderBlock`."""
    _copy_layer(block, layer, where, _ENCODER_PARTS)


@torch.no_grad()
def load_torch_decoder_layer(
    block: DecoderBlock, layer: nn.TransformerDecoderLayer, *, where: str = "layer"
) -> None:
    """Copy an ``nn.TransformerDecoderLayer``'s weights into a :class:`DecoderBlock`."""
    _copy_layer(block, layer, where, _DECODER_PARTS)


def _copy_layer(
    block: nn.Module, layer: nn.Module, where: str, parts: tuple[tuple[str, str], ...]
) -> None:
    _check_same_kind(block, layer, where)
    for ours, theirs in parts:
        source = layer.get_submodule(theirs)
        copy = _copy_attention if isinstance(source, nn.MultiheadAttention) else _copy_module
        copy(block.get_submodule(ours), source, f"{where}.{theirs}")


def _check_same_kind(block: nn.Module, layer: nn.Module, where: str) -> None:
    if block.norm_first != layer.norm_first:
        raise ValueError(f"{where}: qkv norm_first={block.norm_first}, torch={layer.norm_first}")
    theirs = _torch_activation(layer.activation)
    if theirs != block.feed_forward.activation_name:
        raise ValueError(
            f"{where}: qkv activation={block.feed_forward.activation_name!r}, torch={theirs!r}"
        )


def _torch_activation(activation: object) -> str:
    """PyTorch keeps a layer's activation as a function or a module; name it as qkv does."""
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (
        isinstance(activation, nn.GELU) and activation.approximate == "none"
    ):
        return "gelu"
    if isinstance(activation, nn.GELU) and activation.approximate == "tanh":
        return "gelu_tanh"
    return repr(activation)


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention, where: str) -> None:
    if ours.num_heads != theirs.num_heads or ours.num_kv_heads != ours.num_heads:
        raise ValueError(
            f"{where}: torch has {theirs.num_heads} heads, qkv has {ours.num_heads} "
            f"(with {ours.num_kv_heads} key/value heads)"
        )
    _copy_module(ours, MultiHeadAttention.from_torch(theirs), where)


def _copy_module(ours: nn.Module, theirs: nn.Module, where: str) -> None:
    source = theirs.state_dict()
    target = ours.state_dict()
    if source.keys() != target.keys():
        raise ValueError(
            f"{where}: parameters {sorted(source)} do not match qkv's {sorted(target)}"
        )
    for key, value in source.items():
        if value.shape != target[key].shape:
            raise ValueError(
                f"{where}.{key}: torch shape {tuple(value.shape)} != qkv shape "
                f"{tuple(target[key].shape)}"
            )
    ours.load_state_dict(source)
