"""Where a language model's training starts: a fresh model, or a model that already exists.

``LMSetup(init_from=DIR)`` (``qkv train lm --init-from DIR``) fine-tunes: the network, its
weights and its tokenizer come from DIR, which is either

- a Hugging Face folder of a decoder-only model -- ``config.json``, ``model.safetensors``
  (or shards) and ``tokenizer.json`` of model_type gpt2, llama, qwen2 or mistral -- read by
  :func:`qkv.pretrained.load_pretrained`, or
- a run of `qkv train lm` (a run folder or one of its step folders): its model and its
  tokenizer.

:func:`read_start` reads what the setup must agree with before any weight is read (the
architecture, the positions, the token that opens a document); :func:`fit_setup_to_start`
checks the setup against it and fills in what the start decides; :func:`load_start` loads
the model and its tokenizer.  The model keeps every size of the start; only its dropout
(``setup.dropout``; a folder's loads with 0) and, when documents are packed, the token
that opens each document (the folder's BOS) are the setup's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.batch import BOS_ID
from ..errors import CheckpointError, InputError, MissingFileError
from ..models import DecoderLM
from ..pretrained import LLAMA_FAMILIES, load_pretrained
from ..pretrained.files import read_config
from ..pretrained.gpt2 import gpt2_config_from_hf
from ..pretrained.llama import llama_config_from_hf
from ..training import load_checkpoint, read_pointer

__all__ = [
    "TOKENIZER_FILE",
    "FINETUNE_CONTEXT",
    "START_FIELDS",
    "StartFacts",
    "LMStart",
    "read_start",
    "fit_setup_to_start",
    "load_start",
]

#: The name of a language-model run's tokenizer in its checkpoints.
TOKENIZER_FILE = "tokenizer"
#: The longest training window a fine-tuning run takes when no context is given: a
#: pretrained model reads far more positions (GPT-2 1,024, Llama thousands), and windows
#: that long make every step slow on a CPU.
FINETUNE_CONTEXT = 256
#: The setup fields that shape a fresh model or its tokenizer: with ``init_from`` the start
#: decides them, and a value set away from its default must agree with the start's.
START_FIELDS = (
    "arch",
    "size",
    "positions",
    "tokenizer",
    "vocab_size",
    "num_kv_heads",
    "window",
    "window_pattern",
)
#: config.json's model_type -> the qkv architecture that family's folders load as.
_FOLDER_ARCHITECTURES = {"gpt2": "gpt", **{family: "llama" for family in LLAMA_FAMILIES}}
_READS = (
    "init_from reads a Hugging Face folder of a gpt2, llama, qwen2 or mistral model "
    "(config.json, model.safetensors, tokenizer.json) or a run of `qkv train lm`"
)


@dataclass(frozen=True)
class StartFacts:
    """What a start says before its weights are read.

    path: the folder given.  family: config.json's model_type (gpt2, llama, qwen2, mistral),
    or "qkv" for a run of `qkv train lm`.
    fields: the values of :data:`START_FIELDS` the start fixes (a folder: its architecture;
    a run: its setup's).
    max_len: the positions the model was built for; limit: the longest window it reads
    (None: its positions extend to any length).
    bos: the token that opens a document, for packing (None: the folder has none).
    summary: the model in a few words, for the line a run prints."""

    path: str
    family: str
    fields: dict[str, Any]
    max_len: int
    limit: int | None
    bos: int | None
    summary: str

    @property
    def default_context(self) -> int:
        """The training window when none is given: the model's positions, at most
        :data:`FINETUNE_CONTEXT`."""
        return min(self.max_len, FINETUNE_CONTEXT)


@dataclass(frozen=True)
class LMStart:
    """What a language-model run starts from, besides its setup: the tokenizer, the model
    (None: built from the setup, or loaded again when a fine-tuning run resumes), the ids
    that end a text (a folder's ``eos_token_id``; qkv's own models have none) and the id
    that opens a document (qkv's ``<s>``, a folder's BOS, None when it has none)."""

    tokenizer: Any
    model: DecoderLM | None = None
    eos_ids: tuple[int, ...] = ()
    bos: int | None = BOS_ID

    def metadata(self) -> dict[str, Any]:
        """What a fine-tuning run's checkpoints keep of its start, for generation and for a
        run that starts from this one: ``eos_ids`` and ``bos_id``."""
        return {"eos_ids": list(self.eos_ids), "bos_id": self.bos}

    @classmethod
    def of_run(cls, tokenizer: Any, metadata: dict[str, Any], model: DecoderLM | None = None):
        """The start a run's checkpoint records (see :meth:`metadata`; a run trained from
        scratch: no end token, qkv's ``<s>``)."""
        bos = model.config.document_start if model is not None else None
        if bos is None:
            bos = metadata.get("bos_id", BOS_ID)
        return cls(tokenizer, model, tuple(metadata.get("eos_ids", ())), bos)


def read_start(path: str | Path) -> StartFacts:
    """The facts of the start at ``path`` (see :class:`StartFacts`), read from its config;
    a folder that holds no decoder-only model is refused in one line (InputError,
    MissingFileError or CheckpointError)."""
    folder = Path(path)
    if not folder.is_dir():
        raise MissingFileError(
            f"init_from={str(path)!r} is not a folder; {_READS}", fields=("init_from",)
        )
    if (folder / "config.json").is_file():
        config = read_config(folder)
        if "model" in config and "metadata" in config:  # a step folder written by qkv
            return _run_facts(folder)
        return _folder_facts(folder, config)
    if read_pointer(folder, "last") is not None or read_pointer(folder, "best") is not None:
        return _run_facts(folder)
    found = sorted(entry.name for entry in folder.iterdir())[:8]
    raise InputError(
        f"init_from={str(path)!r} holds no model (no config.json, no last.json; found "
        f"{found}); {_READS}",
        fields=("init_from",),
    )


def _folder_facts(folder: Path, hf: dict[str, Any]) -> StartFacts:
    family = hf.get("model_type")
    if family not in _FOLDER_ARCHITECTURES:
        what = "an encoder, with no next-token head" if family == "bert" else "not one of them"
        raise InputError(
            f"init_from={str(folder)!r} holds a model_type={family!r} model ({what}); {_READS}",
            fields=("init_from",),
        )
    read = gpt2_config_from_hf if family == "gpt2" else llama_config_from_hf
    config = read(hf)  # a config that cannot load is refused here, before any weight is read
    bos = hf.get("bos_token_id")
    bos = bos if isinstance(bos, int) and 0 <= bos < config.vocab_size else None
    limit = config.position_limit or (config.max_len if config.positions == "learned" else None)
    return StartFacts(
        path=str(folder),
        family=family,
        fields={"arch": _FOLDER_ARCHITECTURES[family]},
        max_len=config.max_len,
        limit=limit,
        bos=bos,
        summary=_summary(family, config),
    )


def _run_facts(folder: Path) -> StartFacts:
    checkpoint = load_checkpoint(folder, expect_type="lm", load_tokenizers=False)
    config, setup = checkpoint.config, checkpoint.metadata.get("setup")
    start = LMStart.of_run(None, checkpoint.metadata, checkpoint.model)
    fields = {name: setup[name] for name in START_FIELDS if name in setup} if setup else {}
    return StartFacts(
        path=str(folder),
        family="qkv",
        fields=fields,
        max_len=config.max_len,
        limit=checkpoint.model.max_positions,
        # the document token the run packed with, else its start's (qkv's <s>, a folder's BOS)
        bos=start.bos,
        summary=_summary("qkv", config),
    )


def _summary(family: str, config: Any) -> str:
    what = "a qkv run's model" if family == "qkv" else f"a {family} model"
    return f"{what}, {config.num_layers} layers x {config.d_model} wide, {config.max_len} positions"


def fit_setup_to_start(setup: Any, say: Callable[[str], object]) -> Any:
    """``setup`` (an LMSetup) with what its ``init_from`` decides: the start's architecture
    (a run's: every field of :data:`START_FIELDS`) and the training window (``context``,
    when not given: :attr:`StartFacts.default_context`), told through ``say`` in one line.

    Refused (InputError, naming the fields): a field of START_FIELDS set away from its
    default to another value than the start's; a context longer than the start's model
    reads; packing documents with a folder that has no BOS token."""
    facts = read_start(setup.init_from)
    defaults = {item.name: item.default for item in dataclasses.fields(setup)}
    conflicting = [
        name
        for name in START_FIELDS
        if getattr(setup, name) != defaults[name]
        and (name not in facts.fields or getattr(setup, name) != facts.fields[name])
    ]
    if conflicting:
        values = ", ".join(f"{name}={getattr(setup, name)!r}" for name in conflicting)
        raise InputError(
            f"init_from={facts.path!r} gives the model and its tokenizer ({facts.summary}), "
            f"so {values} cannot apply; leave {'it' if len(conflicting) == 1 else 'them'} out",
            fields=tuple(conflicting),
        )
    if setup.context is not None and facts.limit is not None and setup.context > facts.limit:
        raise InputError(
            f"context={setup.context} is longer than the {facts.limit} positions the model of "
            f"init_from={facts.path!r} reads; give a context of at most {facts.limit}",
            fields=("context",),
        )
    if setup.pack and facts.bos is None:
        source = f"{facts.path}/config.json"
        if facts.family == "qkv":
            source = f"the config.json of the folder {facts.path} was fine-tuned from"
        raise InputError(
            f"pack=True opens every document with the model's BOS token, and {source} names "
            "no bos_token_id; train without pack",
            fields=("pack",),
        )
    context = setup.context or facts.default_context
    fitted = dataclasses.replace(setup, **facts.fields, context=context)
    dropout = "the start's" if setup.dropout is None else setup.dropout
    say(f"init from {facts.path}: {facts.summary}; context {context}, dropout {dropout}")
    return fitted


def load_start(setup: Any) -> LMStart:
    """The model and tokenizer of ``setup.init_from`` (an LMSetup fitted by
    :func:`fit_setup_to_start`), ready to train: the start's network and weights with the
    setup's dropout (None: the start's; a folder's loads with 0) and, with ``pack``, the
    start's BOS opening every document (without, no document boundaries)."""
    facts = read_start(setup.init_from)
    if facts.family == "qkv":
        checkpoint = load_checkpoint(setup.init_from, expect_type="lm")
        if TOKENIZER_FILE not in checkpoint.tokenizers:
            raise CheckpointError(f"{checkpoint.directory} has no tokenizer file")
        model, tokenizer = checkpoint.model, checkpoint.tokenizers[TOKENIZER_FILE]
        eos_ids = LMStart.of_run(tokenizer, checkpoint.metadata).eos_ids
    else:
        loaded = load_pretrained(setup.init_from)
        # read_start refused every other family: the model is a DecoderLM
        model, tokenizer, eos_ids = loaded.model, loaded.tokenizer, loaded.eos_ids
    if tokenizer.vocab_size > model.config.vocab_size:
        raise CheckpointError(
            f"the tokenizer of {facts.path} has {tokenizer.vocab_size} tokens, more than the "
            f"{model.config.vocab_size} rows of its model's embedding: they are not one model's"
        )
    config = model.config.replace(
        dropout=model.config.dropout if setup.dropout is None else setup.dropout,
        document_start=facts.bos if setup.pack else None,
    )
    trained = DecoderLM(config)  # the dropout sites are built in: a new model, same weights
    trained.load_state_dict(model.state_dict(), strict=True)
    return LMStart(tokenizer, trained, tuple(eos_ids), facts.bos)
