"""Load a Hugging Face BERT folder (config.json, model.safetensors, tokenizer) into qkv.

The network is qkv's own :class:`~qkv.models.bert.BertModel` (post-LN ``EncoderBlock`` s);
only the weights come from the checkpoint, mapped name by name.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from qkv.errors import CheckpointError, MissingFileError
from qkv.layers.saved_formats import stack_legacy_projections
from qkv.models.bert import BertConfig, BertModel

from .files import check_tokenizer, load_checked, read_config, read_safetensors

__all__ = ["load_bert", "bert_config_from_hf", "BertTokenizer", "BertInputs"]

_REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)
# Hugging Face activation names -> qkv's FeedForward activations.
_ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
# Checkpoint name patterns -> qkv parameter names.  {i} is the block index.
_LAYER_NAMES = {
    "attention.self.query": "self_attention.q_proj",
    "attention.self.key": "self_attention.k_proj",
    "attention.self.value": "self_attention.v_proj",
    "attention.output.dense": "self_attention.out_proj",
    "attention.output.LayerNorm": "self_attention_norm",
    "intermediate.dense": "feed_forward.expand",
    "output.dense": "feed_forward.contract",
    "output.LayerNorm": "feed_forward_norm",
}
_OTHER_NAMES = {
    "embeddings.word_embeddings": "embeddings.word_embeddings",
    "embeddings.position_embeddings": "embeddings.position_embeddings.embedding",
    "embeddings.token_type_embeddings": "embeddings.token_type_embeddings",
    "embeddings.LayerNorm": "embeddings.norm",
    "pooler.dense": "pooler",
}
# Tensors a BertModel checkpoint may carry that the encoder does not use.
_IGNORED = re.compile(r"^(embeddings\.position_ids|cls\..*|lm_head\..*|classifier\..*)$")


def bert_config_from_hf(hf_config: dict[str, Any], *, pooler: bool = True) -> BertConfig:
    """Translate a Hugging Face ``config.json`` (as a dict) into a :class:`BertConfig`.

    Raises CheckpointError (a ValueError) if the config does not describe a BERT encoder
    qkv can rebuild."""
    model_type = hf_config.get("model_type")
    if model_type != "bert":
        raise CheckpointError(
            f"config.json has model_type={model_type!r}; load_bert reads BERT checkpoints "
            "(model_type 'bert', e.g. bert-base-uncased, all-MiniLM-L6-v2)"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in hf_config]
    if missing:
        raise CheckpointError(f"config.json lacks the BERT fields {missing}")
    position_kind = hf_config.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        raise CheckpointError(
            f"position_embedding_type={position_kind!r} is not supported; only 'absolute'"
        )
    activation = hf_config.get("hidden_act", "gelu")
    if activation not in _ACTIVATIONS:
        raise CheckpointError(f"hidden_act={activation!r} is not one of {sorted(_ACTIVATIONS)}")
    return BertConfig(
        vocab_size=hf_config["vocab_size"],
        d_model=hf_config["hidden_size"],
        num_layers=hf_config["num_hidden_layers"],
        num_heads=hf_config["num_attention_heads"],
        d_ff=hf_config["intermediate_size"],
        max_len=hf_config["max_position_embeddings"],
        type_vocab_size=hf_config.get("type_vocab_size", 2),
        activation=_ACTIVATIONS[activation],
        dropout=hf_config.get("hidden_dropout_prob", 0.1),
        layer_norm_eps=hf_config.get("layer_norm_eps", 1e-12),
        pad_id=hf_config.get("pad_token_id", 0) or 0,
        pooler=pooler,
    )


def _qkv_name(name: str) -> str | None:
    """The qkv parameter name for a checkpoint tensor name, or None if it has none."""
    name = name.removeprefix("bert.")
    name = name.replace(".gamma", ".weight").replace(".beta", ".bias")  # old TF-era names
    module, _, leaf = name.rpartition(".")
    if module in _OTHER_NAMES:
        return f"{_OTHER_NAMES[module]}.{leaf}"
    found = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)", module)
    if found and found.group(2) in _LAYER_NAMES:
        return f"encoder.layers.{found.group(1)}.{_LAYER_NAMES[found.group(2)]}.{leaf}"
    return None


def _read_weights(folder: Path) -> dict[str, Tensor]:
    if (folder / "model.safetensors").is_file():
        return read_safetensors(folder)  # a corrupt file: one CheckpointError
    torch_file = folder / "pytorch_model.bin"
    if torch_file.is_file():
        try:
            return torch.load(torch_file, map_location="cpu", weights_only=True)
        except Exception as error:  # pickle and zip errors of a damaged file
            raise CheckpointError(f"{torch_file} is corrupt ({error})") from None
    raise MissingFileError(
        f"{folder} has no model.safetensors (or pytorch_model.bin); found {_listing(folder)}"
    )


def _map_weights(weights: dict[str, Tensor], model: BertModel) -> dict[str, Tensor]:
    expected = model.state_dict()
    renamed: dict[str, Tensor] = {}
    source_of: dict[str, str] = {}
    unexpected: list[str] = []
    for name, tensor in weights.items():
        target = _qkv_name(name)
        if target is None:
            if not _IGNORED.match(name.removeprefix("bert.")):
                unexpected.append(name)
        else:
            renamed[target], source_of[target] = tensor, name
    for layer in range(model.config.num_layers):  # query, key, value -> one stacked matrix
        prefix = f"encoder.layers.{layer}.self_attention."
        for part in ("weight", "bias"):  # all three or none: name the one that is absent
            names = [f"{prefix}{p}_proj.{part}" for p in "qkv"]
            if any(name in renamed for name in names) and not all(n in renamed for n in names):
                absent = [
                    f"encoder.layer.{layer}.attention.self.{word}.{part}"
                    for word, name in zip(("query", "key", "value"), names)
                    if name not in renamed
                ]
                raise CheckpointError(f"the checkpoint lacks {absent[0]}: the folder is incomplete")
        stack_legacy_projections(renamed, prefix)
    mapped = {name: tensor for name, tensor in renamed.items() if name in expected}
    unexpected += [source_of.get(name, name) for name in renamed if name not in expected]
    missing = sorted(set(expected) - set(mapped))
    wrong_shape = [
        f"{name}: checkpoint {tuple(tensor.shape)} vs model {tuple(expected[name].shape)}"
        for name, tensor in mapped.items()
        if tensor.shape != expected[name].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {_some(missing)}")
    if unexpected:
        problems.append(f"not used by a BERT encoder: {_some(sorted(unexpected))}")
    if wrong_shape:
        problems.append(f"shapes differ from config.json: {_some(wrong_shape)}")
    if problems:
        raise CheckpointError("the checkpoint does not match its config: " + "; ".join(problems))
    return mapped


def load_bert(path: str | Path) -> tuple[BertModel, BertTokenizer]:
    """Read a Hugging Face BERT folder into a qkv :class:`BertModel` (eval mode) and its
    tokenizer.

    The folder needs ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin``) and
    ``tokenizer.json`` or ``vocab.txt``.  Raises FileNotFoundError for a missing folder or
    file (MissingFileError), CheckpointError (a ValueError) for a config that is not BERT,
    weights that do not fit it, or weights that hold NaN or infinite values.

    >>> model, tokenizer = load_bert(folder)            # doctest: +SKIP
    >>> inputs = tokenizer(["a sentence", "another one"])
    >>> model(inputs.input_ids, attention_mask=inputs.attention_mask).last_hidden_state
    """
    folder = Path(path)
    if not folder.is_dir():
        raise MissingFileError(f"no BERT folder at {folder}: it does not exist or is not a folder")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise MissingFileError(f"{folder} has no config.json; found {_listing(folder)}")
    hf_config = read_config(folder)
    config = bert_config_from_hf(hf_config)  # rejects a non-BERT folder before any reading
    weights = _read_weights(folder)
    if not any(_qkv_name(name) == "pooler.weight" for name in weights):
        config = dataclasses.replace(config, pooler=False)
    model = BertModel(config)
    load_checked(model, _map_weights(weights, model), folder)
    model.eval()
    tokenizer = BertTokenizer.from_folder(folder, max_len=config.max_len)
    check_tokenizer(tokenizer, config.vocab_size, folder)
    return model, tokenizer


@dataclass
class BertInputs:
    """A tokenized, right-padded batch.  input_ids, attention_mask (1 = real token, 0 =
    padding), token_type_ids: all (B, T) int64."""

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor

    def __getitem__(self, name: str) -> Tensor:
        return getattr(self, name)

    def keys(self) -> list[str]:
        """The field names, so that ``model(**inputs)`` works as with Hugging Face."""
        return ["input_ids", "attention_mask", "token_type_ids"]


class BertTokenizer:
    """WordPiece tokenization as the checkpoint was trained with, via the ``tokenizers``
    library: ``[CLS] pieces [SEP]``, lower-cased if the checkpoint is uncased, padded to the
    longest text of the batch, truncated to ``max_len`` tokens."""

    def __init__(self, tokenizer: Any, *, max_len: int, pad_token: str = "[PAD]"):
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"the vocabulary has no padding token {pad_token!r}")
        tokenizer.no_padding()
        tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)  # to the longest
        tokenizer.enable_truncation(max_length=max_len)
        self._tokenizer = tokenizer
        self.max_len = max_len
        self.pad_id = pad_id

    @classmethod
    def from_folder(cls, path: str | Path, *, max_len: int = 512) -> BertTokenizer:
        """From ``tokenizer.json`` if present, else from ``vocab.txt`` (lower-casing as
        ``tokenizer_config.json``'s ``do_lower_case`` says; True if it is absent)."""
        from tokenizers import Tokenizer
        from tokenizers.implementations import BertWordPieceTokenizer

        folder = Path(path)
        settings_file = folder / "tokenizer_config.json"
        settings = json.loads(settings_file.read_text("utf-8")) if settings_file.is_file() else {}
        max_len = min(max_len, settings.get("model_max_length", max_len))
        if (folder / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        elif (folder / "vocab.txt").is_file():
            tokenizer = BertWordPieceTokenizer(
                str(folder / "vocab.txt"), lowercase=settings.get("do_lower_case", True)
            )
        else:
            raise FileNotFoundError(
                f"{folder} has neither tokenizer.json nor vocab.txt; found {_listing(folder)}"
            )
        return cls(tokenizer, max_len=max_len, pad_token=settings.get("pad_token", "[PAD]"))

    @property
    def vocab_size(self) -> int:
        """The number of WordPiece tokens in the vocabulary."""
        return self._tokenizer.get_vocab_size()

    def __call__(self, texts: str | Sequence[str]) -> BertInputs:
        """Shapes: B texts -> BertInputs of (B, T) tensors, T the longest (capped) length."""
        if isinstance(texts, str):
            texts = [texts]
        if not texts or not all(isinstance(text, str) for text in texts):
            raise TypeError("BertTokenizer takes a string or a non-empty list of strings")
        encodings = self._tokenizer.encode_batch(list(texts))
        return BertInputs(
            torch.tensor([e.ids for e in encodings], dtype=torch.long),
            torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
        )

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Token ids back to text, special tokens dropped."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)


def _listing(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


def _some(names: list[str], limit: int = 8) -> str:
    more = f" ... and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
