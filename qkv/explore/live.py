"""Live pages: the model's weights and a forward pass written for the page, so a learner types
an input and the page recomputes the output and every attention in the browser, offline.

A family that runs live says so in its explorer adapter (``ExplorerAdapter.live``: the name of
its script, ``script/live/<name>.js``, and ``live_config``: the facts that script reads); this
module packs what every family shares: the weights, keyed by their ``state_dict`` names, as
one base64 string of little-endian float32 numbers (a tensor that two names share, such as a
tied output matrix, is stored once), and the tokenizer, as data the page's script reads
(``script/live/common.js``).

The page's entry (``data["live"]``, docs/explorer.md)::

    {"family": "transformer", "config": {...}, "tokenizer": {"kind": "char", ...},
     "tensors": {name: [offset, shape]}, "weights": "<base64>", "mb": 2.1}

Float32, not float16: the page's weights must give PyTorch's float32 attention to 1e-4, and
rounding the weights of the ``dates``-sized Transformer to float16 moved its attention by up
to 2.6e-4 and its logits by up to 1.6e-3 (a random-weight model, a 30-token input).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch
from torch import nn

from qkv.data import SPECIAL_TOKENS
from qkv.errors import InputError

from .registry import explorer_for

__all__ = ["LIVE_MAX_MB", "live_entry", "add_live", "pack_tensors", "tokenizer_spec"]

#: The most megabytes of weights (as float32) a live page embeds by default; a larger model
#: gets a static page and one line saying why (``qkv explore --live-max-mb``).  The page grows
#: by 4/3 of this (base64); benchmarks/live_page.py times opening such pages.
LIVE_MAX_MB = 25.0


def _distinct(tensors: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """Per floating-point tensor the key of the numbers it holds (storage, offset, shape):
    names that share one storage (tied weights) share a key."""
    return {
        name: (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        for name, tensor in tensors.items()
        if tensor.is_floating_point()
    }


def pack_tensors(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, list], str]:
    """Every floating-point tensor of a ``state_dict`` as float32 in one base64 string, and
    per name its [offset (in numbers), shape]; names that share one storage (tied weights)
    point at the same numbers."""
    index: dict[str, list] = {}
    parts: list[np.ndarray] = []
    seen: dict[tuple, int] = {}
    offset = 0
    for name, key in _distinct(tensors).items():
        tensor = tensors[name]
        if key not in seen:
            array = tensor.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4")
            seen[key] = offset
            parts.append(array.reshape(-1))
            offset += array.size
        index[name] = [seen[key], list(tensor.shape)]
    data = np.concatenate(parts) if parts else np.zeros(0, dtype="<f4")
    return index, base64.b64encode(data.tobytes()).decode("ascii")


def tokenizer_spec(tokenizer: Any) -> dict[str, Any]:
    """What the page's tokenizer (``script/live/common.js``) needs: a character tokenizer's
    alphabet; a word tokenizer's words (``qkv.data.WordTokenizer``: text split at whitespace,
    as Python's ``str.split`` does); a BPE tokenizer's vocabulary and merges (Hugging Face's ``tokenizers`` model,
    metaspace or byte-level).  Raises InputError for any other tokenizer."""
    kind = getattr(tokenizer, "kind", None)
    specials = list(SPECIAL_TOKENS)
    if kind == "char":
        return {"kind": "char", "alphabet": list(tokenizer.alphabet), "specials": specials}
    if kind == "words" and hasattr(tokenizer, "words"):
        return {"kind": "words", "words": list(tokenizer.words), "specials": specials}
    if kind in ("bpe", "bytebpe") and hasattr(tokenizer, "_state"):
        state = tokenizer._state()["tokenizer"]  # what Tokenizer.save writes: HF's JSON
        model = state["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        pre = state.get("pre_tokenizer") or {}
        return {
            "kind": kind,
            "vocab": model["vocab"],
            "merges": merges,
            "unk": model.get("unk_token"),
            "prepend": pre.get("prepend_scheme", "always") if kind == "bpe" else None,
            "specials": specials,
        }
    raise InputError(
        f"a live page types text through the model's tokenizer in JavaScript; qkv's char, words, "
        f"bpe and bytebpe tokenizers run there, not {type(tokenizer).__name__}: write a static "
        "page (without --live)"
    )


def live_entry(model: nn.Module, tokenizer: Any) -> dict[str, Any]:
    """The page's ``live`` entry for ``model`` (docs/explorer.md): its family's script and
    facts, the tokenizer and the weights.  InputError for a family without a live forward
    pass or a tokenizer the page cannot run."""
    model_type, adapter = explorer_for(model)
    if adapter.live is None:
        raise InputError(
            f"a {model_type!r} model has no live forward pass in the page (the Transformer and "
            "RNN translators and the language model have one): write a static page"
        )
    config = adapter.live_config(model)
    spec = tokenizer_spec(tokenizer)
    tensors, weights = pack_tensors(model.state_dict())
    return {
        "family": adapter.live,
        "config": config,
        "tokenizer": spec,
        "tensors": tensors,
        "weights": weights,
        "mb": round(len(weights) * 3 / 4 / 2**20, 3),
    }


def weight_megabytes(model: nn.Module) -> float:
    """The model's distinct floating-point weights as float32, in MB (2^20 bytes)."""
    state = model.state_dict()
    distinct = {key: name for name, key in _distinct(state).items()}
    return sum(state[name].numel() * 4 for name in distinct.values()) / 2**20


def add_live(
    data: dict[str, Any], model: nn.Module, tokenizer: Any, *, max_mb: float = LIVE_MAX_MB
) -> str | None:
    """Make ``data`` (from :func:`qkv.explore.explore`) a live page: adds ``data["live"]``
    and returns None; or, for a model whose weights exceed ``max_mb`` megabytes, leaves the
    page static and returns the one line that says why (the caller prints it)."""
    if not max_mb > 0:
        raise InputError(f"live_max_mb={max_mb} must be a positive number of megabytes")
    size = weight_megabytes(model)
    if size > max_mb:
        return (
            f"live page: the model's weights take {size:.1f} MB, over --live-max-mb "
            f"{max_mb:g}; wrote a static page (raise --live-max-mb to embed them)"
        )
    data["live"] = live_entry(model, tokenizer)
    return None
