"""Training a translator: the translation task's parts of the shared skeleton (``task``).

Every translation model (``transformer``, ``rnn-attention``, ``rnn``) goes through the same
:data:`TRANSLATION` spec; only :data:`MODEL_BUILDERS` knows how to
build each one, and the sizes are the presets of :mod:`qkv.tasks.presets`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..data import (
    Batch,
    TranslationDataset,
    default_tokenizer_kind,
    load_corpus,
    train_tokenizer,
    training_texts,
)
from ..data.tokenizers import Tokenizer
from ..errors import CheckpointError, DataError, InputError
from ..layers import available_scores
from ..models import LoadedModel, RNNConfig, TransformerConfig, build_model
from ..training import TrainConfig, TrainResult, load_checkpoint
from ..training.state import default_batches
from .presets import SMALL_DATA_TRANSFORMER, Preset, preset_for, sizes_of
from .task import TaskData, TaskSpec, check_choices, setup_field, train_task
from .translator import Translator, reading_errors

__all__ = [
    "TranslationSetup",
    "MODEL_BUILDERS",
    "TRANSLATION",
    "build_translation_model",
    "train_translation",
    "SIZES",
    "family_of",
    "translation_preset",
]


SIZES = sizes_of("transformer")
# what --help says of the sizes (the presets are the one record of them)
_SMALL = SMALL_DATA_TRANSFORMER
_SIZES = "; ".join(f"{size}: {preset_for('transformer', size).summary}" for size in SIZES)
_VOCAB = ", ".join(f"{size} {preset_for('transformer', size).vocab_size}" for size in SIZES)


def family_of(model: str) -> str:
    """The preset family of a translation model type."""
    return "transformer" if model == "transformer" else "rnn"


def translation_preset(setup: TranslationSetup) -> Preset:
    return preset_for(family_of(setup.model), setup.size)


def _transformer(setup: TranslationSetup, vocab_size: int) -> TransformerConfig:
    start = TransformerConfig.base if setup.size == "base" else TransformerConfig.small
    return start(
        vocab_size,
        share_embeddings=True,
        tie_output=True,
        max_len=setup.max_len + 2,
        **{**translation_preset(setup).model, **setup.dropout_overrides()},
    )


def _rnn(attention: str | None) -> Callable[[TranslationSetup, int], RNNConfig]:
    def build(setup: TranslationSetup, vocab_size: int) -> RNNConfig:
        return RNNConfig(
            vocab_size,
            **{**translation_preset(setup).model, **setup.dropout_overrides()},
            attention=setup.score if attention is None else attention,
            share_embeddings=True,
            max_len=setup.max_len + 2,
        )

    return build


#: model type -> config builder(setup, joint vocabulary size)
MODEL_BUILDERS: dict[str, Callable[[TranslationSetup, int], Any]] = {
    "transformer": _transformer,
    "rnn-attention": _rnn(None),
    "rnn": _rnn("none"),
}


def build_translation_model(setup: TranslationSetup, vocab_size: int) -> nn.Module:
    return build_model(setup.model, MODEL_BUILDERS[setup.model](setup, vocab_size))


TOKENIZER_FILE = "tokenizer"
TOKENIZERS = ("auto", "char", "bpe")


@dataclass(frozen=True)
class TranslationSetup:
    """What to train on and which model to build (the trainer's knobs are a TrainConfig).

    data: a corpus name (``dates``, ``ding-de-en``, ``bible-en-es``) or a file (``x.tsv``,
        ``src.txt,tgt.txt``; ``{split}`` in the path is replaced by train/valid/test).
    valid: a validation file when ``data`` is a file without ``{split}`` (None: the corpus's
        own valid split, or no validation).
    model: "transformer", "rnn-attention" or "rnn" (the no-attention baseline).
    size: "small" (CPU-sized, for the dates task), "medium" (for corpora of ~10-100k
        sentence pairs such as ding-de-en: a 3 + 3 block, 256-wide Transformer, dropout 0.3),
        "small-data" (low-resource recipes chosen on ding-de-en's valid split: ``medium``'s
        widths, 4,000 BPE tokens, the plateau schedule; see
        ``presets.SMALL_DATA_TRANSFORMER``) or "base" (the paper's Transformer; a 512-wide
        RNN).
    dropout: overrides the size's dropout (None: keep it).
    attention_dropout / activation_dropout / word_dropout: override the size's rates of the
        Transformer's dropout sites (see ``TransformerConfig``; None: keep them).  The RNNs
        have none of them, so setting one for an RNN is refused.
    score: the RNN's attention score ("additive", "dot", "general").
    tokenizer: "auto" (char for dates, BPE otherwise), "char" or "bpe"; vocab_size for BPE
        (None: 4,000 for ``small-data``, 8,000 otherwise).
    max_len: longest source / target in tokens; longer ones are truncated with a warning.
    max_words: drop training pairs with more source words than this (None: keep all).
    valid_bleu_sentences: how many validation sentences are decoded (greedy) for BLEU.
    """

    model: str = setup_field("transformer", "model type", choices=tuple(MODEL_BUILDERS))
    data: str = setup_field("dates", "corpus name or file(s)")
    valid: str | None = setup_field(None, "validation file, when --data is a single file")
    size: str = setup_field("small", f"model size ({_SIZES}; see docs/results.md)", choices=SIZES)
    dropout: float | None = setup_field(None, "dropout, overriding the size's default")
    attention_dropout: float | None = setup_field(
        None,
        "Transformer only: dropout on the attention weights (default: the "
        f"size's: {_SMALL['attention_dropout']:g} for small-data, else --dropout)",
    )
    activation_dropout: float | None = setup_field(
        None,
        "Transformer only: dropout on the feed-forward's hidden activations "
        f"(default: the size's: {_SMALL['activation_dropout']:g} for small-data, else --dropout)",
    )
    word_dropout: float | None = setup_field(
        None,
        "Transformer only: in training, the probability that a whole input "
        f"token's embedding is zeroed (default: the size's: {_SMALL['word_dropout']:g} for "
        "small-data, else 0)",
    )
    score: str = setup_field(
        "additive",
        "RNN attention score (additive is Bahdanau's)",
        choices=tuple(available_scores()),
    )
    tokenizer: str = setup_field("auto", "auto: char for dates, BPE otherwise", choices=TOKENIZERS)
    vocab_size: int | None = setup_field(
        None, f"BPE vocabulary size (default: the size's: {_VOCAB})"
    )
    max_len: int = setup_field(
        128, "longest sentence in tokens; longer ones are truncated with a warning"
    )
    max_words: int | None = setup_field(None, "drop training pairs whose source has more words")
    valid_bleu_sentences: int = setup_field(300, "validation sentences decoded (greedy) for BLEU")

    def __post_init__(self) -> None:
        if self.model not in MODEL_BUILDERS:
            raise InputError(
                f"unknown translation model {self.model!r}; choose from {list(MODEL_BUILDERS)}",
                fields=("model",),
            )
        check_choices(self, ("size", "tokenizer"))
        for name, rate in self.dropout_overrides().items():
            if not 0.0 <= rate < 1.0:
                raise InputError(f"{name}={rate} must lie in [0, 1)", fields=(name,))
            if name != "dropout" and self.model != "transformer":
                raise InputError(
                    f"{name}={rate} is a Transformer dropout site; model={self.model!r} has "
                    "none (its only rate is dropout)",
                    fields=(name, "model"),
                )
        if self.vocab_size is not None:
            _check_count("vocab_size", self.vocab_size, 8)
        for name, least in (("max_len", 1), ("valid_bleu_sentences", 0)):
            _check_count(name, getattr(self, name), least)
        if self.max_words is not None:
            _check_count("max_words", self.max_words, 1)

    def dropout_overrides(self) -> dict[str, float]:
        """The dropout rates given, by config field name (None: the size's)."""
        names = ("dropout", "attention_dropout", "activation_dropout", "word_dropout")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    @property
    def bpe_vocab_size(self) -> int:
        """The BPE vocabulary to train: ``vocab_size``, or the size's default."""
        if self.vocab_size is not None:
            return self.vocab_size
        return translation_preset(self).vocab_size


def _check_count(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name}={value!r} must be a whole number >= {least}", fields=(name,))


def _splits(setup: TranslationSetup) -> tuple[list, list]:
    train_pairs = load_corpus(setup.data, "train")
    if setup.max_words is not None:
        train_pairs = [p for p in train_pairs if len(p.source.split()) <= setup.max_words]
    if setup.valid is not None:
        valid_pairs = load_corpus(setup.valid, "valid")
    elif "{split}" in setup.data or setup.data in _named_corpora():
        valid_pairs = load_corpus(setup.data, "valid")
    else:
        valid_pairs = []
    if not train_pairs:
        raise DataError(f"{setup.data!r} has no training pairs", fields=("data",))
    return train_pairs, valid_pairs


def _named_corpora() -> list[str]:
    from ..data import available_corpora

    return available_corpora()


def _tokenizer(setup: TranslationSetup, splits: tuple[list, list]) -> Tokenizer:
    kind = default_tokenizer_kind(setup.data) if setup.tokenizer == "auto" else setup.tokenizer
    return train_tokenizer(kind, training_texts(splits[0]), vocab_size=setup.bpe_vocab_size)


def _saved_tokenizer(out_dir: Path) -> Tokenizer:
    with reading_errors(CheckpointError):
        previous = load_checkpoint(out_dir, load_tokenizers=True)
    return previous.tokenizers[TOKENIZER_FILE]


def _datasets(
    setup: TranslationSetup, model: nn.Module, splits: tuple[list, list], tokenizer: Tokenizer
) -> TaskData:
    train_pairs, valid_pairs = splits
    lengths = dict(max_source_len=setup.max_len, max_target_len=setup.max_len + 2)
    train_data = TranslationDataset(train_pairs, tokenizer, tokenizer, **lengths)
    sample = functools.partial(_sample, train_data)
    if not valid_pairs:
        return TaskData(train_data, sample=sample)
    valid_data = TranslationDataset(valid_pairs, tokenizer, tokenizer, **lengths)
    bleu_pairs = valid_pairs[: setup.valid_bleu_sentences]
    evaluate = _bleu_callback(tokenizer, bleu_pairs, setup.max_len)
    return TaskData(train_data, valid_data, evaluate, sample=sample)


#: The translation task's parts of the shared skeleton.
TRANSLATION = TaskSpec(
    task="translation",
    preset=translation_preset,
    read=_splits,
    vocabulary=_tokenizer,
    saved_vocabulary=_saved_tokenizer,
    tokenizers=lambda tokenizer: {TOKENIZER_FILE: tokenizer},
    build=lambda setup, splits, tokenizer: build_translation_model(setup, tokenizer.vocab_size),
    datasets=_datasets,
)


def train_translation(
    setup: TranslationSetup, config: TrainConfig, out_dir: str | Path, **options: Any
) -> TrainResult:
    """Train a translator; checkpoints (weights, config, tokenizer) go to ``out_dir``.

    With ``resume`` the tokenizer and model come from the run's last checkpoint, so the run
    continues exactly where it stopped; a different setup is refused by the trainer.
    ``options``: ``resume``, ``schedule`` (the size's recipe fitted to the run's budget for
    what the user did not give) and ``say``, as :func:`qkv.tasks.task.train_task` takes them."""
    return train_task(TRANSLATION, setup, config, out_dir, **options)


def _sample(data: TranslationDataset, config: TrainConfig) -> tuple[Batch, int]:
    """The first training batch under ``config`` and the updates per epoch."""
    batches = default_batches(data, config, rank=0, world_size=1).batches(0)
    return data.collate(batches[0]), max(len(batches) // config.accumulate, 1)


def _bleu_callback(tokenizer: Tokenizer, pairs: list, max_len: int):
    def evaluate(model: nn.Module) -> dict[str, float]:
        # the model in training, scored as the translator it is becoming
        loaded = LoadedModel(model, tokenizer, type(model).__name__, "")
        translator = Translator(loaded, max_len=max_len)
        hypotheses = [t.text for t in translator.translate([p.source for p in pairs], beam=1)]
        from ..evaluation import corpus_scores

        scores = corpus_scores(hypotheses, [p.target for p in pairs])
        return {"bleu": scores.bleu, "exact_match": scores.exact_match}

    return evaluate
