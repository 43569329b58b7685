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
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.text import TextDataset, load_text
from ..data.text_tokenizers import TEXT_TOKENIZER_KINDS, encode_prompt, train_text_tokenizer
from ..data.tokenizers import Tokenizer
from ..decoding import sample
from ..errors import CheckpointError, InputError
from ..models import TransformerLM, TransformerLMConfig
from ..training import TrainConfig, TrainResult, load_checkpoint, read_pointer, train

__all__ = [
    "LMSetup",
    "LM_SIZES",
    "lm_config",
    "train_lm",
    "load_lm",
    "LoadedLM",
    "encode_text",
    "context_loss",
    "generate_text",
]

TOKENIZER_FILE = "tokenizer"

#: size -> (num_layers, d_model, num_heads, d_ff, default context, dropout)
LM_SIZES = {
    "small": dict(num_layers=4, d_model=128, num_heads=4, d_ff=512, context=128, dropout=0.1),
    "medium": dict(num_layers=6, d_model=384, num_heads=6, d_ff=1536, context=256, dropout=0.2),
}


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
    """

    data: str = "kjv"
    size: str = "small"
    context: int | None = None
    positions: str = "learned"
    tokenizer: str = "char"
    vocab_size: int = 4096
    num_kv_heads: int | None = None
    dropout: float | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        if self.size not in LM_SIZES:
            raise InputError(f"unknown size {self.size!r}; choose from {list(LM_SIZES)}")
        if self.tokenizer not in TEXT_TOKENIZER_KINDS:
            raise InputError(
                f"unknown tokenizer {self.tokenizer!r}; choose from {TEXT_TOKENIZER_KINDS}"
            )
        if self.context is not None and self.context < 2:
            raise InputError(f"--context {self.context} must be at least 2 tokens")
        if self.window is not None and self.window < 1:
            raise InputError(
                f"--window {self.window} must be at least 1 position (omit it for full attention)"
            )

    @property
    def context_length(self) -> int:
        return self.context or LM_SIZES[self.size]["context"]


def lm_config(setup: LMSetup, vocab_size: int) -> TransformerLMConfig:
    """The model a setup asks for, over a vocabulary of ``vocab_size`` ids."""
    sizes = {k: v for k, v in LM_SIZES[setup.size].items() if k != "context"}
    if setup.dropout is not None:
        sizes["dropout"] = setup.dropout
    return TransformerLMConfig(
        vocab_size,
        **sizes,
        num_kv_heads=setup.num_kv_heads,
        max_len=setup.context_length,
        positions=setup.positions,
        window=setup.window,
    )


def encode_text(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """The ids of a whole text, (N,) long, encoded line by line (BPE in parallel)."""
    if hasattr(tokenizer, "encode_lines"):
        lines = text.splitlines(keepends=True)
        return torch.tensor([i for ids in tokenizer.encode_lines(lines) for i in ids])
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def train_lm(
    setup: LMSetup, config: TrainConfig, out_dir: str | Path, *, resume: bool = False
) -> TrainResult:
    """Train a language model; checkpoints (weights, config, tokenizer) go to ``out_dir``.

    With ``resume`` the tokenizer comes from the run's last checkpoint, so the run continues
    exactly where it stopped; a different setup is refused by the trainer."""
    corpus = load_text(setup.data)
    if resume:
        if read_pointer(out_dir, "last") is None:
            raise InputError(
                f"--resume: {out_dir} has no checkpoint to resume from; drop --resume to start"
            )
        tokenizer = load_checkpoint(out_dir, load_tokenizers=True).tokenizers[TOKENIZER_FILE]
    else:
        tokenizer = train_text_tokenizer(setup.tokenizer, corpus.train, vocab_size=setup.vocab_size)
    torch.manual_seed(config.seed)  # the same command twice builds the same initial model
    model = TransformerLM(lm_config(setup, tokenizer.vocab_size))
    context = setup.context_length
    train_data = TextDataset(encode_text(tokenizer, corpus.train), context=context)
    valid_data = None
    if corpus.valid:
        valid_data = TextDataset(encode_text(tokenizer, corpus.valid), context=context)
    metadata = {"task": "lm", "setup": dataclasses.asdict(setup)}
    return train(
        model,
        train_data,
        valid_data,
        config,
        out_dir,
        metadata=metadata,
        tokenizers={TOKENIZER_FILE: tokenizer},
        resume=resume,
    )


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
        raise InputError(f"--num-samples {num_samples!r} must be a positive integer")
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
