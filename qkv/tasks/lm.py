"""Training and using a language model: text -> tokenizer -> TransformerLM -> the shared trainer.

``train_lm`` drives :func:`qkv.training.train` exactly as translation does (budgets,
checkpoints, ``--resume``, DDP, bf16); the run's ``log.jsonl`` carries the validation loss and
perplexity per token.  ``load_lm`` reads a run back; ``context_loss`` measures the validation
loss at a given context length (how far positions extrapolate).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.text import TextDataset, load_text
from ..data.text_tokenizers import TEXT_TOKENIZER_KINDS, encode_prompt, train_text_tokenizer
from ..data.tokenizers import Tokenizer
from ..decoding import sample
from ..errors import CheckpointError, InputError
from ..models import TransformerLM, TransformerLMConfig
from ..training import TrainConfig, TrainResult, load_checkpoint
from .presets import Preset, preset_for, sizes_of
from .task import TaskData, TaskSpec, check_choices, train_task
from .translator import reading_errors

__all__ = [
    "LMSetup",
    "LM",
    "lm_config",
    "train_lm",
    "load_lm",
    "LoadedLM",
    "encode_text",
    "context_loss",
    "generate_text",
]

TOKENIZER_FILE = "tokenizer"

SIZES = sizes_of("lm")


@dataclass(frozen=True)
class LMSetup:
    """What to train on and which language model to build (the trainer's knobs: TrainConfig).

    data: ``kjv`` or a UTF-8 text file (split as :mod:`qkv.data.text` states).
    size: "small" (4 x 128, context 128) or "medium" (6 x 384, context 256).
    context: tokens per training window (None: the size's); the model's ``max_len``.
    positions: "learned", "sinusoidal", "rope" or "alibi" (any registered position scheme).
    tokenizer: "char" or "bytebpe"; vocab_size for bytebpe.
    num_kv_heads: grouped key/value heads (None: one per query head).
    dropout: overrides the size's dropout (None: keep it).
    window: sliding-window causal attention over the last W positions (None: full causal).
    batch_size: windows per batch: the run's ``max_tokens`` unless one is given.
    """

    data: str = "kjv"
    size: str = field(default="small", metadata={"choices": SIZES})
    context: int | None = None
    positions: str = "learned"
    tokenizer: str = field(default="char", metadata={"choices": TEXT_TOKENIZER_KINDS})
    vocab_size: int = 4096
    num_kv_heads: int | None = None
    dropout: float | None = None
    window: int | None = None
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_choices(self, ("size", "tokenizer"))
        if self.context is not None and self.context < 2:
            raise InputError(
                f"context={self.context} must be at least 2 tokens", fields=("context",)
            )
        if self.window is not None and self.window < 1:
            raise InputError(
                f"window={self.window} must be at least 1 position (omit it for full attention)",
                fields=("window",),
            )
        if isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise InputError(
                f"batch_size={self.batch_size} must be at least 1 window", fields=("batch_size",)
            )

    @property
    def context_length(self) -> int:
        return self.context or preset_for("lm", self.size).model["max_len"]


def lm_preset(setup: LMSetup) -> Preset:
    """The size's preset, its batch ``batch_size`` windows of the setup's context."""
    preset = preset_for("lm", setup.size)
    batch = {"max_tokens": setup.batch_size * (setup.context_length + 1)}
    return dataclasses.replace(preset, train={**preset.train, **batch})


def lm_config(setup: LMSetup, vocab_size: int) -> TransformerLMConfig:
    """The model a setup asks for, over a vocabulary of ``vocab_size`` ids."""
    sizes = dict(preset_for("lm", setup.size).model)
    if setup.dropout is not None:
        sizes["dropout"] = setup.dropout
    sizes["max_len"] = setup.context_length
    return TransformerLMConfig(
        vocab_size,
        **sizes,
        num_kv_heads=setup.num_kv_heads,
        positions=setup.positions,
        window=setup.window,
    )


def encode_text(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """The ids of a whole text, (N,) long, encoded line by line (BPE in parallel)."""
    if hasattr(tokenizer, "encode_lines"):
        lines = text.splitlines(keepends=True)
        return torch.tensor([i for ids in tokenizer.encode_lines(lines) for i in ids])
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def _saved_tokenizer(out_dir: Path) -> Tokenizer:
    with reading_errors(CheckpointError):
        return load_checkpoint(out_dir, load_tokenizers=True).tokenizers[TOKENIZER_FILE]


def _datasets(setup: LMSetup, model: TransformerLM, corpus, tokenizer: Tokenizer) -> TaskData:
    context = setup.context_length
    train_data = TextDataset(encode_text(tokenizer, corpus.train), context=context)
    valid_data = None
    if corpus.valid:
        valid_data = TextDataset(encode_text(tokenizer, corpus.valid), context=context)
    return TaskData(train_data, valid_data)


#: The language model's parts of the shared skeleton.
LM = TaskSpec(
    task="lm",
    preset=lm_preset,
    read=lambda setup: load_text(setup.data),
    vocabulary=lambda setup, corpus: train_text_tokenizer(
        setup.tokenizer, corpus.train, vocab_size=setup.vocab_size
    ),
    saved_vocabulary=_saved_tokenizer,
    tokenizers=lambda tokenizer: {TOKENIZER_FILE: tokenizer},
    build=lambda setup, corpus, tokenizer: TransformerLM(lm_config(setup, tokenizer.vocab_size)),
    datasets=_datasets,
)


def train_lm(
    setup: LMSetup, config: TrainConfig, out_dir: str | Path, *, resume: bool = False
) -> TrainResult:
    """Train a language model; checkpoints (weights, config, tokenizer) go to ``out_dir``.

    With ``resume`` the tokenizer comes from the run's last checkpoint, so the run continues
    exactly where it stopped; a different setup is refused by the trainer."""
    return train_task(LM, setup, config, out_dir, resume=resume)


@dataclass
class LoadedLM:
    model: TransformerLM
    tokenizer: Tokenizer
    setup: LMSetup | None


def load_lm(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedLM:
    """A trained language model and its tokenizer, from a run folder or a step folder."""
    checkpoint = load_checkpoint(path, map_location=device, expect_type="lm")
    if TOKENIZER_FILE not in checkpoint.tokenizers:
        raise CheckpointError(
            f"{checkpoint.directory} has no tokenizer file; was it trained by qkv?"
        )
    fields = checkpoint.metadata.get("setup")
    setup = LMSetup(**fields) if isinstance(fields, dict) else None
    return LoadedLM(checkpoint.model, checkpoint.tokenizers[TOKENIZER_FILE], setup)


@torch.no_grad()
def context_loss(
    model: TransformerLM, ids: torch.Tensor, *, context: int, batch_size: int = 8
) -> float:
    """Mean next-token loss (nats) over windows of ``context + 1`` tokens of ``ids`` (N,),
    every prediction made with the window's whole prefix in view: how well the model reads a
    context of that length (past its training ``max_len``, positions must extrapolate)."""
    windows = TextDataset(ids, context=context)
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
    return total / count if count else math.nan


def generate_text(
    lm: LoadedLM,
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

    ``stream(text)`` receives the prompt once the first token is drawn, then the first
    sample's new text as tokens are drawn (a byte-level token that ends inside a UTF-8
    character is held back until the character is complete).
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise InputError(
            f"num_samples={num_samples!r} must be a positive integer", fields=("num_samples",)
        )
    prompt_ids = encode_prompt(lm.tokenizer, prompt)
    device = next(lm.model.parameters()).device
    batch = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)
    new_ids: list[int] = []
    shown = 0

    def on_token(tokens: torch.Tensor) -> None:
        nonlocal shown
        if not new_ids:
            stream(prompt)
        new_ids.append(int(tokens[0]))
        text = lm.tokenizer.decode(new_ids)
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
    )
    return [lm.tokenizer.decode(row[len(prompt_ids) :].tolist()) for row in ids]
