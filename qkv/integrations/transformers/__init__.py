"""qkv as a Hugging Face ``transformers`` attention backend: ``attn_implementation="qkv"``.

    from qkv.integrations.transformers import register
    register()
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="qkv")

:func:`register` adds qkv's attention function to transformers' ``AttentionInterface`` and
its mask function to ``AttentionMaskInterface`` (without a mask function transformers builds
no mask at all for a new implementation).  Every layer that calls the interface then runs on
qkv: plain causal and padded attention on PyTorch's fused kernel, sliding windows, packed
documents, soft-capping and sinks on qkv's block-skipping flex kernel (which trains on the
CPU), and ``output_attentions=True`` weights written once.  :func:`enable` switches a model
that is already loaded, after checking that its attention layers use the interface.

transformers is an optional extra (``pip install -e ".[hf]"``); ``import qkv`` never
imports it.
"""

from __future__ import annotations

import functools
import inspect
import re
import warnings

import torch

from ...errors import InputError, MissingDependencyError
from .attention import attention_forward
from .masks import BLOCK_SIZE, PatternMask, pattern_mask

__all__ = [
    "register",
    "enable",
    "check_model",
    "attention_forward",
    "pattern_mask",
    "PatternMask",
    "NAME",
]

#: The name models pass as ``attn_implementation``.
NAME = "qkv"


def register(*, block_size: int = BLOCK_SIZE) -> None:
    """Make ``attn_implementation="qkv"`` available to every transformers model.

    ``block_size``: the tile (query rows and keys) of the block masks the flex kernel skips
    by; smaller tiles skip more of a narrow window at more Python overhead per tile.
    Calling it again replaces the registration (e.g. with another block size).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"block_size={block_size!r} must be a positive int, e.g. {BLOCK_SIZE}")
    transformers = _import_transformers()
    transformers.AttentionInterface.register(NAME, attention_forward)
    transformers.AttentionMaskInterface.register(
        NAME, functools.partial(pattern_mask, block_size=block_size)
    )


def enable(model: torch.nn.Module) -> torch.nn.Module:
    """Switch a loaded transformers model to qkv's attention and return it.

    Registers qkv if needed, then checks (:func:`check_model`) that the model's attention
    layers call the interface -- a model whose layers compute attention themselves would
    otherwise ignore the switch in silence.
    """
    if not (hasattr(model, "set_attn_implementation") and hasattr(model, "config")):
        raise InputError(
            f"enable() takes a transformers model (a PreTrainedModel), got {type(model).__name__}"
        )
    _import_transformers()
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if NAME not in ALL_ATTENTION_FUNCTIONS.valid_keys():
        register()
    check_model(model)
    model.set_attn_implementation(NAME)
    return model


def check_model(model: torch.nn.Module) -> None:
    """Raise :class:`~qkv.errors.InputError` if no attention layer of ``model`` calls
    transformers' attention interface (the model then ignores ``attn_implementation``;
    its "eager"/"sdpa" implementations remain what runs it).  Warn, naming them, when only
    some layers compute attention themselves: those keep doing so, the rest run on qkv."""
    classes = {type(m) for m in model.modules()}
    using = sorted(cls.__name__ for cls in classes if _attention_kind(cls) == "interface")
    bypassing = sorted(cls.__name__ for cls in classes if _attention_kind(cls) == "own")
    if not using:
        own = f" (its {', '.join(bypassing)} compute attention themselves)" if bypassing else ""
        raise InputError(
            f"{type(model).__name__} has no attention layer that calls transformers' attention "
            f"interface{own}, so attn_implementation='qkv' cannot reach it; its 'eager'/'sdpa' "
            "implementations remain available"
        )
    if bypassing:
        warnings.warn(
            f"{type(model).__name__}: its layers {', '.join(bypassing)} compute attention "
            f"themselves and keep doing so; its other attention layers ({', '.join(using)}) "
            "run on qkv",
            stacklevel=2,
        )


_COMPUTES_ATTENTION = re.compile(r"softmax\(|scaled_dot_product_attention\(|baddbmm\(")


@functools.cache
def _attention_kind(cls: type) -> str | None:
    """How a transformers layer class attends: "interface" (it calls the attention
    interface), "own" (a softmax over scores or a fused attention call of its own), or None
    (not an attention layer, or a wrapper holding one)."""
    if "Attention" not in cls.__name__ or not cls.__module__.startswith("transformers.models."):
        return None
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return None
    if "ALL_ATTENTION_FUNCTIONS" in source or "attention_interface" in source:
        return "interface"
    return "own" if _COMPUTES_ATTENTION.search(source) else None


def _import_transformers():
    try:
        import transformers
    except ImportError as error:
        raise MissingDependencyError(
            'attn_implementation="qkv" needs Hugging Face transformers: '
            'pip install -e ".[hf]" (or pip install "transformers>=4.56")'
        ) from error
    mask_interface = getattr(transformers, "AttentionMaskInterface", None)
    sdpa_mask = mask_interface._global_mapping.get("sdpa") if mask_interface else None
    if sdpa_mask is None or "q_length" not in inspect.signature(sdpa_mask).parameters:
        raise MissingDependencyError(
            f"transformers {transformers.__version__} predates the mask interface qkv plugs "
            f'into (masks sized by q_length, transformers 5.4): pip install -e ".[hf]"'
        )
    return transformers
