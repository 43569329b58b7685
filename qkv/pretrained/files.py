"""Reading the files of a Hugging Face model folder: config.json, (sharded) safetensors, tokenizer.json;
the end of every language model's renaming (:func:`finish_lm_state_dict`), and the one check
every loader passes its weights and tokenizer through (:func:`load_checked`,
:func:`check_tokenizer`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from qkv.data.tokenizers import register_tokenizer, write_tokenizer_file
from qkv.errors import CheckpointError, MissingFileError

__all__ = [
    "read_config",
    "read_safetensors",
    "finish_lm_state_dict",
    "load_checked",
    "check_tokenizer",
    "FolderTokenizer",
]

_INDEX = "model.safetensors.index.json"


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json as a dict; MissingFileError / CheckpointError otherwise."""
    if not folder.is_dir():
        raise MissingFileError(f"no model folder at {folder}: it does not exist or is not a folder")
    path = folder / "config.json"
    if not path.is_file():
        raise MissingFileError(f"{folder} has no config.json; found {_listing(folder)}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} holds {type(config).__name__}, not a JSON object")
    return config


def finish_lm_state_dict(
    stored: dict[str, Tensor],
    out: dict[str, Tensor],
    *,
    tie_embeddings: bool,
    ignored: tuple[str, ...],
    lacking: str,
    holding: str,
) -> dict[str, Tensor]:
    """``out`` with its output layer -- the token embedding when tied, else the checkpoint's
    ``lm_head.weight`` -- once every tensor of ``stored`` (what the renaming did not take)
    but those ending in ``ignored`` (buffers qkv recomputes) is accounted for.  ``lacking`` /
    ``holding`` open the two errors ("the weights have" / "the weights hold")."""
    head = stored.pop("lm_head.weight", None)
    if tie_embeddings:
        out["output.weight"] = out["token_embedding.weight"]
    elif head is None:
        raise CheckpointError(f"tie_word_embeddings is false but {lacking} no lm_head.weight")
    else:
        out["output.weight"] = head
    leftovers = [name for name in stored if not name.endswith(ignored)]
    if leftovers:
        raise CheckpointError(f"{holding} tensors qkv does not know: {leftovers[:5]}")
    return out


def read_safetensors(folder: Path) -> dict[str, Tensor]:
    """Every tensor of ``model.safetensors``, or of the shards that
    ``model.safetensors.index.json`` names, by checkpoint name."""
    from safetensors.torch import load_file

    single, index = folder / "model.safetensors", folder / _INDEX
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise CheckpointError(f"{index} has no readable weight_map ({error})") from None
        files = [folder / name for name in sorted(set(weight_map.values()))]
        absent = [path.name for path in files if not path.is_file()]
        if absent:
            raise MissingFileError(f"{index} names shards that are not in {folder}: {absent}")
    else:
        raise MissingFileError(
            f"{folder} has no weights: it needs model.safetensors (or sharded "
            f"model-0000x-of-0000n.safetensors with {_INDEX}); found {_listing(folder)}"
        )
    tensors: dict[str, Tensor] = {}
    for path in files:
        try:
            tensors.update(load_file(str(path)))
        except Exception as error:  # safetensors raises its own types for corrupt files
            raise CheckpointError(f"{path} is corrupt ({error})") from None
    return tensors


def load_checked(model: nn.Module, state: dict[str, Tensor], folder: Path) -> nn.Module:
    """Load ``state`` (already in ``model``'s names) into ``model`` once it passes the checks
    every pretrained loader shares: every name the model has and no other, each tensor the
    shape config.json implies, floating-point, and finite -- a folder whose weights hold NaN
    or inf would otherwise give text or attention that looks like a result.  One
    CheckpointError names the first problems; the model is untouched until all pass."""
    expected = model.state_dict()
    problems = []
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        problems.append(f"missing: {missing[:3]}")
    if unexpected:
        problems.append(f"not in the model: {unexpected[:3]}")
    wrong = [
        f"{name}: {tuple(tensor.shape)} in the file, {tuple(expected[name].shape)} in config.json"
        for name, tensor in state.items()
        if name in expected and tensor.shape != expected[name].shape
    ]
    if wrong:
        problems.append(f"shapes that do not match config.json: {wrong[:3]}")
    not_float = sorted(name for name, tensor in state.items() if not tensor.is_floating_point())
    if not_float:
        problems.append(f"tensors that are not floating-point: {not_float[:3]}")
    if problems:
        raise CheckpointError(
            f"the weights of {folder} do not fit its config: " + "; ".join(problems)
        )
    broken = [name for name, tensor in state.items() if not bool(torch.isfinite(tensor).all())]
    if broken:
        raise CheckpointError(
            f"the weights of {folder} hold NaN or infinite values (in {len(broken)} tensors, "
            f"e.g. {broken[:3]}): the folder is damaged; download or export it again"
        )
    model.load_state_dict(state, strict=True)
    return model


def check_tokenizer(tokenizer: Any, vocab_size: int, folder: Path) -> None:
    """CheckpointError when the folder's tokenizer makes ids the model has no embedding for
    (a tokenizer.json of another model); a smaller tokenizer is fine (padded vocabularies)."""
    size = getattr(tokenizer, "vocab_size", None)
    if isinstance(size, int) and size > vocab_size:
        raise CheckpointError(
            f"the tokenizer of {folder} has {size} tokens, but its model has only {vocab_size} "
            "(config.json's vocab_size): ids past that would index no embedding; the "
            "tokenizer file belongs to another model"
        )


class FolderTokenizer:
    """A folder's tokenizer (Hugging Face ``tokenizers``): its ``tokenizer.json``, or for
    BERT its ``vocab.txt`` (:meth:`from_folder`).  It never truncates or pads, so a text
    longer than the model's positions is refused, not cut.

    add_special_tokens: encode adds what the file's post-processor says, as the model was
    trained (BERT's [CLS] and [SEP], Llama's and Mistral's BOS; Qwen2 and GPT-2 nothing).
    tokens(ids): one label per id: the piece as written (WordPiece "##ing"), or a
    byte-level piece decoded (" word") when it is whole characters."""

    kind = "huggingface"

    def __init__(self, path: str | Path, *, add_special_tokens: bool = True):
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception for a bad file
            raise CheckpointError(f"{path} is not a tokenizers file ({error})") from None
        self._use(tokenizer, add_special_tokens)

    def _use(self, tokenizer: Any, add_special_tokens: bool) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer, self.add_special_tokens = tokenizer, add_special_tokens

    @classmethod
    def from_folder(cls, folder: Path, *, add_special_tokens: bool) -> FolderTokenizer:
        """The tokenizer of a model folder: ``tokenizer.json``, or (``add_special_tokens``:
        an encoder) BERT's ``vocab.txt``; MissingFileError when there is neither."""
        from tokenizers.implementations import BertWordPieceTokenizer

        if (folder / "tokenizer.json").is_file():
            return cls(folder / "tokenizer.json", add_special_tokens=add_special_tokens)
        if add_special_tokens and (folder / "vocab.txt").is_file():
            settings_file = folder / "tokenizer_config.json"
            settings = (
                json.loads(settings_file.read_text("utf-8")) if settings_file.is_file() else {}
            )
            lowercase = settings.get("do_lower_case", True)
            tokenizer = cls.__new__(cls)
            word_pieces = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=lowercase)
            tokenizer._use(word_pieces, add_special_tokens)
            return tokenizer
        wanted = "tokenizer.json or vocab.txt" if add_special_tokens else "tokenizer.json"
        raise MissingFileError(f"{folder} has no tokenizer ({wanted}); found {_listing(folder)}")

    def encode(self, text: str, *, add_special_tokens: bool | None = None) -> list[int]:
        """The token ids of ``text``, with the special tokens the file's post-processor adds
        if ``add_special_tokens`` (None: the tokenizer's own setting)."""
        if add_special_tokens is None:
            add_special_tokens = self.add_special_tokens
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids) -> str:
        """The text of token ids (a list or a tensor), special tokens kept."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def tokens(self, ids) -> list[str]:
        """One label per id (see the class docstring): what a plot labels its axes with."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        byte_level = type(self._tokenizer.decoder).__name__ == "ByteLevel"
        labels = []
        for i in ids:
            piece = self._tokenizer.id_to_token(i)
            if byte_level:
                text = self._tokenizer.decode([i], skip_special_tokens=False)
                piece = text if text and "\ufffd" not in text else piece
            labels.append(piece if piece is not None else f"<{i}>")
        return labels

    @property
    def vocab_size(self) -> int:
        """The number of tokens, added tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def save(self, path: str | Path) -> None:
        """Write the tokenizer (the whole ``tokenizer.json`` and ``add_special_tokens``) as a
        qkv tokenizer file, so that a run fine-tuned from a folder keeps it in every
        checkpoint; :func:`qkv.data.tokenizers.load_tokenizer` reads it back."""
        state = {
            "tokenizer": json.loads(self._tokenizer.to_str()),
            "add_special_tokens": self.add_special_tokens,
        }
        write_tokenizer_file(path, self.kind, state)

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> FolderTokenizer:
        from tokenizers import Tokenizer

        tokenizer = cls.__new__(cls)
        hf = Tokenizer.from_str(json.dumps(state["tokenizer"]))
        tokenizer._use(hf, bool(state["add_special_tokens"]))
        return tokenizer


def _listing(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


# a checkpoint that holds a folder's tokenizer (a fine-tuned run) reads it back by its kind
register_tokenizer(FolderTokenizer)
