"""The tasks' data: corpora, readers, tokenizers, datasets and batching."""

from . import tokenizers
from . import word_tokenizer as word_tokenizer  # registers the captions' tokenizer kind
from .batch import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Batch,
    Pair,
    collate,
    pad_sequences,
)
from .batching import TokenBatchSampler
from .corpora import (
    SPLITS,
    available_corpora,
    corpus_description,
    default_tokenizer_kind,
    load_corpus,
)
from .dataset import TranslationDataset
from .dates import DATE_FORMATS, dates_corpus, format_date
from .ding import DING_PATH, ding_de_en, parse_ding
from .readers import read_parallel, read_tsv
from .tokenizers import *  # noqa: F403  (re-exported whole: its __all__)

__all__ = [
    "Batch",
    "Pair",
    "collate",
    "pad_sequences",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "SPECIAL_TOKENS",
    "read_tsv",
    "read_parallel",
    "dates_corpus",
    "format_date",
    "DATE_FORMATS",
    "ding_de_en",
    "parse_ding",
    "DING_PATH",
    "load_corpus",
    "available_corpora",
    "corpus_description",
    "default_tokenizer_kind",
    "SPLITS",
    *tokenizers.__all__,
    "TranslationDataset",
    "TokenBatchSampler",
]
