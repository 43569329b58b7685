"""Load a Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer.json) into qkv.

The network is qkv's own :class:`~qkv.models.lm.DecoderLM` as the ``gpt`` architecture builds
it (pre-LN blocks, learned positions, tied embeddings, tanh-approximated GELU); only the
weights come from the folder,
mapped name by name.  GPT-2 keeps its projections in ``Conv1D`` layers, whose weights are
stored (in, out), the transpose of ``nn.Linear``'s; its attention input projection
``c_attn`` holds Q, K and V side by side and is cut into qkv's three projections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from qkv.data.tokenizers import register_tokenizer
from qkv.errors import CheckpointError
from qkv.models.lm import DecoderLM
from qkv.models.lm_builders import architecture_config
from qkv.models.lm_config import LMConfig
from qkv.models.loaded import LoadedModel

from .files import (
    FolderTokenizer,
    check_tokenizer,
    finish_lm_state_dict,
    load_checked,
    read_config,
    read_safetensors,
)

__all__ = ["load_gpt2", "gpt2_config_from_hf", "GPT2Tokenizer"]

_REQUIRED_KEYS = ("vocab_size", "n_embd", "n_head", "n_layer", "n_positions")
# Hugging Face activation names -> qkv's FeedForward activations.
_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
# Options of GPT2Config that change the computation and that qkv does not implement.
_UNSUPPORTED = {
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "scale_attn_weights": True,
}
# Per-block checkpoint names -> qkv names; Conv1D weights are transposed on the way.
_BLOCK_NAMES = {
    "ln_1": "self_attention_norm",
    "attn.c_proj": "self_attention.out_proj",
    "ln_2": "feed_forward_norm",
    "mlp.c_fc": "feed_forward.expand",
    "mlp.c_proj": "feed_forward.contract",
}
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def eos_ids(hf: dict[str, Any]) -> tuple[int, ...]:
    """config.json's ``eos_token_id`` (one id, a list of them, or none) as a tuple."""
    found = hf.get("eos_token_id")
    found = [found] if isinstance(found, int) else found or []
    return tuple(i for i in found if isinstance(i, int) and 0 <= i < hf["vocab_size"])


class GPT2Tokenizer(FolderTokenizer):
    """GPT-2's byte-level BPE from its ``tokenizer.json`` (Hugging Face ``tokenizers``); no
    special tokens are added to a text."""

    kind = "gpt2"

    def __init__(self, path: str | Path):
        super().__init__(path, add_special_tokens=False)


register_tokenizer(GPT2Tokenizer)


def gpt2_config_from_hf(hf: dict[str, Any]) -> LMConfig:
    """The qkv config of a Hugging Face GPT-2 ``config.json`` (dropout 0: for inference)."""
    missing = [key for key in _REQUIRED_KEYS if key not in hf]
    if missing:
        raise CheckpointError(f"config.json lacks {missing}: is this a GPT-2 checkpoint?")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise CheckpointError(
            f"activation_function={activation!r} is not supported; known: {sorted(_ACTIVATIONS)}"
        )
    for key, expected in _UNSUPPORTED.items():
        if hf.get(key, expected) != expected:
            raise CheckpointError(f"{key}={hf[key]!r} is not supported by qkv's GPT-2 loader")
    d_model = hf["n_embd"]
    return architecture_config(
        "gpt",
        hf["vocab_size"],
        d_model=d_model,
        num_heads=hf["n_head"],
        num_layers=hf["n_layer"],
        d_ff=hf.get("n_inner") or 4 * d_model,
        max_len=hf["n_positions"],
        dropout=0.0,
        activation=_ACTIVATIONS[activation],
        tie_embeddings=hf.get("tie_word_embeddings", True),
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
    )


def load_gpt2(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """A :class:`DecoderLM` with the weights of a Hugging Face GPT-2 folder, in eval mode,
    and its tokenizer (None when the folder has no tokenizer.json), with config.json's
    eos_token_id: what ``qkv.tasks.lm.generate_text`` takes."""
    folder = Path(path)
    hf = read_config(folder)
    config = gpt2_config_from_hf(hf)
    stored = read_safetensors(folder)  # model.safetensors, or shards and their index
    model = load_checked(DecoderLM(config), _qkv_state_dict(stored, config), folder)
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = GPT2Tokenizer(tokenizer_file) if tokenizer_file.is_file() else None
    check_tokenizer(tokenizer, config.vocab_size, folder)
    return LoadedModel(
        model.to(device).eval(),
        tokenizer,
        "GPT-2",
        "gpt2",
        source=str(path),
        folder=True,
        eos_ids=eos_ids(hf),
    )


def _qkv_state_dict(stored: dict[str, Tensor], config: LMConfig) -> dict[str, Tensor]:
    """Rename (and cut, and transpose) a GPT-2 state dict into DecoderLM's names."""
    stored = {_strip(name): tensor for name, tensor in stored.items()}
    out: dict[str, Tensor] = {}

    def take(name: str) -> Tensor:
        if name not in stored:
            raise CheckpointError(f"model.safetensors lacks {name!r}: is this a GPT-2 checkpoint?")
        return stored.pop(name)

    out["token_embedding.weight"] = take("wte.weight")
    out["positions.embedding.weight"] = take("wpe.weight")
    out["final_norm.weight"], out["final_norm.bias"] = take("ln_f.weight"), take("ln_f.bias")
    for i in range(config.num_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        # (D, 3D) Conv1D -> (3D, D): Q, K, V stacked, as qkv stores them
        weight = take(theirs + "attn.c_attn.weight").t().contiguous()
        out[f"{ours}self_attention.in_proj_weight"] = weight
        out[f"{ours}self_attention.in_proj_bias"] = take(theirs + "attn.c_attn.bias")
        for their_name, our_name in _BLOCK_NAMES.items():
            weight = take(f"{theirs}{their_name}.weight")
            out[f"{ours}{our_name}.weight"] = (
                weight.t().contiguous() if their_name in _CONV1D else weight
            )
            out[f"{ours}{our_name}.bias"] = take(f"{theirs}{their_name}.bias")
    return finish_lm_state_dict(
        stored,
        out,
        tie_embeddings=config.tie_embeddings,
        ignored=("attn.bias", "attn.masked_bias"),
        lacking="the folder has",
        holding="model.safetensors holds",
    )


def _strip(name: str) -> str:
    return name.removeprefix("transformer.")
