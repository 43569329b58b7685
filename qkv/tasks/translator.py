"""Using a trained translator: translate, score against references, look at its attention."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..data import BOS_ID, PAD_ID, load_corpus, pad_sequences
from ..data.tokenizers import Tokenizer
from ..decoding import decode
from ..decoding.search import check_search
from ..errors import CheckpointError, DataError, InputError, QkvError
from ..evaluation import LengthBucket, Scores, bleu_by_length, corpus_scores
from ..explore import teacher_forced_attention
from ..models import LoadedModel
from ..training import checkpoint_model_type, load_checkpoint

__all__ = [
    "reading_errors",
    "Translation",
    "Translator",
    "load_translator",
    "TranslationReport",
    "evaluate_translation",
    "score_translator",
]

TRANSLATION_MODELS = ("transformer", "rnn-attention", "rnn")


@contextlib.contextmanager
def reading_errors(kind: type[QkvError]) -> Iterator[None]:
    """Name a file the user pointed at that cannot be read as a ``kind`` of QkvError
    (CheckpointError, DataError).  For the loaders whose ValueErrors all describe the file
    (missing, corrupt, of another kind), never a bug of the caller; other errors pass."""
    try:
        yield
    except QkvError:
        raise
    except ValueError as error:
        raise kind(str(error)) from error


@dataclass
class Translation:
    """One translated sentence.  alignment: (len(tokens), len(source_tokens)) attention of
    each generated token over the source tokens, when asked for."""

    source: str
    text: str
    source_tokens: list[str]
    tokens: list[str]
    ids: list[int]
    score: float
    alignment: Tensor | None = None


#: Model type -> what to run on the checkpoints of the other tasks (their attention
#: included), filled from each family's record (``qkv.families.register_family``).
OTHER_TASKS: dict[str, str] = {}


def load_translator(path: str | Path, *, device: str = "cpu") -> LoadedModel:
    """A translator's checkpoint (run or step folder): its model (eval mode) and tokenizer,
    with the fields of its setup as the run stored them (a dict).  A checkpoint of another
    family is refused with the commands that read it."""
    with reading_errors(CheckpointError):
        model_type = checkpoint_model_type(path)
    if model_type not in TRANSLATION_MODELS:
        use = OTHER_TASKS.get(model_type, "the command for that model's task")
        raise CheckpointError(
            f"{path} holds a {model_type!r} model, not a translator "
            f"({', '.join(TRANSLATION_MODELS)}); use {use}"
        )
    with reading_errors(CheckpointError):
        checkpoint = load_checkpoint(path, map_location=device)
    if "tokenizer" not in checkpoint.tokenizers:
        raise CheckpointError(
            f"{checkpoint.directory} has no tokenizer file; it was not written by qkv train translation"
        )
    setup = checkpoint.metadata.get("setup", {})
    return LoadedModel(
        checkpoint.model.eval(),
        checkpoint.tokenizers["tokenizer"],
        type(checkpoint.model).__name__,
        model_type,
        source=str(path),
        setup=dict(setup) if isinstance(setup, Mapping) else {},
    )


class Translator:
    """A loaded translator (its model and tokenizer: ``loaded``) run on batches of sentences:
    sources cut at ``max_len`` tokens, ``batch_size`` sentences at a time."""

    def __init__(self, loaded: LoadedModel, *, max_len: int, batch_size: int = 64):
        self.loaded = loaded
        self.max_len, self.batch_size = max_len, batch_size

    @classmethod
    def of_model(
        cls, model: nn.Module, tokenizer: Tokenizer, *, max_len: int, batch_size: int = 64
    ) -> Translator:
        """The translator of a model in memory (one just trained) and its tokenizer."""
        name = type(model).__name__
        return cls(
            LoadedModel(model, tokenizer, name, name), max_len=max_len, batch_size=batch_size
        )

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str = "cpu") -> Translator:
        """The translator of a checkpoint (:func:`load_translator`), cut at its run's
        ``max_len``."""
        loaded = load_translator(path, device=device)
        setup = loaded.setup if isinstance(loaded.setup, Mapping) else {}
        return cls(loaded, max_len=int(setup.get("max_len", 128)))

    @property
    def model(self) -> nn.Module:
        return self.loaded.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.loaded.tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sources(self, sentences: Sequence[str]) -> list[list[int]]:
        encoded = []
        cut = 0
        for index, sentence in enumerate(sentences):
            ids = self.tokenizer.encode(sentence.strip())
            if not ids:
                raise InputError(f"sentence {index} is empty: nothing to translate")
            if len(ids) > self.max_len:
                ids, cut = ids[: self.max_len], cut + 1
            encoded.append(ids)
        if cut:
            warnings.warn(
                f"{cut} sentence(s) longer than max_len={self.max_len} tokens were truncated",
                stacklevel=2,
            )
        return encoded

    @torch.no_grad()
    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam: int = 1,
        length_penalty: float = 1.0,
        need_attention: bool = False,
    ) -> list[Translation]:
        """Translate sentences (batched, longest first); beam=1 is greedy search."""
        if isinstance(sentences, str):
            raise TypeError("translate takes a list of sentences, not one string")
        check_search(beam, length_penalty)
        self.model.eval()
        sources = self.encode_sources(sentences)
        order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
        results: list[Translation | None] = [None] * len(sources)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            source = pad_sequences([sources[i] for i in chunk], PAD_ID).to(self.device)
            # A translation is rarely much longer than its source (fairseq's a * len + b);
            # the +1 leaves room for </s>.
            max_len = min(self.max_len, int(1.5 * source.shape[1]) + 10) + 1
            found = decode(
                self.model,
                source,
                beam=beam,
                length_penalty=length_penalty,
                max_len=max_len,
                need_attention=need_attention,
            )
            for row, index in enumerate(chunk):
                ids = found.tokens[row]
                alignment = None
                if need_attention and found.attention is not None:
                    alignment = found.attention[row][:, : len(sources[index])].cpu()
                results[index] = Translation(
                    source=sentences[index],
                    text=self.tokenizer.decode(ids),
                    source_tokens=self.tokenizer.tokens(sources[index]),
                    tokens=self.tokenizer.tokens(ids),
                    ids=list(ids),
                    score=found.scores[row],
                    alignment=alignment,
                )
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def cross_attention(self, translation: Translation) -> list[Tensor]:
        """The cross-attention of every decoder layer for a finished translation, by a
        teacher-forced pass over ``<s>`` + its tokens.  Per layer: (H, T, S) for multi-head
        models, (1, T, S) for single-head ones; row t is the step that produced token t."""
        source = pad_sequences(self.encode_sources([translation.source]), PAD_ID).to(self.device)
        target_input = torch.tensor([[BOS_ID, *translation.ids]], device=self.device)
        attention = teacher_forced_attention(self.model, source, target_input)
        if "cross" not in attention:
            raise InputError(
                f"{type(self.model).__name__} has no cross-attention to show (the no-attention baseline?)"
            )
        return attention["cross"]


def evaluate_translation(
    translator: Translator,
    data: str,
    *,
    split: str = "test",
    beam: int = 4,
    limit: int | None = None,
) -> tuple[Scores, list[Translation], list[str]]:
    """Translate a corpus split and score it (sacreBLEU BLEU and chrF, exact match)."""
    pairs = load_corpus(data, split)
    if limit is not None:
        pairs = pairs[:limit]
    if not pairs:
        raise DataError(f"{data!r} split {split!r} is empty")
    translations = translator.translate([p.source for p in pairs], beam=beam)
    references = [p.target for p in pairs]
    return corpus_scores([t.text for t in translations], references), translations, references


@dataclass
class TranslationReport:
    """What ``qkv evaluate`` shows for a translator: the scores, and BLEU per source length
    in words when asked for (``by_length`` None when not)."""

    data: str
    split: str
    beam: int
    scores: Scores
    by_length: list[LengthBucket] | None = None

    def as_dict(self) -> dict:
        """The scores as plain JSON values (an empty bucket's BLEU, NaN, becomes None)."""
        result = self.scores.as_dict()
        if self.by_length is not None:
            result["by_length"] = [
                {**dataclasses.asdict(b), "bleu": None if math.isnan(b.bleu) else b.bleu}
                for b in self.by_length
            ]
        return result


def score_translator(
    translator: Translator,
    data: str,
    *,
    split: str = "test",
    beam: int = 4,
    limit: int | None = None,
    by_length: bool = False,
) -> TranslationReport:
    """Translate and score a corpus split; with ``by_length`` also BLEU per bucket of source
    length in words (0-10, 11-20, 21-30, 31-40, 41+)."""
    if limit is not None and limit < 1:
        raise InputError(f"limit={limit} must be a positive number of sentences", fields=("limit",))
    check_search(beam)
    scores, translations, references = evaluate_translation(
        translator, data, split=split, beam=beam, limit=limit
    )
    buckets = None
    if by_length:
        lengths = [len(t.source.split()) for t in translations]
        buckets = bleu_by_length([t.text for t in translations], references, lengths)
    return TranslationReport(data, split, beam, scores, buckets)
