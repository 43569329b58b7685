"""Load a Hugging Face Llama, Qwen2 or Mistral folder into qkv's :class:`~qkv.models.lm.DecoderLM`.

The folder holds ``config.json``, ``model.safetensors`` (or shards with
``model.safetensors.index.json``) and ``tokenizer.json``.  The three families are qkv's
``llama`` architecture (RMSNorm, SwiGLU, RoPE, grouped KV heads) and differ in a few
switches, read from the config: Qwen2 biases its Q, K, V projections; Mistral (and Qwen2 with
``use_sliding_window``) attends within a sliding window; Llama may bias every attention
projection (``attention_bias``) and its feed-forward (``mlp_bias``).  RoPE uses the config's
``rope_theta`` and scaling rule (``rope_scaling`` in older files, ``rope_parameters`` in
newer ones): "default", "linear", "dynamic" or "llama3".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from qkv.errors import CheckpointError
from qkv.functional.rope_scaling import ROPE_SCALING_RULES, RopeScaling
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
from .gpt2 import eos_ids

__all__ = ["load_llama", "llama_config_from_hf", "LLAMA_FAMILIES", "LLAMA_NAMES"]

#: model_type values of config.json this loader reads -> how messages name them.
LLAMA_NAMES = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}
LLAMA_FAMILIES = tuple(LLAMA_NAMES)
_REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "max_position_embeddings",
)
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
# Per-block checkpoint names -> qkv names (q, k and v are stacked separately).
_BLOCK_NAMES = {
    "self_attn.o_proj": "self_attention.out_proj",
    "mlp.gate_proj": "feed_forward.gate",
    "mlp.up_proj": "feed_forward.expand",
    "mlp.down_proj": "feed_forward.contract",
    "input_layernorm": "self_attention_norm",
    "post_attention_layernorm": "feed_forward_norm",
}


def llama_config_from_hf(hf: dict[str, Any]) -> LMConfig:
    """The qkv config of a Hugging Face Llama, Qwen2 or Mistral ``config.json``."""
    family = hf.get("model_type")
    if family not in LLAMA_FAMILIES:
        raise CheckpointError(
            f"config.json has model_type={family!r}; load_llama reads {list(LLAMA_FAMILIES)}"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in hf]
    if missing:
        raise CheckpointError(f"config.json lacks {missing}: is this a {family} checkpoint?")
    d_model, num_heads = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or d_model // num_heads
    if head_dim * num_heads != d_model:
        raise CheckpointError(
            f"head_dim={head_dim} x num_attention_heads={num_heads} != hidden_size={d_model}: "
            "qkv's attention needs heads that split the width exactly"
        )
    activation = hf.get("hidden_act", "silu")
    if activation not in _ACTIVATIONS:
        raise CheckpointError(
            f"hidden_act={activation!r} is not supported; known: {sorted(_ACTIVATIONS)}"
        )
    base, scaling = _rope(hf)
    biased = bool(hf.get("attention_bias", False))
    window, layers = _sliding_window(hf, family)
    positions = hf["max_position_embeddings"]
    return architecture_config(
        "llama",
        hf["vocab_size"],
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=hf.get("num_key_value_heads") or num_heads,
        num_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        max_len=positions,
        # "dynamic" RoPE stretches its frequencies past max_position_embeddings
        position_limit=None if scaling.depends_on_length else positions,
        dropout=0.0,
        rope_base=base,
        rope_scaling=scaling,
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        bias=True if family == "qwen2" else biased,
        output_bias=False if family == "qwen2" else biased,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        activation=_ACTIVATIONS[activation],
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        window=window,
        window_layers=layers,
    )


def _rope(hf: dict[str, Any]) -> tuple[float, RopeScaling]:
    """rope_theta and the scaling rule, from ``rope_parameters`` (transformers 5) or
    ``rope_theta`` + ``rope_scaling`` (earlier files)."""
    params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})  # as transformers
    if params and all(isinstance(value, dict) for value in params.values()):
        raise CheckpointError("config.json sets RoPE per layer type; qkv supports one RoPE")
    base = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_SCALING_RULES:
        raise CheckpointError(
            f"config.json asks for RoPE scaling {kind!r}, which qkv does not implement; "
            f"supported: {sorted(ROPE_SCALING_RULES)}"
        )
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise CheckpointError(f"partial_rotary_factor={partial} is not supported (only 1.0)")
    original = params.get("original_max_position_embeddings")
    if kind == "dynamic":  # Hugging Face stretches past max_position_embeddings
        original = hf["max_position_embeddings"]
    scaling = RopeScaling(
        kind=kind,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_len=original if kind in ("dynamic", "llama3") else None,
    )
    return base, scaling


def _sliding_window(hf: dict[str, Any], family: str) -> tuple[int | None, tuple[int, ...] | None]:
    """(window, the blocks that use it) as config.json says; (None, None): full attention."""
    window = hf.get("sliding_window")
    if family == "llama" or window is None:
        return None, None
    if family == "mistral":
        return window, None  # every block
    if not hf.get("use_sliding_window", False):  # qwen2
        return None, None
    types = hf.get("layer_types")
    if types is not None:
        layers = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    else:
        first = hf.get("max_window_layers", hf["num_hidden_layers"])
        layers = list(range(first, hf["num_hidden_layers"]))
    return (window, tuple(layers)) if layers else (None, None)


def load_llama(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """A :class:`DecoderLM` with the weights of a Hugging Face Llama / Qwen2 / Mistral folder, in
    eval mode, and its tokenizer (None when the folder has no tokenizer.json)."""
    folder = Path(path)
    hf = read_config(folder)
    config = llama_config_from_hf(hf)  # refuses another architecture before reading weights
    stored = read_safetensors(folder)
    model = DecoderLM(config)
    dtype = model.token_embedding.weight.dtype
    state = {name: tensor.to(dtype) for name, tensor in _qkv_state_dict(stored, config).items()}
    load_checked(model, state, folder)
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = FolderTokenizer(tokenizer_file) if tokenizer_file.is_file() else None
    check_tokenizer(tokenizer, config.vocab_size, folder)
    family = hf["model_type"]
    return LoadedModel(
        model.to(device).eval(),
        tokenizer,
        LLAMA_NAMES[family],
        family,
        source=str(path),
        folder=True,
        eos_ids=eos_ids(hf),
    )


def _qkv_state_dict(stored: dict[str, Tensor], config: LMConfig) -> dict[str, Tensor]:
    """Rename a Llama-family state dict into DecoderLM's names, Q, K and V stacked."""
    stored = {name.removeprefix("model."): tensor for name, tensor in stored.items()}
    out: dict[str, Tensor] = {}

    def take(name: str) -> Tensor:
        if name not in stored:
            raise CheckpointError(
                f"the weights lack {name!r}: is this a Llama / Qwen2 / Mistral checkpoint?"
            )
        return stored.pop(name)

    biased = {"self_attn.o_proj": config.output_bias}
    biased.update({f"mlp.{name}_proj": config.mlp_bias for name in ("gate", "up", "down")})
    out["token_embedding.weight"] = take("embed_tokens.weight")
    out["final_norm.weight"] = take("norm.weight")
    for i in range(config.num_layers):
        ours, theirs = f"blocks.{i}.", f"layers.{i}."
        projections = [f"{theirs}self_attn.{p}_proj" for p in "qkv"]
        out[f"{ours}self_attention.in_proj_weight"] = torch.cat(
            [take(f"{name}.weight") for name in projections]
        )  # (D + 2 Hkv Dh, D): W_Q, W_K, W_V stacked, as MultiHeadAttention stores them
        if config.bias:
            biases = [take(f"{name}.bias") for name in projections]
            out[f"{ours}self_attention.in_proj_bias"] = torch.cat(biases)
        for their_name, our_name in _BLOCK_NAMES.items():
            out[f"{ours}{our_name}.weight"] = take(f"{theirs}{their_name}.weight")
            if biased.get(their_name, False):  # RMSNorms have no bias
                out[f"{ours}{our_name}.bias"] = take(f"{theirs}{their_name}.bias")
    return finish_lm_state_dict(
        stored,
        out,
        tie_embeddings=config.tie_embeddings,
        ignored=("rotary_emb.inv_freq",),
        lacking="the weights have",
        holding="the weights hold",
    )
