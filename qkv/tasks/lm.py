"""Training and using a language model: text -> tokenizer -> DecoderLM -> the shared trainer.

``train_lm`` drives :func:`qkv.training.train` exactly as translation does (budgets,
checkpoints, ``--resume``, DDP, bf16); the run's ``log.jsonl`` carries the validation loss and
perplexity per token.  A run starts from a fresh model and a tokenizer trained on the text,
or with ``init_from`` from a pretrained model and its own tokenizer (a Hugging Face GPT-2 or
Llama-family folder, or another run: :mod:`qkv.tasks.lm_start`).  ``load_lm`` reads a run
back; ``context_loss`` measures the validation loss at a given context length (how far
positions extrapolate).

One concept, one module (about 500 lines): the LM task from its setup to the text a trained
model writes -- the setup, its model config, its data, loading a run back, and the uses of a
loaded model (context loss, generation), which read the setup defined here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.batch import BOS_ID, NO_PAD_ID, PAD_ID
from ..data.text import TextCorpus, TextDataset, load_text, split_documents
from ..data.text_tokenizers import TEXT_TOKENIZER_KINDS, encode_prompt, train_text_tokenizer
from ..data.tokenizers import Tokenizer
from ..decoding import sample
from ..errors import CheckpointError, InputError, NotFiniteError
from ..models import (
    ARCHITECTURES,
    DecoderLM,
    LMConfig,
    LoadedModel,
    architecture_config,
    window_layers_of,
)
from ..pretrained import FolderTokenizer
from ..training import TrainConfig, TrainResult, load_checkpoint
from .lm_start import (
    FINETUNE_CONTEXT,
    START_FIELDS,
    TOKENIZER_FILE,
    LMStart,
    fit_setup_to_start,
    load_start,
    read_start,
)
from .presets import LM_FINETUNE, PRESETS, Preset, preset_for, sizes_of
from .task import TaskData, TaskSpec, check_choices, setup_field, train_task
from .translator import reading_errors

__all__ = [
    "LM_MODEL",
    "LMSetup",
    "LM",
    "lm_config",
    "train_lm",
    "load_lm",
    "lm_of",
    "LMStart",
    "encode_text",
    "encode_documents",
    "context_loss",
    "generate_text",
]


@torch.no_grad()
def context_loss(
    model: DecoderLM, ids: torch.Tensor, *, context: int, batch_size: int = 8
) -> float:
    """Mean next-token loss (nats) over windows of ``context + 1`` tokens of ``ids`` (N,),
    every prediction made with the window's whole prefix in view: how well the model reads a
    context of that length (past its training ``max_len``, positions must extrapolate)."""
    windows = TextDataset(ids, context=context, pad_id=NO_PAD_ID)  # whole windows: no padding
    full = [i for i, n in enumerate(windows.target_lengths) if n == context + 1]
    if not full:
        raise InputError(f"the text has fewer than {context + 1} tokens: no window to score")
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(full), batch_size):
        batch = torch.stack([windows[i] for i in full[start : start + batch_size]]).to(device)
        logits = model(batch[:, :-1]).logits
        total += F.cross_entropy(
            logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum"
        ).item()
        count += batch[:, 1:].numel()
    if not math.isfinite(total):  # a loss of NaN is no score: refuse it, do not print it
        raise NotFiniteError(
            f"the model's loss on the text is {total}: its weights or activations are not "
            "finite (a diverged run, a corrupt file, float16 overflow)"
        )
    return total / count if count else math.nan


def generate_text(
    lm: LoadedModel,
    prompt: str,
    *,
    max_new_tokens: int,
    num_samples: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    stream: Callable[[str], None] | None = None,
) -> list[str]:
    """``num_samples`` continuations of ``prompt`` (the prompt itself left out).

    Sampling stops at the model's end token (``lm.eos_ids``: a pretrained folder's); the
    text ends before it.  ``stream(text)`` receives the prompt once the first
    token is drawn, then the first
    sample's new text as tokens are drawn (a byte-level token that ends inside a UTF-8
    character is held back until the character is complete).
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise InputError(
            f"num_samples={num_samples!r} must be a positive integer", fields=("num_samples",)
        )
    prompt_ids = encode_prompt(lm.tokenizer, prompt)
    document_start = getattr(lm.model.config, "document_start", None)
    # trained packed: <s> (or a folder's BOS) opens the document, once: a folder's tokenizer
    # may add its BOS itself
    if document_start is not None and prompt_ids[0] != document_start:
        prompt_ids = [document_start, *prompt_ids]
    limit = getattr(lm.model, "max_positions", None)
    if limit is not None and len(prompt_ids) > limit:
        raise InputError(lm.too_long(len(prompt_ids)))
    device = next(lm.model.parameters()).device
    batch = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)
    new_ids: list[int] = []
    shown = 0

    def on_token(tokens: torch.Tensor) -> None:
        nonlocal shown
        if not new_ids:
            stream(prompt)
        new_ids.append(int(tokens[0]))
        text = lm.tokenizer.decode(_until_end(new_ids, lm.eos_ids))
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its end
            return
        stream(text[shown:])
        shown = len(text)

    ids = sample(
        lm.model,
        batch,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        use_cache=use_cache,
        on_token=on_token if stream is not None else None,
        eos_ids=lm.eos_ids,
    )
    return [
        lm.tokenizer.decode(_until_end(row[len(prompt_ids) :].tolist(), lm.eos_ids)) for row in ids
    ]


def _until_end(ids: list[int], eos_ids: Sequence[int]) -> list[int]:
    """The ids before the first end token."""
    ends = [index for index, token in enumerate(ids) if token in eos_ids]
    return ids[: ends[0]] if ends else ids


#: The language model's model type (``qkv.models.register_model``'s name).
LM_MODEL = "lm"
SIZES = sizes_of(LM_MODEL)


@dataclass(frozen=True)
class LMSetup:
    """What to train on and which language model to build (the trainer's knobs: TrainConfig).

    data: ``kjv`` or a UTF-8 text file (split as :mod:`qkv.data.text` states).
    init_from: fine-tune: a Hugging Face folder of a gpt2, llama, qwen2 or mistral model,
        or a run of `qkv train lm` (see :mod:`qkv.tasks.lm_start`).  The model and its
        tokenizer come from it: arch, size, positions, tokenizer, vocab_size, num_kv_heads,
        window and window_pattern are refused when set to anything but their defaults or
        the start's own values; context defaults to the model's positions, at most 256;
        dropout to the start's (a folder's: 0); pack opens each document with the folder's
        BOS token (refused when it has none).
    arch: the architecture (:data:`qkv.models.ARCHITECTURES`): "llama" (the default:
        RMSNorm, SwiGLU, RoPE, untied output: over three seeds on kjv at a fixed wall
        clock, 0.7 % lower validation loss than "gpt" with the same optimizer, every seed
        below every seed of gpt's; see docs/benchmarks.md), "gpt" (GPT-2's LayerNorm, GELU, learned
        positions, tied output) or "nanochat" (parameter-free RMSNorm, ReLU^2, RoPE,
        QK-norm, soft-capped logits).
    size: "small" (4 x 128, context 64) or "medium" (6 x 384, context 256).
    context: tokens per training window (None: the size's); a fresh model's ``max_len``.
    positions: "learned", "sinusoidal", "rope" or "alibi" (None: the architecture's).
    tokenizer: "char" or "bytebpe"; vocab_size for bytebpe.
    num_kv_heads: grouped key/value heads (None: one per query head).
    dropout: overrides the size's dropout (None: keep it).
    window: sliding-window causal attention over the last W positions (None: full causal).
    window_pattern: which layers use the window, a string of S (window) and L (full) tiled
        over the layers, the last layer always full (e.g. "SSSL"); None: every layer.
    pack: train on documents packed end to end into every window, each opened by ``<s>``,
        attention blocked across their boundaries and positions restarting at each (the
        documents: verses of ``kjv``, blank-line-separated paragraphs of a file; see
        :func:`qkv.data.text.split_documents`).  Validation is packed the same way.
    batch_size: windows per batch: the run's ``max_tokens`` unless one is given.
    """

    data: str = setup_field("kjv", "kjv or a UTF-8 text file")
    init_from: str | None = setup_field(
        None,
        "fine-tune: a Hugging Face gpt2, llama, qwen2 or mistral folder (config.json, "
        "model.safetensors, tokenizer.json), or a run of `qkv train lm`. Its model and its "
        "tokenizer are used; the options that build a model ("
        + ", ".join("--" + name.replace("_", "-") for name in START_FIELDS)
        + ") are refused unless left at their defaults or equal to its own",
    )
    arch: str = setup_field(
        "llama",
        "the architecture: llama (RMSNorm, SwiGLU, RoPE, untied output; exports as Llama), "
        "gpt (GPT-2's LayerNorm, GELU, learned positions, tied output; exports as GPT-2) or "
        "nanochat (parameter-free RMSNorm, ReLU^2, RoPE, QK-norm, soft-capped logits)",
        choices=tuple(ARCHITECTURES),
    )
    size: str = setup_field(
        "small",
        "; ".join(f"{size}: {PRESETS[(LM_MODEL, size)].summary}" for size in SIZES),
        choices=SIZES,
    )
    context: int | None = setup_field(
        None,
        "tokens per training window (default: the size's; with --init-from, the "
        f"model's positions, at most {FINETUNE_CONTEXT})",
    )
    positions: str | None = setup_field(
        None,
        "learned, sinusoidal, rope or alibi (the last three extend past --context; "
        "default: the architecture's, gpt learned, llama and nanochat rope)",
    )
    tokenizer: str = setup_field("char", "char or byte-level BPE", choices=TEXT_TOKENIZER_KINDS)
    vocab_size: int = setup_field(4096, "byte-level BPE vocabulary")
    num_kv_heads: int | None = setup_field(None, "grouped key/value heads (default: all)")
    window: int | None = setup_field(
        None, "attend to the last W positions only (sliding window on the flex kernel)"
    )
    window_pattern: str | None = setup_field(
        None,
        "which layers use --window: S (window) and L (full attention) tiled over "
        "the layers, the last always full, e.g. SSSL (default: every layer)",
    )
    pack: bool = setup_field(
        False,
        "pack documents end to end into each window, attention and positions kept inside "
        "each document (kjv: a verse is a document; a text file: paragraphs separated by a blank "
        "line); with --init-from each opens with the folder's BOS token",
    )
    dropout: float | None = setup_field(
        None,
        "dropout, overriding the size's default (with --init-from: the model's; a "
        "folder's loads with 0)",
    )
    batch_size: int = setup_field(12, "windows per batch; sets --max-tokens unless that is given")

    def __post_init__(self) -> None:
        check_choices(self, ("arch", "size", "tokenizer"))
        if self.context is not None and self.context < 2:
            raise InputError(
                f"context={self.context} must be at least 2 tokens", fields=("context",)
            )
        if self.window is not None and self.window < 1:
            raise InputError(
                f"window={self.window} must be at least 1 position (omit it for full attention)",
                fields=("window",),
            )
        if self.window_pattern is not None:
            if self.window is None:
                raise InputError(
                    f"window_pattern={self.window_pattern!r} says which layers use the window, "
                    "but no window is given: add --window W",
                    fields=("window_pattern",),
                )
            window_layers_of(self.window_pattern, 2)  # the letters, checked early
        if isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise InputError(
                f"batch_size={self.batch_size} must be at least 1 window", fields=("batch_size",)
            )
        if isinstance(self.init_from, Path):  # kept as text: the setup goes into JSON
            object.__setattr__(self, "init_from", str(self.init_from))
        if self.init_from is not None and not isinstance(self.init_from, str):
            raise InputError(
                f"init_from={self.init_from!r} must be a folder's path", fields=("init_from",)
            )

    @property
    def context_length(self) -> int:
        """The training window: ``context``, else the size's (fine-tuning: the start's
        model's positions, at most 256)."""
        if self.context is not None:
            return self.context
        if self.init_from is not None:
            return read_start(self.init_from).default_context
        return preset_for(LM_MODEL, self.size).model["max_len"]


def lm_preset(setup: LMSetup) -> Preset:
    """The size's preset (fine-tuning: :data:`~qkv.tasks.presets.LM_FINETUNE`), its batch
    ``batch_size`` windows of the setup's context."""
    preset = LM_FINETUNE if setup.init_from is not None else preset_for(LM_MODEL, setup.size)
    batch = {"max_tokens": setup.batch_size * (setup.context_length + 1)}
    return dataclasses.replace(preset, train={**preset.train, **batch})


def lm_config(setup: LMSetup, vocab_size: int) -> LMConfig:
    """The model a setup asks for, over a vocabulary of ``vocab_size`` ids: the size's
    preset in the setup's architecture (a gated feed-forward takes its own width)."""
    fields = dict(preset_for(LM_MODEL, setup.size).model)
    if ARCHITECTURES[setup.arch]["feed_forward"] == "gated":
        fields.pop("d_ff", None)  # SwiGLU's 8/3 d_model: as many parameters as the 4x MLP
    if setup.dropout is not None:
        fields["dropout"] = setup.dropout
    if setup.positions is not None:
        fields["positions"] = setup.positions
    if setup.window_pattern is not None:
        fields["window_layers"] = window_layers_of(setup.window_pattern, fields["num_layers"])
    fields.update(
        max_len=setup.context_length,
        num_kv_heads=setup.num_kv_heads,
        window=setup.window,
        document_start=BOS_ID if setup.pack else None,
    )
    return architecture_config(setup.arch, vocab_size, **fields)


def encode_text(
    tokenizer: Tokenizer | FolderTokenizer, text: str, *, special_tokens: bool = True
) -> torch.Tensor:
    """The ids of a whole text, (N,) long: qkv's byte-level BPE line by line (in parallel),
    a model folder's tokenizer on the whole text at once, as the folder's model read text,
    with the special tokens its post-processor adds (Llama's BOS) unless ``special_tokens``
    is False.  qkv's own tokenizers add none."""
    if hasattr(tokenizer, "encode_lines"):
        lines = text.splitlines(keepends=True)
        return torch.tensor([i for ids in tokenizer.encode_lines(lines) for i in ids])
    if isinstance(tokenizer, FolderTokenizer):
        ids = tokenizer.encode(text, add_special_tokens=special_tokens)
        return torch.tensor(ids, dtype=torch.long)
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def encode_documents(
    tokenizer: Tokenizer | FolderTokenizer, documents: list[str], *, bos: int = BOS_ID
) -> torch.Tensor:
    """The ids of ``documents`` packed end to end, each opened by ``bos`` (qkv's ``<s>``, or
    a model folder's BOS token) and nothing else, (N,) long."""
    parts = [torch.zeros(0, dtype=torch.long)]
    for text in documents:
        ids = encode_text(tokenizer, text, special_tokens=False).long()
        parts += [torch.tensor([bos]), ids]
    return torch.cat(parts)


def _read(setup: LMSetup) -> TextCorpus:
    """The corpus; with ``pack``, refused early if it has fewer than two documents."""
    corpus = load_text(setup.data)
    if setup.pack and len(split_documents(corpus, corpus.train)) < 2:
        raise InputError(
            f"pack=True packs documents, and {corpus.name} has none to pack: a text file's "
            "documents are its paragraphs, separated by a blank line, and this one has no "
            "blank line; put a blank line between its documents, or train without pack",
            fields=("pack",),
        )
    return corpus


def _prepare(setup: LMSetup, say) -> LMSetup:
    """Fine-tuning: the setup with what ``init_from`` decides (checked, said in one line)."""
    return setup if setup.init_from is None else fit_setup_to_start(setup, say)


def _start(setup: LMSetup, corpus: TextCorpus) -> LMStart:
    """A fresh run's start: ``init_from``'s model and tokenizer, or a tokenizer trained on
    the text."""
    if setup.init_from is not None:
        return load_start(setup)
    tokenizer = train_text_tokenizer(setup.tokenizer, corpus.train, vocab_size=setup.vocab_size)
    return LMStart(tokenizer)


def _saved_start(out_dir: Path) -> LMStart:
    """A resumed run's start: the tokenizer (and end tokens) its checkpoints keep."""
    with reading_errors(CheckpointError):
        checkpoint = load_checkpoint(out_dir, load_tokenizers=True)
        tokenizer = checkpoint.tokenizers[TOKENIZER_FILE]
    return LMStart.of_run(tokenizer, checkpoint.metadata)


def _build(setup: LMSetup, corpus: TextCorpus, start: LMStart) -> DecoderLM:
    if setup.init_from is None:
        return DecoderLM(lm_config(setup, start.tokenizer.vocab_size))
    # resuming: the start's network again (the trainer then loads the run's weights into it)
    return start.model if start.model is not None else load_start(setup).model


def _datasets(setup: LMSetup, model: DecoderLM, corpus, start: LMStart) -> TaskData:
    tokenizer = start.tokenizer

    def stream(text: str) -> torch.Tensor:
        if setup.pack:  # the model's own document token: qkv's <s>, or a folder's BOS
            bos = model.config.document_start
            return encode_documents(tokenizer, split_documents(corpus, text), bos=bos)
        return encode_text(tokenizer, text)

    context = setup.context_length
    # qkv's tokenizers keep id 0 for padding; in a model folder's vocabulary it is a word
    pad_id = NO_PAD_ID if isinstance(tokenizer, FolderTokenizer) else PAD_ID
    train_data = TextDataset(stream(corpus.train), context=context, pad_id=pad_id)
    valid_data = None
    if corpus.valid:
        valid_data = TextDataset(stream(corpus.valid), context=context, pad_id=pad_id)
    # a fine-tuned model still ends its texts with its start's end token (generate stops
    # there), and a run that starts from this one packs with its start's BOS
    metadata = start.metadata() if setup.init_from is not None else {}
    return TaskData(train_data, valid_data, metadata=metadata)


#: The language model's parts of the shared skeleton (its "vocabulary" is an LMStart: the
#: tokenizer, and when fine-tuning the model it starts from).
LM = TaskSpec(
    task="lm",
    preset=lm_preset,
    prepare=_prepare,
    read=_read,
    vocabulary=_start,
    saved_vocabulary=_saved_start,
    tokenizers=lambda start: {TOKENIZER_FILE: start.tokenizer},
    build=_build,
    datasets=_datasets,
)


def train_lm(
    setup: LMSetup, config: TrainConfig, out_dir: str | Path, *, resume: bool = False
) -> TrainResult:
    """Train a language model; checkpoints (weights, config, tokenizer) go to ``out_dir``.

    With ``resume`` the tokenizer comes from the run's last checkpoint, so the run continues
    exactly where it stopped; a different setup is refused by the trainer.  A run with
    ``setup.init_from`` resumes from its own checkpoints too, but reads the start's folder
    again for its network (keep it in place)."""
    return train_task(LM, setup, config, out_dir, resume=resume)


def load_lm(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """A trained language model (eval mode) and its tokenizer, from a run folder or a step
    folder, with the run's setup (None: a run written without one) and its end tokens (a
    model fine-tuned from a folder keeps the folder's; qkv's own LMs learn from running text
    without one, and generation runs to its length)."""
    checkpoint = load_checkpoint(path, map_location=device, expect_type=LM_MODEL)
    if TOKENIZER_FILE not in checkpoint.tokenizers:
        raise CheckpointError(
            f"{checkpoint.directory} has no tokenizer file; was it trained by qkv?"
        )
    fields = checkpoint.metadata.get("setup")
    setup = LMSetup(**fields) if isinstance(fields, dict) else None
    tokenizer = checkpoint.tokenizers[TOKENIZER_FILE]
    eos_ids = LMStart.of_run(tokenizer, checkpoint.metadata).eos_ids
    return LoadedModel(
        checkpoint.model.eval(),
        tokenizer,
        "qkv lm",
        LM_MODEL,
        source=str(path),
        eos_ids=eos_ids,
        setup=setup,
    )


def lm_of(loaded: LoadedModel) -> tuple[DecoderLM, LMSetup | None]:
    """The network and the run's setup of a language model :func:`load_lm` read (or a
    folder's, whose setup is None); another model is an InputError."""
    if not isinstance(loaded.model, DecoderLM):
        raise InputError(
            f"{loaded.source or 'the model'} is a {loaded.name} model, not a language model"
        )
    return loaded.model, loaded.setup if isinstance(loaded.setup, LMSetup) else None


def __getattr__(name: str) -> object:
    # LoadedLM went when every loader came to return one LoadedModel (kept for one release)
    if name == "LoadedLM":
        import warnings

        warnings.warn(
            "qkv.tasks.lm.LoadedLM is deprecated: load_lm returns qkv.models.LoadedModel; the "
            "alias goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return LoadedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
