"""The explorer adapter for qkv's decoder-only language model (``DecoderLM``): the
causal self-attention of a prompt, or of the prompt and ``generate`` tokens sampled after it
(``temperature``, ``top_k``, ``seed`` as in ``qkv generate``), every layer and head, the mean,
the causal rollout per layer, and per-head summaries that matter for LMs: the share on the
previous token, on the first token (attention sinks), and an induction score.

Induction score (Olsson et al. 2022, "In-context Learning and Induction Heads"): on a
sequence of ``L = INDUCTION_LENGTH`` distinct random tokens repeated twice, the mean weight a
token of the second copy puts on the token that followed its previous occurrence (query i,
key i - L + 1).  The tokens are distinct so that the previous occurrence is the one in the
first copy; they are drawn with seed 0 (specials left out), so a model's scores do not
depend on the input shown: they describe the heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from qkv.data import SPECIAL_TOKENS
from qkv.decoding import sample
from qkv.errors import InputError
from qkv.functional.block_mask import DEFAULT_BLOCK_SIZE
from qkv.functional.rope_scaling import rope_inverse_frequency
from qkv.models.lm_builders import architecture_of

from .compact import DENSE_TOKENS, compact_view
from .registry import ExplorerAdapter, ExploreRequest, PageKind, register_explorer
from .summaries import attention_rollout, head_summary, quantize
from .vectors import catch_vectors, stored_from, stored_vectors
from .views import attention_view, decoded_text, model_device, token_labels

__all__ = [
    "LanguageModelAdapter",
    "induction_scores",
    "causal_attention",
    "prompt_ids",
    "INDUCTION_LENGTH",
    "LM_PAGE",
]

#: The length of the random sequence that is repeated for the induction score.
INDUCTION_LENGTH = 32


@torch.no_grad()
def causal_attention(model: nn.Module, ids: Tensor) -> list[Tensor]:
    """The self-attention of every block on one sequence, per layer (H, T, T) float32 on the
    CPU, computed by the model with ``need_weights``.  Shapes: ids (1, T)."""
    weights = model(ids, need_weights=True).attention["self"]
    return [layer[0].float().cpu() for layer in weights]


@torch.no_grad()
def induction_scores(model: nn.Module, *, length: int = INDUCTION_LENGTH) -> Tensor:
    """Per layer and head the induction score described above; shape (layers, H).

    ``length`` shrinks to fit a model whose learned positions reach fewer than 2 x length,
    or whose vocabulary has fewer distinct tokens."""
    limit = getattr(model, "max_positions", None)
    if limit is not None:
        length = min(length, limit // 2)
    vocab = model.config.vocab_size
    low = len(SPECIAL_TOKENS) if vocab > 2 * len(SPECIAL_TOKENS) else 0
    length = min(length, vocab - low)
    if length < 2:
        raise InputError("the induction score needs room for two copies of 2 tokens or more")
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randperm(vocab - low, generator=generator)[:length] + low
    ids = torch.cat([tokens, tokens])[None].to(model_device(model))
    layers = causal_attention(model, ids)  # per layer (H, 2L, 2L)
    queries = torch.arange(length, 2 * length)
    keys = queries - length + 1  # the token after the previous occurrence
    return torch.stack([weights[:, queries, keys].mean(dim=-1) for weights in layers])


def _lm_info(m: Mapping[str, Any]) -> str:
    grouped = f" ({m['kv_heads']} key/value heads)" if m["kv_heads"] != m["heads"] else ""
    sizes = f"{m['layers']} layers, {m['heads']} heads{grouped}"
    name = m.get("architecture") or "language model"
    if m.get("layout") and not m.get("architecture"):  # a folder's name says it already
        name = f"{name} ({m['layout']} layout)"  # qkv's builder whose every choice it keeps
    return f"{name}: {sizes}, {m['positions']} positions"


#: A language model's page: the tokens' causal self-attention in every layer and head, and
#: the induction score among the per-head summaries (a folder read by transformers fills it
#: too).
LM_PAGE = PageKind(
    info=_lm_info,
    multi_head=True,
    source_row="tokens",
    metrics={"induction": "induction score (repeated random tokens)"},
)


class LanguageModelAdapter(ExplorerAdapter):
    """A causal LM on prompts (str, or lists of token ids); ``tokenizer`` encodes them."""

    kind, views = "lm", ("self",)
    page = LM_PAGE
    generates = vectors = True
    live = "lm"
    config_facts = {"layers": "num_layers", "heads": "num_heads", "kv_heads": "num_kv_heads"}

    def attention_modules(self, model: nn.Module) -> list[nn.Module]:
        return [block.self_attention for block in model.blocks]

    def facts(self, model: nn.Module) -> dict[str, Any]:
        config = model.config
        facts = dict(super().facts(model), positions=config.positions)
        facts["layout"] = architecture_of(config)  # "gpt", "llama", "nanochat" or None (a mix)
        if config.window is not None:
            facts["window"] = config.window
        return facts

    def live_config(self, model: nn.Module) -> dict[str, Any]:
        """script/live/lm.js's facts, read from DecoderLM's config (its state_dict names
        are the script's: token_embedding, positions.*, blocks.{i}.*, final_norm, output).
        The script runs every architecture's components (the norms, the MLP and SwiGLU,
        the four position schemes with RoPE's inverse frequencies computed here, QK-norm,
        per-layer windows, the logit soft-cap); a model that restarts positions at each
        document, or whose RoPE frequencies change with the length read, gets one line and
        a static page."""
        config = model.config
        if config.document_start is not None:
            raise InputError(
                "the live page runs one stream; this model restarts positions at each "
                "document (document_start): write a static page"
            )
        if config.rope_scaling.depends_on_length:
            raise InputError(
                f"the live page rotates with fixed RoPE frequencies; this model's "
                f"rope_scaling {config.rope_scaling.kind!r} changes them with the length read: "
                "write a static page (without --live)"
            )
        frequencies = None
        if config.positions == "rope":  # theta and any scaling rule: the script multiplies
            frequencies = rope_inverse_frequency(
                config.head_dim, base=config.rope_base, scaling=config.rope_scaling
            ).tolist()
        return {
            "d_model": config.d_model,
            "heads": config.num_heads,
            "kv_heads": config.num_kv_heads,
            "layers": config.num_layers,
            "norm": config.norm,
            "activation": config.activation,
            "norm_first": config.norm_first,
            "positions": config.positions,
            "rope_frequencies": frequencies,
            "qk_norm": config.qk_norm,
            "embedding_norm": config.embedding_norm,
            "logit_softcap": config.logit_softcap,
            "max_len": config.max_len,
            "max_positions": model.max_positions,
            "embedding_scale": model.embedding_scale,
            "eps": config.norm_eps,
            "windows": self.windows(model),
            "block": self.block_size(model),
        }

    def windows(self, model: nn.Module) -> list[int | None]:
        """Per layer its sliding window (query i sees keys i - window < j <= i), or None."""
        return list(model.config.windows)

    def block_size(self, model: nn.Module) -> int | None:
        """The blocks a windowed model computes in (flex_attention skips those outside the
        window), None where it has no window."""
        # the tiles of DecoderLM's windows on the flex kernel: the page shows which ran
        return DEFAULT_BLOCK_SIZE if model.config.window is not None else None

    @torch.no_grad()
    def text_attention(self, model, tokenizer, text, index: int = 0):
        """The ids of one text, and per layer its (H, T, T) float32 causal self-attention."""
        ids = prompt_ids(text, index, tokenizer)
        limit = getattr(model, "max_positions", None)
        if limit is not None and len(ids) > limit:
            raise InputError(
                f"input {index} has {len(ids)} tokens; the model's positions reach {limit}: "
                "shorten it"
            )
        return ids, causal_attention(model, torch.tensor([ids], device=model_device(model)))

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        if not isinstance(request.generate, int) or request.generate < 0:
            raise InputError(
                f"generate={request.generate!r} must be 0 or more tokens", fields=("generate",)
            )
        induction = induction_scores(model)
        return [
            self._page(model, item, index, request, induction) for index, item in enumerate(inputs)
        ]

    def _page(self, model, item, index: int, request: ExploreRequest, induction) -> dict:
        tokenizer = request.tokenizer
        prompt = prompt_ids(item, index, tokenizer)
        limit = getattr(model, "max_positions", None)
        if limit is not None and len(prompt) + request.generate > limit:
            raise InputError(
                f"input {index}: {len(prompt)} prompt tokens + {request.generate} generated "
                f"exceed the model's {limit} positions; shorten the prompt or generate less",
                fields=("generate",),
            )
        ids = torch.tensor([prompt], device=model_device(model))
        if request.generate:
            ids = sample(
                model,
                ids,
                max_new_tokens=request.generate,
                temperature=request.temperature,
                top_k=request.top_k,
                seed=request.seed,
                eos_ids=request.eos_ids,
            )
        tokens = token_labels(tokenizer, ids[0].tolist())
        modules = self.attention_modules(model)
        title, windows = "causal self-attention", self.windows(model)
        if len(tokens) > DENSE_TOKENS:  # q and k in the page, not T x T weights
            with catch_vectors(modules, range(len(modules))) as caught:
                layers = causal_attention(model, ids)
            view = compact_view("self", title, tokens, layers, caught, causal=True, windows=windows)
            vectors = stored_from(caught, request.vectors, len(modules))
        else:
            layers, vectors = stored_vectors(modules, request.vectors, causal_attention, model, ids)
            view = attention_view("self", title, tokens, tokens, "source", "source", layers)
            for entry, rollout in zip(view["layers"], attention_rollout(layers), strict=True):
                entry["rollout"] = quantize(rollout)
                entry["rollout_summary"] = head_summary(rollout, self_attention=True)
        for entry, scores in zip(view["layers"], induction, strict=True):
            for summary, score in zip(entry["summaries"], scores, strict=True):
                summary["induction"] = round(float(score), 4)
            entry["mean_summary"]["induction"] = round(float(scores.mean()), 4)
        view.update(causal=True, vectors=vectors, windows=windows, blocks=self.block_size(model))
        new = ids[0, len(prompt) :].tolist()
        text = item if isinstance(item, str) else " ".join(tokens[: len(prompt)])
        return {
            "name": text,
            "source": text,
            "source_tokens": tokens,
            "prompt_length": len(prompt),
            "output": decoded_text(tokenizer, new),
            "output_tokens": token_labels(tokenizer, new),
            "views": [view],
        }


def prompt_ids(item, index: int, tokenizer) -> list[int]:
    if isinstance(item, str):
        if not item:
            raise InputError(f"input {index} is an empty prompt: give at least one character")
        if not callable(getattr(tokenizer, "encode", None)):
            raise InputError("prompts need a tokenizer with encode(); pass tokenizer=...")
        ids = tokenizer.encode(item)
    elif isinstance(item, (list, tuple)) and all(isinstance(i, int) for i in item):
        ids = list(item)
    elif isinstance(item, Tensor) and item.dim() == 1 and not item.is_floating_point():
        ids = item.tolist()
    else:
        raise InputError(f"input {index} is a {type(item).__name__}; an LM takes prompts (str)")
    if not ids:
        raise InputError(f"input {index} has no tokens: nothing to explore")
    return ids


register_explorer("lm", LanguageModelAdapter())
