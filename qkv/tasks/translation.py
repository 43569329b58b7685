"""Training a translator: data -> tokenizer -> model -> the shared trainer.

Every translation model (``transformer``, ``rnn-attention``, ``rnn``) goes through the same
function; only :data:`MODEL_BUILDERS` (``translation_models``) knows how to size each one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
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
from ..errors import CheckpointError, DataError, InputError, RunError
from ..training import TrainConfig, TrainResult, load_checkpoint, read_pointer, train
from ..training.recipes import UserSchedule, fit_train_config, recipe_for, resumed_schedule
from ..training.state import default_batches
from .translation_models import (
    DEFAULT_VOCAB_SIZE,
    MODEL_BUILDERS,
    SIZES,
    SMALL_DATA_VOCAB_SIZE,
    build_translation_model,
)
from .translator import Translator, reading_errors

__all__ = ["TranslationSetup", "MODEL_BUILDERS", "build_translation_model", "train_translation"]

TOKENIZER_FILE = "tokenizer"


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
        ``translation_models.SMALL_DATA_TRANSFORMER``) or "base" (the paper's Transformer;
        a 512-wide RNN).
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

    data: str = "dates"
    valid: str | None = None
    model: str = "transformer"
    size: str = "small"
    dropout: float | None = None
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    word_dropout: float | None = None
    score: str = "additive"
    tokenizer: str = "auto"
    vocab_size: int | None = None
    max_len: int = 128
    max_words: int | None = None
    valid_bleu_sentences: int = 300

    def __post_init__(self) -> None:
        if self.model not in MODEL_BUILDERS:
            raise InputError(
                f"unknown translation model {self.model!r}; choose from {list(MODEL_BUILDERS)}"
            )
        if self.size not in SIZES:
            raise InputError(f"unknown size {self.size!r}; choose from {list(SIZES)}")
        if self.tokenizer not in TOKENIZERS:
            raise InputError(f"unknown tokenizer {self.tokenizer!r}; choose from {TOKENIZERS}")
        for name, rate in self.dropout_overrides().items():
            if not 0.0 <= rate < 1.0:
                raise InputError(f"{name}={rate} must lie in [0, 1)")
            if name != "dropout" and self.model != "transformer":
                raise InputError(
                    f"{name}={rate} is a Transformer dropout site; model={self.model!r} has "
                    "none (its only rate is dropout)"
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
        return SMALL_DATA_VOCAB_SIZE if self.size == "small-data" else DEFAULT_VOCAB_SIZE


TOKENIZERS = ("auto", "char", "bpe")


def _check_count(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name}={value!r} must be a whole number >= {least}")


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
        raise DataError(f"{setup.data!r} has no training pairs")
    return train_pairs, valid_pairs


def _named_corpora() -> list[str]:
    from ..data import available_corpora

    return available_corpora()


def _tokenizer(setup: TranslationSetup, train_pairs: list) -> Tokenizer:
    kind = default_tokenizer_kind(setup.data) if setup.tokenizer == "auto" else setup.tokenizer
    return train_tokenizer(kind, training_texts(train_pairs), vocab_size=setup.bpe_vocab_size)


def train_translation(
    setup: TranslationSetup,
    config: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    schedule: UserSchedule | None = None,
    say: Callable[[str], object] | None = None,
) -> TrainResult:
    """Train a translator; checkpoints (weights, config, tokenizer) go to ``out_dir``.

    With ``resume`` the tokenizer and model come from the run's last checkpoint, so the run
    continues exactly where it stopped; a different setup is refused by the trainer.

    ``schedule`` None trains with ``config`` as it is.  A :class:`UserSchedule` lets the
    recipe of the model family and size (``qkv.training.recipes``) choose the learning rate,
    warm-up and batch tokens for this run's budget, except the values the user gave; a
    resumed run keeps the values it started with.  The choice is recorded in the checkpoint's metadata
    (``"schedule"``) and, when ``say`` is given, told in one line."""
    last = read_pointer(out_dir, "last")
    if not resume and last is not None:
        raise RunError(
            f"{out_dir} already holds a run (its last checkpoint is {last}); add --resume to "
            "continue it, or choose a new --out"
        )
    train_pairs, valid_pairs = _splits(setup)
    if resume:
        if last is None:
            raise RunError(
                f"--resume: {out_dir} has no checkpoint to resume from; drop --resume to start"
            )
        with reading_errors(CheckpointError):
            previous = load_checkpoint(out_dir, load_tokenizers=True)
        tokenizer = previous.tokenizers[TOKENIZER_FILE]
    else:
        tokenizer = _tokenizer(setup, train_pairs)
    torch.manual_seed(config.seed)  # the same command twice builds the same initial model
    model = build_translation_model(setup, tokenizer.vocab_size)
    max_len = setup.max_len
    train_data = TranslationDataset(
        train_pairs, tokenizer, tokenizer, max_source_len=max_len, max_target_len=max_len + 2
    )
    valid_data = None
    evaluate = None
    if valid_pairs:
        valid_data = TranslationDataset(
            valid_pairs, tokenizer, tokenizer, max_source_len=max_len, max_target_len=max_len + 2
        )
        sample = valid_pairs[: setup.valid_bleu_sentences]
        evaluate = _bleu_callback(tokenizer, sample, max_len)
    metadata = {"task": "translation", "setup": dataclasses.asdict(setup)}
    if schedule is not None:
        if resume:
            schedule = resumed_schedule(out_dir, schedule)
        family = "transformer" if setup.model == "transformer" else "rnn"
        config, chosen = fit_train_config(
            config,
            recipe_for(family, setup.size),
            schedule,
            model=model,
            sample=functools.partial(_sample, train_data),
        )
        metadata["schedule"] = chosen.as_dict()
        if say is not None:
            say(chosen.describe())
    if valid_data is None and config.schedule == "plateau":
        raise InputError(
            f"the plateau schedule (--size {setup.size}'s, or --schedule plateau) lowers the lr "
            f"when the validation loss stalls, and {setup.data!r} has no validation split: "
            "give --valid, or --schedule inverse_sqrt"
        )
    return train(
        model,
        train_data,
        valid_data,
        config,
        out_dir,
        evaluate=evaluate,
        metadata=metadata,
        tokenizers={TOKENIZER_FILE: tokenizer},
        resume=resume,
    )


def _sample(data: TranslationDataset, config: TrainConfig) -> tuple[Batch, int]:
    """The first training batch under ``config`` and the updates per epoch."""
    batches = default_batches(data, config, rank=0, world_size=1).batches(0)
    return data.collate(batches[0]), max(len(batches) // config.accumulate, 1)


def _bleu_callback(tokenizer: Tokenizer, pairs: list, max_len: int):
    def evaluate(model: nn.Module) -> dict[str, float]:
        translator = Translator(model, tokenizer, max_len=max_len)
        hypotheses = [t.text for t in translator.translate([p.source for p in pairs], beam=1)]
        from ..evaluation import corpus_scores

        scores = corpus_scores(hypotheses, [p.target for p in pairs])
        return {"bleu": scores.bleu, "exact_match": scores.exact_match}

    return evaluate
