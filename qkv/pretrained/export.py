"""Write a qkv language model as a Hugging Face folder that ``transformers`` loads.

``export_hf(model, out)`` picks the transformers architecture whose computation is exactly
the model's, from the components its :class:`~qkv.models.lm_config.LMConfig` names:

    gpt       (LayerNorm, GELU/ReLU MLP, learned positions, biases)   -> GPT-2
    llama     (RMSNorm, SwiGLU, RoPE, no biases or Llama's)           -> Llama
              + a window on every layer                               -> Mistral
              + a window on some layers, or Qwen2's Q/K/V biases      -> Qwen2
    nanochat  (weightless RMSNorm, ReLU^2, RoPE, QK-norm, soft-cap)   -> NanoChat

and writes ``config.json`` and ``model.safetensors`` (plus ``tokenizer.json`` when the
tokenizer is a Hugging Face ``tokenizers`` one).  ``AutoModelForCausalLM.from_pretrained``
then gives the same logits as qkv.  A component that no transformers architecture has
(packed-document attention, QK-norm without nanochat's other parts, ...) is refused with one
line naming it, before anything is written.  The folder appears whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from qkv.errors import InputError
from qkv.models.lm import DecoderLM
from qkv.models.lm_config import LMConfig

__all__ = ["export_hf", "hf_architecture"]

_GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def hf_architecture(config: LMConfig) -> str:
    """The transformers model_type that computes exactly what ``config`` does ("gpt2",
    "llama", "mistral", "qwen2", "nanochat"); InputError naming the first component that
    none of them has."""
    _refuse(config.document_start is not None, "packed-document attention (pack=True)")
    _refuse(not config.norm_first, "post-norm blocks (norm_first=False)")
    if config.norm == "layer":
        _needs(config, "GPT-2", positions="learned", feed_forward="mlp", bias=True)
        _needs(config, "GPT-2", qk_norm=False, embedding_norm=False, logit_softcap=None)
        _refuse(config.activation not in _GPT2_ACTIVATIONS, f"activation {config.activation!r}")
        _refuse(config.num_kv_heads != config.num_heads, "grouped KV heads in GPT-2's layout")
        _refuse(config.window is not None, "a sliding window in GPT-2's layout")
        _refuse(_biased(config.output_bias, config) is False, "output_bias=False with bias")
        _refuse(_biased(config.mlp_bias, config) is False, "mlp_bias=False with bias")
        return "gpt2"
    if config.norm == "rms_free":
        _needs(config, "NanoChat", positions="rope", feed_forward="mlp", activation="relu2")
        _needs(config, "NanoChat", qk_norm=True, embedding_norm=True, window=None)
        _refuse(_biased(config.mlp_bias, config), "MLP biases in nanochat's layout")
        _refuse(
            _biased(config.output_bias, config) != config.bias,
            "an attention output bias that differs from the Q/K/V ones in nanochat's layout",
        )
        _refuse(config.rope_scaling.kind != "default", "RoPE scaling in nanochat's layout")
        return "nanochat"
    _needs(config, "Llama", norm="rms", positions="rope", feed_forward="gated")
    _needs(config, "Llama", qk_norm=False, embedding_norm=False, logit_softcap=None)
    output_bias = _biased(config.output_bias, config)
    if config.window is not None and config.window_layers is not None:
        # Qwen2 windows any set of layers; its Q/K/V biases (zeros when qkv has none) and
        # its unbiased output projection are exact for this model
        _refuse(output_bias, "an attention output bias with windows on some layers only")
        _refuse(_biased(config.mlp_bias, config), "MLP biases with windows on some layers only")
        return "qwen2"
    if config.bias and not output_bias:
        _refuse(_biased(config.mlp_bias, config), "MLP biases with Qwen2's attention biases")
        _refuse(config.window is not None, "Qwen2's attention biases with a window on all layers")
        return "qwen2"
    _refuse(config.bias != output_bias, "an attention output bias without Q/K/V biases")
    if config.window is not None:
        _refuse(config.bias or _biased(config.mlp_bias, config), "biases in Mistral's layout")
        return "mistral"
    return "llama"


def export_hf(model: DecoderLM, out: str | Path, *, tokenizer: Any = None) -> Path:
    """Write ``model`` (and ``tokenizer`` when it wraps a Hugging Face ``tokenizers`` one)
    as a transformers folder at ``out``; returns the folder.  ``out`` must not exist or be
    empty.  See the module's docstring for the architectures."""
    if not isinstance(model, DecoderLM):
        raise InputError(f"export_hf takes a DecoderLM, got {type(model).__name__}")
    config = model.config
    family = hf_architecture(config)
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(
            f"out={str(folder)!r} already exists and is not an empty folder: choose a new one",
            fields=("out",),
        )
    hf_config, tensors = _WRITERS[family](config, model.state_dict())
    hf_config.update(model_type=family, torch_dtype="float32", vocab_size=config.vocab_size)
    hf_tokenizer = getattr(tokenizer, "_tokenizer", None)
    parent = folder.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=parent))
    try:
        from safetensors.torch import save_file

        tensors = {
            name: t.detach().to("cpu", torch.float32).contiguous() for name, t in tensors.items()
        }
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
        text = json.dumps(hf_config, indent=2, sort_keys=True) + "\n"
        (staging / "config.json").write_text(text, encoding="utf-8")
        if hf_tokenizer is not None and hasattr(hf_tokenizer, "to_str"):
            (staging / "tokenizer.json").write_text(hf_tokenizer.to_str(), encoding="utf-8")
        if folder.exists():
            folder.rmdir()
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def _gpt2(config: LMConfig, state: dict[str, Tensor]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    hf = dict(
        architectures=["GPT2LMHeadModel"],
        n_embd=config.d_model,
        n_head=config.num_heads,
        n_layer=config.num_layers,
        n_inner=config.d_ff,
        n_positions=config.max_len,
        activation_function=_GPT2_ACTIVATIONS[config.activation],
        layer_norm_epsilon=config.norm_eps,
        tie_word_embeddings=config.tie_embeddings,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    out = {
        "transformer.wte.weight": state["token_embedding.weight"],
        "transformer.wpe.weight": state["positions.embedding.weight"],
        "transformer.ln_f.weight": state["final_norm.weight"],
        "transformer.ln_f.bias": state["final_norm.bias"],
    }
    conv1d = {  # qkv name -> GPT-2's Conv1D (weights stored (in, out): transposed)
        "self_attention.in_proj": "attn.c_attn",
        "self_attention.out_proj": "attn.c_proj",
        "feed_forward.expand": "mlp.c_fc",
        "feed_forward.contract": "mlp.c_proj",
    }
    norms = {"self_attention_norm": "ln_1", "feed_forward_norm": "ln_2"}
    for i in range(config.num_layers):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for name, hf_name in conv1d.items():
            weight = state[
                f"{ours}{name}.weight" if "in_proj" not in name else f"{ours}{name}_weight"
            ]
            bias = state[f"{ours}{name}.bias" if "in_proj" not in name else f"{ours}{name}_bias"]
            out[f"{theirs}{hf_name}.weight"] = weight.t()
            out[f"{theirs}{hf_name}.bias"] = bias
        for name, hf_name in norms.items():
            out[f"{theirs}{hf_name}.weight"] = state[f"{ours}{name}.weight"]
            out[f"{theirs}{hf_name}.bias"] = state[f"{ours}{name}.bias"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    return hf, out


def _rope(config: LMConfig) -> dict[str, Any]:
    scaling = config.rope_scaling
    params: dict[str, Any] = {"rope_type": scaling.kind, "rope_theta": config.rope_base}
    if scaling.kind != "default":
        params["factor"] = scaling.factor
    if scaling.kind == "llama3":
        params.update(
            low_freq_factor=scaling.low_freq_factor,
            high_freq_factor=scaling.high_freq_factor,
            original_max_position_embeddings=scaling.original_max_len,
        )
    return params


def _decoder_layers(
    config: LMConfig, state: dict[str, Tensor], mlp: dict[str, str], *, qkv_bias: bool
) -> dict[str, Tensor]:
    """The Llama-style layer tensors every RoPE family shares: q/k/v/o and the MLP."""
    out = {"model.embed_tokens.weight": state["token_embedding.weight"]}
    width = config.num_kv_heads * config.head_dim
    for i in range(config.num_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        attention = f"{ours}self_attention."
        q, k, v = state[attention + "in_proj_weight"].split([config.d_model, width, width])
        out.update({f"{theirs}self_attn.{n}_proj.weight": w for n, w in zip("qkv", (q, k, v))})
        stored = state.get(attention + "in_proj_bias")
        if qkv_bias:  # zeros where qkv has none (Qwen2 always biases Q, K and V)
            biases = torch.zeros(config.d_model + 2 * width) if stored is None else stored
            split = biases.split([config.d_model, width, width])
            out.update({f"{theirs}self_attn.{n}_proj.bias": b for n, b in zip("qkv", split)})
        out[f"{theirs}self_attn.o_proj.weight"] = state[attention + "out_proj.weight"]
        if attention + "out_proj.bias" in state:
            out[f"{theirs}self_attn.o_proj.bias"] = state[attention + "out_proj.bias"]
        for ours_name, hf_name in mlp.items():
            for part in ("weight", "bias"):
                if f"{ours}feed_forward.{ours_name}.{part}" in state:
                    tensor = state[f"{ours}feed_forward.{ours_name}.{part}"]
                    out[f"{theirs}mlp.{hf_name}.{part}"] = tensor
        for ours_name, hf_name in (
            ("self_attention_norm", "input_layernorm"),
            ("feed_forward_norm", "post_attention_layernorm"),
        ):
            if f"{ours}{ours_name}.weight" in state:  # a weightless RMSNorm has none
                out[f"{theirs}{hf_name}.weight"] = state[f"{ours}{ours_name}.weight"]
    if "final_norm.weight" in state:
        out["model.norm.weight"] = state["final_norm.weight"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    return out


def _rope_family(config: LMConfig) -> dict[str, Any]:
    return dict(
        hidden_size=config.d_model,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        num_hidden_layers=config.num_layers,
        intermediate_size=config.d_ff,
        max_position_embeddings=config.position_limit or config.max_len,
        rms_norm_eps=config.norm_eps,
        hidden_act=config.activation,
        rope_parameters=_rope(config),
        tie_word_embeddings=config.tie_embeddings,
        attention_dropout=0.0,
        head_dim=config.head_dim,
    )


_LLAMA_MLP = {"gate": "gate_proj", "expand": "up_proj", "contract": "down_proj"}


def _llama(config: LMConfig, state: dict[str, Tensor]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    hf = dict(
        _rope_family(config),
        architectures=["LlamaForCausalLM"],
        attention_bias=config.bias,
        mlp_bias=bool(_biased(config.mlp_bias, config)),
    )
    return hf, _decoder_layers(config, state, _LLAMA_MLP, qkv_bias=config.bias)


def _mistral(
    config: LMConfig, state: dict[str, Tensor]
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    hf = dict(_rope_family(config), architectures=["MistralForCausalLM"])
    hf["sliding_window"] = config.window
    return hf, _decoder_layers(config, state, _LLAMA_MLP, qkv_bias=False)


def _qwen2(config: LMConfig, state: dict[str, Tensor]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    windows = config.windows
    hf = dict(
        _rope_family(config),
        architectures=["Qwen2ForCausalLM"],
        use_sliding_window=config.window is not None,
        sliding_window=config.window,
        max_window_layers=config.num_layers,
        layer_types=[
            "full_attention" if window is None else "sliding_attention" for window in windows
        ],
    )
    return hf, _decoder_layers(config, state, _LLAMA_MLP, qkv_bias=True)


def _nanochat(
    config: LMConfig, state: dict[str, Tensor]
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    hf = dict(
        _rope_family(config),
        architectures=["NanoChatForCausalLM"],
        final_logit_softcapping=config.logit_softcap,
        attention_bias=config.bias,
    )
    out = _decoder_layers(config, state, {"expand": "fc1", "contract": "fc2"}, qkv_bias=config.bias)
    # nanochat rotates by -theta (its rotate_half is (x2, -x1)): R(-theta) = P R(theta) P, P
    # negating the second half of each head; the weightless QK-norm commutes with P and P
    # cancels in q . k, so negating those rows of W_Q and W_K (and their biases) is exact.
    half = config.head_dim // 2
    for name in list(out):
        if name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")):
            tensor = out[name].clone()
            heads = tensor.view(-1, config.head_dim, *tensor.shape[1:])  # (heads, Dh, ...)
            heads[:, half:] = -heads[:, half:]
            out[name] = tensor
    return hf, out


_WRITERS: dict[str, Callable[[LMConfig, dict[str, Tensor]], tuple[dict, dict[str, Tensor]]]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "nanochat": _nanochat,
}


def _biased(value: bool | None, config: LMConfig) -> bool:
    return config.bias if value is None else value


def _refuse(condition: bool, what: str) -> None:
    if condition:
        raise InputError(
            f"no transformers architecture has {what}: this model cannot be exported to a "
            "Hugging Face folder (export takes qkv's gpt, llama and nanochat layouts)"
        )


def _needs(config: LMConfig, family: str, **choices: Any) -> None:
    for name, value in choices.items():
        _refuse(
            getattr(config, name) != value,
            f"{family}'s layout with {name}={getattr(config, name)!r}",
        )
