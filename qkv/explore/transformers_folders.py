"""Any Hugging Face folder that ``transformers`` loads, on the explorer, with its attention
computed by qkv: the model is loaded with ``from_pretrained(folder, attn_implementation="qkv")``
(after :func:`qkv.integrations.transformers.register`) and run with
``output_attentions=True``, so every attention layer that goes through transformers'
``AttentionInterface`` returns the weights qkv computed once.

One concept, one module (about 900 lines): reading a transformers folder for the explorer --
loading it, finding its kind, capturing its attention through the "qkv" implementation and
turning it into the explorer's views -- which its kinds of page share; split, each part
would reach back into the others' loading and capture.  The dual encoders' page (CLIP,
SigLIP: two towers and their similarity) builds on these parts in ``dual_encoders``.

The folder's family decides the page (each a small wrapper class, so that the explorer's
registry finds its adapter as it finds qkv's own models):

- **encoder** (BERT, RoBERTa, ModernBERT, ...): bidirectional self-attention per layer and
  head, the mean and the rollout; tokens from the folder's tokenizer (``AutoTokenizer``).
- **decoder** (GPT-2, Llama, Qwen2, Mistral, Gemma 2/3, ...): causal self-attention of the
  prompt, or of the prompt and ``generate`` tokens after it, with the per-layer sliding
  windows and the induction score; above ``DENSE_TOKENS`` tokens the page stores q and k
  and computes the weights itself, as for qkv's language models (where the layer's weights
  are softmax(q.k * scale) over its window, which is checked; otherwise one clear error).
- **encoder-decoder** (BART, T5, T5Gemma, ...): the encoder's self-attention, the decoder's
  causal self-attention and the decoder -> encoder cross-attention as three views, the
  decoder reading its greedy (or beam) output of the source, or the text given
  (``targets``).
- **vision** (ViT, DeiT, CLIP's vision model, ...): an image file per input, prepared by
  the folder's ``AutoImageProcessor``; the patches' self-attention, drawn over the picture
  the model saw (each query patch's weights over the patch grid).
- **dual encoder** (a whole CLIP, SigLIP, ...: transformers' zero-shot image classification
  models): texts and image files together, each tower's self-attention on its own inputs
  and the similarity of every image to every text (``qkv.explore.dual_encoders``).

transformers is imported only when such a folder is opened (``pip install -e ".[hf]"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from qkv.errors import CheckpointError, InputError, QkvError
from qkv.models import LoadedModel

from .compact import DENSE_TOKENS, compact_view, kept_keys
from .decoders import TRANSFORMER_PAGE
from .language import INDUCTION_LENGTH, LM_PAGE
from .registry import ExplorerAdapter, ExploreRequest, PageKind, register_explorer
from .vectors import page_vectors
from .views import (
    ENCODER_PAGE,
    VIEW_TITLES,
    attention_view,
    decoded_text,
    png_data_uri,
    self_attention_entry,
    seq2seq_views,
    with_rollout,
)

__all__ = [
    "TransformersFolder",
    "TextTokenizer",
    "load_transformers_folder",
    "folder_attention",
    "IMAGE_SUFFIXES",
    "image_entry",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: What the errors name as supported (the design is the interface, not this list).
SUPPORTED = (
    "text and vision models whose attention layers call transformers' attention interface "
    "(e.g. BERT, RoBERTa, ModernBERT, GPT-2, Llama, Qwen2, Mistral, Gemma 2/3, BART, T5, "
    "ViT, CLIP and SigLIP)"
)
#: How far the page's weights, computed from float16 q and k, may differ from the model's
#: before a long input is refused (the rounding alone stays near 1e-3).
COMPACT_TOLERANCE = 2e-2


class TransformersFolder(nn.Module):
    """A transformers model (``hf``, eval mode) and what the explorer needs beside it."""

    family = ""

    def __init__(self, hf: nn.Module, *, architecture: str, processor: Any = None):
        super().__init__()
        self.hf = hf
        self.architecture = architecture
        self.processor = processor  # vision: the folder's AutoImageProcessor

    @property
    def implementation(self) -> str:
        return f"transformers {self.architecture} through qkv's attention"

    def text_tower(self) -> nn.Module:
        """The part of the model that reads the tokens (its learned positions limit them)."""
        return self.hf


class TransformersEncoder(TransformersFolder):
    family = "encoder"


class TransformersDecoder(TransformersFolder):
    family = "decoder"


class TransformersSeq2Seq(TransformersFolder):
    family = "encoder-decoder"


class TransformersVision(TransformersFolder):
    family = "vision"


class TransformersDualEncoder(TransformersFolder):
    """A text tower and a vision tower whose embeddings the model compares (CLIP, SigLIP):
    its tokenizer reads the texts, ``processor`` (the AutoImageProcessor) the images."""

    family = "dual-encoder"

    def text_tower(self) -> nn.Module:
        return getattr(self.hf, "text_model", self.hf)


class TextTokenizer:
    """A folder's ``AutoTokenizer`` as the explorer reads tokenizers: ``encode`` (with the
    special tokens the folder's tokenizer adds), ``tokens`` (one label per id: the piece as
    written, or a byte-level piece decoded when it is whole characters) and ``decode``."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = getattr(backend, "decoder", None)
        self._byte_level = type(decoder).__name__ == "ByteLevel"

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, ids) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def tokens(self, ids) -> list[str]:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        labels = []
        for i, piece in zip(ids, self.tokenizer.convert_ids_to_tokens(ids), strict=True):
            if self._byte_level:
                text = self.tokenizer.decode([i], skip_special_tokens=False)
                piece = text if text and "\ufffd" not in text else piece
            labels.append(piece if piece is not None else f"<{i}>")
        return labels


# -- loading -------------------------------------------------------------------------------


def load_transformers_folder(
    folder: Path, *, device: str | torch.device = "cpu", model_type: str = ""
) -> LoadedModel:
    """The folder as a loaded model: a :class:`TransformersFolder` on ``device``, named by
    transformers' class, its tokenizer (None for a vision model, whose processor the model
    holds) and its end tokens; ``model_type``: config.json's.  Or one clear error: no transformers, a folder it cannot load, attention that bypasses the
    interface, a text-and-vision model that is not a dual encoder.

    The family comes from transformers' own tables: an encoder-decoder config, a causal-LM
    architecture that is not also a masked LM (a decoder), a zero-shot image classifier (a
    dual encoder), else ``AutoModel`` (a vision model where its input is ``pixel_values``,
    an encoder otherwise)."""
    from qkv.integrations.transformers import NAME, check_model, register

    register()  # raises MissingDependencyError (how to install the extra) without it
    import transformers
    from transformers.models.auto import modeling_auto

    config = _quietly(transformers.AutoConfig.from_pretrained, folder, what="its config")
    model_type = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        names = modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
        auto = transformers.AutoModelForSeq2SeqLM if model_type in names else None
        wrapper = TransformersSeq2Seq
        if auto is None:
            raise InputError(
                f"{folder} holds a {model_type!r} encoder-decoder without a generating head "
                f"in transformers: the explorer reads {SUPPORTED}"
            )
    elif model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and (
        model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        auto, wrapper = transformers.AutoModelForCausalLM, TransformersDecoder
    elif model_type in modeling_auto.MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        auto, wrapper = transformers.AutoModel, TransformersDualEncoder
    elif hasattr(config, "vision_config") and hasattr(config, "text_config"):
        raise InputError(
            f"{folder} holds a {model_type!r} model with a text and a vision tower that is "
            "not a dual encoder (CLIP, SigLIP, ...); the explorer reads its vision model: "
            "save that tower (e.g. model.vision_model.save_pretrained(out)) with the image "
            "processor, and open it"
        )
    else:
        auto, wrapper = transformers.AutoModel, None
    hf = _quietly(auto.from_pretrained, folder, attn_implementation=NAME, what="the model")
    try:
        check_model(hf)
    except InputError as error:
        raise InputError(f"{folder}: {error}. The explorer reads {SUPPORTED}") from None
    if wrapper is None:
        wrapper = (
            TransformersVision
            if getattr(hf, "main_input_name", "input_ids") == "pixel_values"
            else TransformersEncoder
        )
    architecture = type(hf).__name__
    processor = None
    if wrapper in (TransformersVision, TransformersDualEncoder):
        processor = _quietly(
            transformers.AutoImageProcessor.from_pretrained, folder, what="its image processor"
        )
    model = wrapper(hf, architecture=architecture, processor=processor).to(device).eval()
    if wrapper is TransformersVision:
        return LoadedModel(model, None, model.architecture, model_type, str(folder), folder=True)
    tokenizer = _quietly(transformers.AutoTokenizer.from_pretrained, folder, what="its tokenizer")
    return LoadedModel(
        model, TextTokenizer(tokenizer), model.architecture, model_type, str(folder),
        folder=True, eos_ids=eos_ids(model),
    )  # fmt: skip


def _quietly(load, folder, *, what: str, **options):
    """``load(folder, **options)``; any failure becomes one line naming the folder."""
    try:
        return load(str(folder), **options)
    except QkvError:
        raise
    except Exception as error:  # transformers raises many kinds; the user needs one line
        message = " ".join(str(error).split()) or type(error).__name__
        if len(message) > 240 and ". " in message[:240]:  # its first sentence says it
            message = message[: message.index(". ", 0, 240) + 1]
        raise CheckpointError(
            f"transformers cannot load {what} from {folder}: {message[:240]} (the explorer "
            f"reads {SUPPORTED})"
        ) from None


def eos_ids(model: TransformersFolder) -> tuple[int, ...]:
    """The model's end tokens (its generation config's, else its config's eos_token_id)."""
    for source in (getattr(model.hf, "generation_config", None), model.hf.config):
        found = getattr(source, "eos_token_id", None)
        if found is not None:
            return tuple(found) if isinstance(found, (list, tuple)) else (int(found),)
    return ()


# -- running -------------------------------------------------------------------------------


@dataclass
class Call:
    """One call of the attention interface: the layer's heads (one sequence; None where not
    kept), scale and attention module.  Shapes: query (H, Tq, Dh); key, value (Hkv, Tk, Dh);
    with ``caught_calls(whole=True)`` a batch dimension first."""

    query: Tensor | None
    key: Tensor | None
    value: Tensor | None
    scale: float
    modified: bool  # soft-capping, sinks or a learned bias: not softmax(q.k * scale) alone
    module: nn.Module | None = None


@contextlib.contextmanager
def caught_calls(keep: str = "qkv", *, whole: bool = False) -> Iterator[list[Call]]:
    """Every call of ``attn_implementation="qkv"`` while the block runs, in call order,
    holding the tensors ``keep`` names ("q", "k", "v"; a long input's would fill memory) of
    the batch's first sequence, or (``whole``) of the whole batch."""
    from transformers import AttentionInterface

    from qkv.integrations.transformers import NAME, attention_forward

    calls: list[Call] = []
    mapping = AttentionInterface._global_mapping
    previous = mapping.get(NAME)

    def catching(module, query, key, value, attention_mask, scaling=None, **kwargs):
        scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
        modified = any(
            kwargs.get(name) is not None for name in ("softcap", "s_aux", "sinks", "position_bias")
        ) or (isinstance(attention_mask, Tensor) and attention_mask.is_floating_point())
        heads = [
            (t if whole else t[0]).detach().float().cpu() if name in keep else None
            for name, t in zip("qkv", (query, key, value), strict=True)
        ]
        calls.append(Call(*heads, scale, modified, module))
        return (previous or attention_forward)(
            module, query, key, value, attention_mask, scaling=scaling, **kwargs
        )

    AttentionInterface.register(NAME, catching)
    try:
        yield calls
    finally:
        if previous is not None:
            AttentionInterface.register(NAME, previous)


def _layers(weights, what: str, item: int = 0) -> list[Tensor]:
    """transformers' per-layer (B, H, Tq, Tk) weights of the batch's ``item`` as (H, Tq, Tk)
    float32 on the CPU."""
    if not weights or any(w is None for w in weights):
        raise InputError(
            f"the model returned no {what} weights with output_attentions=True: its attention "
            "layers do not report them through the interface"
        )
    return [w[item].detach().float().cpu() for w in weights]


@torch.no_grad()
def run_text(model: TransformersFolder, ids: Sequence[int], keep: str = ""):
    """(weights per layer (H, T, T), the interface calls, holding ``keep``'s tensors) of an
    encoder or decoder."""
    tensor = torch.tensor([list(ids)], device=_device(model))
    options = {"use_cache": False} if model.family == "decoder" else {}
    with caught_calls(keep) as calls:
        output = model.hf(
            input_ids=tensor,
            attention_mask=torch.ones_like(tensor),
            output_attentions=True,
            **options,
        )
    return _layers(output.attentions, "self-attention"), calls


@torch.no_grad()
def run_seq2seq(
    model: TransformersFolder, source: Sequence[int], target: Sequence[int], keep: str = ""
):
    """({"encoder", "decoder", "cross": per layer (H, Tq, Tk)}, {the same names: the
    interface calls of each layer}) for one source and the decoder's inputs ``target``
    (starting with the decoder's start token).  The encoder runs first, then each decoder
    layer its self-attention and then its cross-attention: the calls are split in that
    order ({} where their count says otherwise)."""
    device = _device(model)
    source_ids = torch.tensor([list(source)], device=device)
    with caught_calls(keep) as calls:
        output = model.hf(
            input_ids=source_ids,
            attention_mask=torch.ones_like(source_ids),
            decoder_input_ids=torch.tensor([list(target)], device=device),
            output_attentions=True,
            use_cache=False,
        )
    attention = {
        "encoder": _layers(output.encoder_attentions, "encoder self-attention"),
        "decoder": _layers(output.decoder_attentions, "decoder self-attention"),
        "cross": _layers(output.cross_attentions, "cross-attention"),
    }
    encoder, decoder = len(attention["encoder"]), len(attention["decoder"])
    if len(calls) != encoder + 2 * decoder:
        return attention, {}
    rest = calls[encoder:]
    return attention, {"encoder": calls[:encoder], "decoder": rest[0::2], "cross": rest[1::2]}


@torch.no_grad()
def run_image(model: TransformersFolder, pixels: Tensor, keep: str = ""):
    """(weights per layer (H, T, T), the interface calls, holding ``keep``'s tensors) of one
    prepared image (1, C, H, W)."""
    with caught_calls(keep) as calls:
        output = model.hf(pixel_values=pixels.to(_device(model)), output_attentions=True)
    return _layers(output.attentions, "self-attention"), calls


def _device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def windows_of(model: TransformersFolder, count: int) -> list[int | None]:
    """Per layer its sliding window (query i sees keys i - window < j <= i), or None: the
    config's ``sliding_window`` on the layers its ``layer_types`` call sliding (every layer
    where it has no layer types)."""
    config = getattr(model.hf.config, "get_text_config", lambda: model.hf.config)()
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return [None] * count
    types = getattr(config, "layer_types", None)
    if types is None:
        return [int(window)] * count
    return [int(window) if kind == "sliding_attention" else None for kind in types[:count]]


def _plain_weights(call: Call, *, causal: bool, window: int | None) -> Tensor:
    """softmax(q.k * scale) over the keys the layer lets each query see.  (H, Tq, Tk)."""
    group = call.query.shape[0] // call.key.shape[0]
    keys = call.key.repeat_interleave(group, dim=0)
    scores = call.query @ keys.transpose(-1, -2) * call.scale
    keep = kept_keys(*scores.shape[-2:], causal=causal, window=window)
    return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)


def _vectors(call: Call, weights: Tensor, *, causal: bool, window: int | None) -> dict:
    """The neuron view's q, k, v of one layer, or why they would not give its weights."""
    if call.modified:
        return {
            "absent": "this layer adds a bias, soft-capping or sinks to q.k: the neuron "
            "view's steps would not be the model's"
        }
    if (_plain_weights(call, causal=causal, window=window) - weights).abs().max() > 1e-4:
        return {"absent": "this layer's weights are not softmax(q.k * scale) over its keys"}
    return {"q": call.query, "k": call.key, "v": call.value, "scale": call.scale}


def _stored(calls: Sequence[Call], layers, vectors, *, causal: bool, windows=None) -> dict:
    from .vectors import chosen_layers

    chosen = chosen_layers(vectors, len(layers))
    windows = windows or [None] * len(layers)
    if chosen and len(calls) != len(layers):
        why = {"absent": "the model's attention calls could not be matched to its layers"}
        return {str(layer): why for layer in chosen}
    stored = {}
    for layer in chosen:
        found = _vectors(calls[layer], layers[layer], causal=causal, window=windows[layer])
        entry = page_vectors(found)
        if "scale" in found:
            entry["scale"] = found["scale"]  # the layer's own (Gemma's differs from 1/sqrt(d))
        stored[str(layer)] = entry
    return stored


# -- pages ---------------------------------------------------------------------------------


class TransformersAdapter(ExplorerAdapter):
    """What the four families share: the page's facts, text inputs, token limits."""

    vectors = True

    def input_attention(self, model, tokenizer, item, target=None) -> dict[str, Any]:
        """``qkv.explore.input_attention`` for a folder: :func:`folder_attention`."""
        return folder_attention(model, tokenizer, item, target)

    def facts(self, model: TransformersFolder) -> dict[str, Any]:
        config = getattr(model.hf.config, "get_text_config", lambda: model.hf.config)()
        layers = getattr(config, "num_hidden_layers", None) or getattr(config, "num_layers", 0)
        heads = getattr(config, "num_attention_heads", None) or getattr(config, "num_heads", 0)
        facts = {
            "architecture": model.architecture,
            "implementation": model.implementation,
            "layers": layers,
            "heads": heads,
        }
        kv_heads = getattr(config, "num_key_value_heads", None)
        facts["kv_heads"] = kv_heads or heads
        facts["positions"] = getattr(config, "max_position_embeddings", None) or "relative"
        return facts

    def ids(self, model: TransformersFolder, tokenizer, item, index: int, what="input"):
        """The token ids of one text (``what`` names it in errors: an input, a target)."""
        if isinstance(item, (str, Path)) and _is_image(item):
            raise InputError(
                f"{what} {index} ({item}) is an image; {model.architecture} reads text: pass "
                "texts (images go to vision models such as ViT)"
            )
        if not isinstance(item, str) or not item.strip():
            raise InputError(f"{what} {index}: {model.architecture} takes texts (non-empty str)")
        ids = tokenizer.encode(item)
        if not ids:
            raise InputError(f"{what} {index} has no tokens: nothing to explore")
        limit = _position_limit(model)
        if limit is not None and len(ids) > limit:
            raise InputError(
                f"{what} {index} has {len(ids)} tokens; the model's positions reach {limit}: "
                "shorten it or split it"
            )
        return ids


def _position_limit(model: TransformersFolder) -> int | None:
    """The most tokens a learned table of absolute positions allows (BERT, RoBERTa, GPT-2,
    OPT), None where positions are rotary or relative and have no table to run out of."""
    limits = []
    for name, module in model.text_tower().named_modules():
        if not isinstance(module, nn.Embedding) or not ("position" in name or name.endswith("wpe")):
            continue
        # RoBERTa's positions start after its padding index, OPT's after an offset of 2
        padding = module.padding_idx + 1 if module.padding_idx is not None else 0
        limits.append(module.num_embeddings - padding - int(getattr(module, "offset", 0)))
    return min(limits) if limits else None


def _is_image(item) -> bool:
    return Path(str(item)).suffix.lower() in IMAGE_SUFFIXES and Path(str(item)).is_file()


def _keep(request: ExploreRequest, length: int) -> str:
    """The tensors of each attention call a page needs: q, k, v for the neuron view, q and k
    for a long input's compact view, else none."""
    if request.vectors is not None:
        return "qkv"
    return "qk" if length > DENSE_TOKENS else ""


def compact_or_why(name, title, tokens, layers, calls, *, causal: bool, windows=None):
    """(a compact view (``qkv.explore.compact``) of a long self-attention, None) where each
    layer's weights are softmax(q.k * scale) over the keys it sees (checked against the
    model's, to the float16 rounding of q and k), else (None, why not)."""
    if len(calls) != len(layers) or any(call.modified for call in calls):
        return None, "this model's attention adds a bias, soft-capping or sinks to q.k"
    caught = {i: {"q": c.query, "k": c.key, "scale": c.scale} for i, c in enumerate(calls)}
    view = compact_view(name, title, tokens, layers, caught, causal=causal, windows=windows)
    if view["max_error"] > COMPACT_TOLERANCE:
        return None, (
            f"this model's weights are not softmax(q.k * scale) over its windows (the page "
            f"would be off by {view['max_error']:.3g})"
        )
    return view, None


class EncoderFolderAdapter(TransformersAdapter):
    """A text encoder: bidirectional self-attention on each text."""

    kind, views = "encoder", ("encoder",)
    page = ENCODER_PAGE

    def text_attention(self, model, tokenizer, text, index: int = 0):
        ids = self.ids(model, tokenizer, text, index)
        return ids, run_text(model, ids)[0]

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        tokenizer, pages = request.tokenizer, []
        for index, text in enumerate(inputs):
            ids = self.ids(model, tokenizer, text, index)
            layers, calls = run_text(model, ids, _keep(request, len(ids)))
            tokens = tokenizer.tokens(ids)
            view = None
            if len(tokens) > DENSE_TOKENS:  # q and k where they give the weights, as for LMs
                view, why_not = compact_or_why("encoder", VIEW_TITLES["encoder"], tokens,
                                               layers, calls, causal=False)  # fmt: skip
            # short, or weights q and k do not give (view None): every weight, as BERT's
            vectors = _stored(calls, layers, request.vectors, causal=False)
            output = decoded_text(tokenizer, ids)
            entry = self_attention_entry(text, tokens, layers, vectors=vectors, output=output,
                                         view=view)  # fmt: skip
            pages.append(entry)
        return pages


class DecoderFolderAdapter(TransformersAdapter):
    """A causal language model: the prompt's (and generated tokens') self-attention."""

    kind, views = "lm", ("self",)
    page = LM_PAGE
    generates = True

    def facts(self, model) -> dict[str, Any]:
        facts = super().facts(model)
        windows = [w for w in windows_of(model, facts["layers"]) if w is not None]
        if windows:
            facts["window"] = max(windows)
        return facts

    def text_attention(self, model, tokenizer, text, index: int = 0):
        ids = self.ids(model, tokenizer, text, index)
        return ids, run_text(model, ids)[0]

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        induction = induction_scores(model)
        return [self._page(model, item, i, request, induction) for i, item in enumerate(inputs)]

    def _page(self, model, item, index, request, induction) -> dict[str, Any]:
        tokenizer = request.tokenizer
        prompt = self.ids(model, tokenizer, item, index)
        limit = _position_limit(model)
        if limit is not None and len(prompt) + request.generate > limit:
            raise InputError(
                f"input {index}: {len(prompt)} prompt tokens + {request.generate} generated "
                f"exceed the model's {limit} positions; shorten the prompt or generate less",
                fields=("generate",),
            )
        ids = prompt + self._generated(model, prompt, request)
        layers, calls = run_text(model, ids, _keep(request, len(ids)))
        tokens = tokenizer.tokens(ids)
        windows = windows_of(model, len(layers))
        title = "causal self-attention"
        if len(tokens) > DENSE_TOKENS:  # q and k in the page, as for qkv's language models
            view, why_not = compact_or_why("self", title, tokens, layers, calls, causal=True,
                                           windows=windows)  # fmt: skip
            if view is None:
                raise InputError(
                    f"an input of {len(tokens)} tokens is stored as q and k, and {why_not}: "
                    f"explore at most {DENSE_TOKENS} tokens"
                )
        else:
            view = with_rollout(
                attention_view("self", title, tokens, tokens, "source", "source", layers), layers
            )
        for entry, scores in zip(view["layers"], induction, strict=True):
            for summary, score in zip(entry["summaries"], scores, strict=True):
                summary["induction"] = round(float(score), 4)
            entry["mean_summary"]["induction"] = round(float(scores.mean()), 4)
        vectors = _stored(calls, layers, request.vectors, causal=True, windows=windows)
        view.update(causal=True, vectors=vectors, windows=windows, blocks=None)
        new = ids[len(prompt) :]
        return {
            "name": item,
            "source": item,
            "source_tokens": tokens,
            "prompt_length": len(prompt),
            "output": decoded_text(tokenizer, new),
            "output_tokens": tokenizer.tokens(new),
            "views": [view],
        }

    @staticmethod
    def _generated(model, prompt: list[int], request: ExploreRequest) -> list[int]:
        """The tokens transformers' ``generate`` samples after the prompt (temperature 0:
        greedy), stopping at an end token; ``seed`` seeds a forked random state, so the
        caller's own is left as it was."""
        if not request.generate:
            return []
        sampling = request.temperature > 0
        options = {"do_sample": sampling}
        if sampling:
            options.update(temperature=request.temperature, top_k=request.top_k or 0)
        ids = torch.tensor([prompt], device=_device(model))
        devices = [ids.device] if ids.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            if request.seed is not None:
                torch.manual_seed(request.seed)
            output = model.hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=request.generate,
                eos_token_id=list(request.eos_ids) or None,
                pad_token_id=(list(request.eos_ids) or [0])[0],
                **options,
            )
        return output[0, len(prompt) :].tolist()


@torch.no_grad()
def induction_scores(model: TransformersFolder, *, length: int = INDUCTION_LENGTH) -> Tensor:
    """Per layer and head the induction score of ``qkv.explore.language`` (distinct random
    tokens, seed 0, repeated twice; the weight on the token after the previous occurrence),
    computed through the folder's model.  Shape (layers, H)."""
    config = getattr(model.hf.config, "get_text_config", lambda: model.hf.config)()
    vocab = int(config.vocab_size)
    limit = _position_limit(model)
    if limit is not None:
        length = min(length, limit // 2)
    length = min(length, vocab)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randperm(vocab, generator=generator)[:length]
    layers, _ = run_text(model, torch.cat([tokens, tokens]).tolist())
    queries = torch.arange(length, 2 * length)
    keys = queries - length + 1
    return torch.stack([weights[:, queries, keys].mean(dim=-1) for weights in layers])


class Seq2SeqFolderAdapter(TransformersAdapter):
    """An encoder-decoder: the source's encoder self-attention, and the decoder's causal
    self- and cross-attention while it reads its greedy (``beam`` > 1: its best beam)
    output."""

    kind, views = "transformer", ("encoder", "decoder", "cross")
    page = TRANSFORMER_PAGE
    takes_targets = True

    def facts(self, model) -> dict[str, Any]:
        config = model.hf.config
        encoder = getattr(config, "encoder_layers", None) or getattr(config, "num_layers", 0)
        decoder = getattr(config, "decoder_layers", None) or getattr(
            config, "num_decoder_layers", None
        )
        facts = super().facts(model)
        facts.update(encoder_layers=encoder, decoder_layers=decoder or encoder)
        heads = getattr(config, "encoder_attention_heads", None)
        if heads:
            facts["heads"] = heads
        return facts

    def decoded(self, model, source: list[int], request: ExploreRequest):
        """The decoder's inputs (its start token, then the output) and whether it ended."""
        config = model.hf.config
        ids = torch.tensor([source], device=_device(model))
        options = {"num_beams": request.beam} if request.beam > 1 else {}
        if request.beam > 1:
            options["length_penalty"] = request.length_penalty
        limit = request.max_len if request.max_len is not None else int(1.5 * len(source)) + 10
        positions = _position_limit(model)  # the decoder's inputs: its start token, then these
        if positions is not None and limit > positions - 1:
            if request.max_len is not None:
                raise InputError(
                    f"max_len={limit}: the model's positions reach {positions}, so at most "
                    f"{positions - 1} tokens can follow the decoder's start token",
                    fields=("max_len",),
                )
            limit = positions - 1
        output = model.hf.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=limit, do_sample=False,
            **options,
        )[0].tolist()  # fmt: skip
        end = getattr(getattr(model.hf, "generation_config", None), "eos_token_id", None)
        end = end if end is not None else config.eos_token_id
        ends = set(end) if isinstance(end, (list, tuple)) else {end}
        pad = config.pad_token_id
        # generate pads a finished beam; the start token may equal the pad (T5)
        body = output[1:]
        while body and body[-1] == pad and pad not in ends:
            body.pop()
        finished = bool(body) and body[-1] in ends
        if finished:
            body = body[:-1]
        return [output[0], *body], finished

    def given(self, model, tokenizer, text: str, index: int):
        """The decoder's inputs for a text the user gives: the start token, then the text's
        tokens (as the folder's tokenizer makes labels; a final end token ends it)."""
        ids = self.ids(model, tokenizer, text, index, what="target")
        config = model.hf.config
        start = config.decoder_start_token_id
        start = start if start is not None else config.pad_token_id
        finished = ids[-1] == config.eos_token_id
        target = [start, *(ids[:-1] if finished else ids)]
        positions = _position_limit(model)
        if positions is not None and len(target) > positions:
            raise InputError(
                f"target {index} has {len(target)} decoder inputs with the start token; the "
                f"model's positions reach {positions}: shorten it"
            )
        return target, finished

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        tokenizer, pages = request.tokenizer, []
        for index, text in enumerate(inputs):
            source = self.ids(model, tokenizer, text, index)
            if request.targets is not None:
                target, finished = self.given(model, tokenizer, request.targets[index], index)
                read = "the given text"
            else:
                target, finished = self.decoded(model, source, request)
                read = "its beam output" if request.beam > 1 else "its greedy output"
            page = self.input_page(
                model, tokenizer, text, source, target, finished, request.vectors
            )
            page["decoder_input"] = read
            pages.append(page)
        return pages

    def input_page(self, model, tokenizer, text, source, target, finished, vectors=None) -> dict:
        attention, calls = run_seq2seq(model, source, target, "qkv" if vectors else "")
        source_tokens = tokenizer.tokens(source)
        inputs = tokenizer.tokens(target)
        end = tokenizer.tokens([model.hf.config.eos_token_id])[0] if finished else "\u2026"
        produced = [*inputs[1:], end]

        def vectors_of(name, layers):
            causal = name == "decoder"
            return _stored(calls.get(name, ()), layers, vectors, causal=causal)

        views = seq2seq_views(attention, source_tokens, inputs, produced, vectors_of)
        return {
            "name": text,
            "source": text,
            "source_tokens": source_tokens,
            "output": decoded_text(tokenizer, target[1:]),
            "output_tokens": inputs[1:],
            "views": views,
        }


def _vision_info(m: Mapping[str, Any]) -> str:
    patch = f"{m['patch']}\u00d7{m['patch']}-pixel " if m.get("patch") else ""
    sizes = f"{m['layers']} layers, {m['heads']} heads"
    return f"{m.get('architecture') or 'vision model'}: {sizes} over {patch}patches"


#: A vision model's page: the patches' self-attention in every layer and head, the query
#: patch picked on the picture.
VISION_PAGE = PageKind(info=_vision_info, multi_head=True, term="query", pick_regions=True)


class VisionFolderAdapter(TransformersAdapter):
    """A vision model on image files: the patches' self-attention over the picture."""

    kind, views = "vision", ("self",)
    page = VISION_PAGE

    def facts(self, model) -> dict[str, Any]:
        facts = super().facts(model)
        facts.pop("kv_heads", None)
        facts.pop("positions", None)
        facts["patch"] = patch_size(model)
        return facts

    def prepared(self, model, item, index: int) -> tuple[Tensor, Tensor]:
        """(pixel_values (1, C, H, W) as the processor makes them, the picture the model
        sees (3, H, W) in [0, 1])."""
        from PIL import Image

        path = Path(str(item)) if isinstance(item, (str, Path)) else None
        if path is None or not path.is_file():
            raise InputError(
                f"input {index}: {model.architecture} is a vision model: give image files "
                f"({', '.join(IMAGE_SUFFIXES)}), not {str(item)[:40]!r}"
            )
        try:
            with Image.open(path) as image:
                picture = image.convert("RGB")
        except Exception as error:  # PIL raises UnidentifiedImageError, OSError, ...
            raise InputError(f"input {index}: {path} is not an image PIL reads ({error})") from None
        pixels = model.processor(images=picture, return_tensors="pt")["pixel_values"]
        mean = torch.tensor(getattr(model.processor, "image_mean", None) or [0.0] * 3)
        std = torch.tensor(getattr(model.processor, "image_std", None) or [1.0] * 3)
        seen = pixels[0].float() * std[:, None, None] + mean[:, None, None]
        return pixels, seen.clamp(0, 1)

    def text_attention(self, model, tokenizer, item, index: int = 0):
        pixels, _ = self.prepared(model, item, index)
        layers, _ = run_image(model, pixels)
        return list(range(layers[0].shape[-1])), layers

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        pages = []
        for index, item in enumerate(inputs):
            pixels, seen = self.prepared(model, item, index)
            layers, calls = run_image(model, pixels, "qkv" if request.vectors else "")
            vectors = _stored(calls, layers, request.vectors, causal=False)
            pages.append(image_entry(model, item, pixels, seen, layers, vectors))
        return pages


def image_entry(
    model, item, pixels: Tensor, seen: Tensor, layers, vectors, *, name="self",
    title="patch self-attention",
) -> dict[str, Any]:  # fmt: skip
    """The page's entry of one image file: its tokens' self-attention (``name``, ``title``)
    and, where the tokens are a grid of patches, the picture to draw each query's weights
    over.  Shapes: pixels (1, C, H, W) as the model read them; seen (3, H, W) in [0, 1];
    layers, per layer (H, T, T)."""
    tokens, grid = patch_labels(model, pixels, layers[0].shape[-1])
    file = Path(str(item)).name
    page = self_attention_entry(file, tokens, layers, name=name, title=title, vectors=vectors)
    if grid is not None:
        page["image"] = {
            "png": png_data_uri(seen),
            "grid": list(grid),
            "offset": len(tokens) - grid[0] * grid[1],
        }
    return page


def patch_size(model: TransformersFolder) -> int | None:
    """The side of the vision model's (or tower's) square patches in pixels, None if none."""
    config = getattr(model.hf.config, "vision_config", None) or model.hf.config
    patch = getattr(config, "patch_size", None)
    return patch[0] if isinstance(patch, (list, tuple)) else patch


def patch_labels(model, pixels: Tensor, count: int):
    """The tokens' labels (the leading ones "[CLS]" and such, then "(row, col)" per patch)
    and the patch grid (rows, columns), None where the tokens are not one per patch."""
    patch = patch_size(model)
    if not patch:
        return [str(i) for i in range(count)], None
    rows, cols = pixels.shape[-2] // patch, pixels.shape[-1] // patch
    lead = count - rows * cols
    if lead < 0:
        return [str(i) for i in range(count)], None
    names = ["[CLS]", *(f"[extra {i}]" for i in range(1, lead))][:lead]
    return [*names, *(f"({r}, {c})" for r in range(rows) for c in range(cols))], (rows, cols)


def folder_attention(model: TransformersFolder, tokenizer, item, target=None) -> dict[str, Any]:
    """Every attention of one input, for ``qkv attention --weights-out``: {"attention":
    {view: per layer (H, Tq, Tk)}, "tokens": {name: labels}, "plot": (view, query tokens,
    key tokens)}; an encoder-decoder's decoder reads ``target`` (default: its greedy
    output)."""
    adapter = ADAPTERS[model.family]
    if target is not None and not isinstance(adapter, Seq2SeqFolderAdapter):
        raise InputError("a target text is for encoder-decoder models; this one reads one input")
    if isinstance(adapter, Seq2SeqFolderAdapter):
        request = ExploreRequest(tokenizer=tokenizer)
        source = adapter.ids(model, tokenizer, item, 0)
        if target is not None:
            target, _ = adapter.given(model, tokenizer, target, 0)
        else:
            target, _ = adapter.decoded(model, source, request)
        attention, _ = run_seq2seq(model, source, target)
        source_tokens, targets = tokenizer.tokens(source), tokenizer.tokens(target)
        return {
            "attention": attention,
            "tokens": {"tokens": targets, "source_tokens": source_tokens},
            "plot": ("cross", targets, source_tokens),
        }
    ids, layers = adapter.text_attention(model, tokenizer, item)
    if isinstance(adapter, VisionFolderAdapter):
        pixels, _ = adapter.prepared(model, item, 0)
        tokens, _ = patch_labels(model, pixels, layers[0].shape[-1])
    else:
        tokens = tokenizer.tokens(ids)
    return {
        "attention": {adapter.views[0]: layers},
        "tokens": {"tokens": tokens},
        "plot": (adapter.views[0], tokens, tokens),
    }


ADAPTERS = {
    "encoder": EncoderFolderAdapter(),
    "decoder": DecoderFolderAdapter(),
    "encoder-decoder": Seq2SeqFolderAdapter(),
    "vision": VisionFolderAdapter(),
}
for _wrapper in (TransformersEncoder, TransformersDecoder, TransformersSeq2Seq, TransformersVision):
    register_explorer(_wrapper.__name__, ADAPTERS[_wrapper.family])
