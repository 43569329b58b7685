"""The language model: one decoder-only Transformer in three architectures (gpt, llama,
nanochat) (`qkv train lm`, scored by perplexity, explored prompt by prompt, its attention
drawn on one text, and live in the page)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..data.text import load_text
from ..errors import DataError, InputError
from ..explore import explorer_of_type
from ..tasks.evaluate import Evaluation, EvaluationRequest
from ..tasks.lm import LM, LM_MODEL, LMSetup, context_loss, encode_text, lm_of, load_lm
from ..tasks.presets import LM_FINETUNE, LM_SIZES
from ..tasks.translator import reading_errors
from ..training import TrainResult
from .record import ExplorerPage, Family, TrainCommand, ViewRequest, explore_with, train_with_spec

__all__ = ["FAMILY"]


def score(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """Loss and perplexity per token over the split's windows of the run's context."""
    lm = load_lm(checkpoint, device=request.device)
    model, setup = lm_of(lm)
    data = request.data or (setup.data if setup is not None else None)
    if data is None:
        raise InputError(f"{checkpoint} is not a run of qkv train lm: give the text to score")
    split = request.split or "valid"
    if split not in ("train", "valid"):
        raise InputError(
            f"split={split!r}: a language model's text has train and valid splits",
            fields=("split",),
        )
    with reading_errors(DataError):
        text = getattr(load_text(data), split)
    ids = encode_text(lm.tokenizer, text)
    # the run's training window (a fine-tuned folder's model reads far more positions)
    context = setup.context_length if setup is not None else model.config.max_len
    windows = None if request.limit is None else request.limit * context + 1
    loss = context_loss(model, ids[:windows], context=context)
    tokens = int(ids[:windows].numel())
    scores: dict[str, object] = {"loss": loss, "perplexity": math.exp(loss), "tokens": tokens}
    lines = [
        f"{data} {split} ({tokens} tokens, windows of {context})",
        f"loss {loss:.4f} nats per token   perplexity {math.exp(loss):.2f}",
    ]
    return Evaluation(scores, lines)


def view(checkpoint: str, inputs: Sequence[str], request: ViewRequest) -> ExplorerPage:
    """Each prompt's causal self-attention (and the tokens sampled after it)."""
    return explore_with(load_lm(checkpoint, device=request.device), inputs, request)


def summary(result: TrainResult) -> str:
    """The last validation's loss and perplexity (over the whole text, where it was)."""
    full = {k.removesuffix("_full"): v for k, v in result.valid.items() if k.endswith("_full")}
    valid = full or result.valid
    if "valid_loss" not in valid:
        return ""
    return f", valid loss {valid['valid_loss']:.4f} (perplexity {valid['valid_ppl']:.2f})"


FAMILY = Family(
    name="lm",
    model_types=(LM_MODEL,),
    setup=LMSetup,
    presets={**LM_SIZES, "--init-from": LM_FINETUNE},
    spec=LM,
    command=TrainCommand(
        help="train a decoder-only language model (Llama, GPT, nanochat) on text",
        description="Train a decoder-only Transformer language model (Llama's layout unless "
        "--arch says gpt or nanochat) on the built-in King James Bible (kjv, ~4.5 MB of "
        "English) or any UTF-8 text file (its last 5% of lines are the validation text). Checkpoints, the tokenizer and log.jsonl (with validation "
        "loss and perplexity) go to --out; --resume continues exactly; `qkv curves` plots "
        "the run. With --init-from a pretrained model (a Hugging Face GPT-2 or Llama-family "
        "folder, or another run) is fine-tuned on the text, encoded with its own tokenizer; "
        "`qkv generate --checkpoint` samples from the result.",
        examples="qkv train lm --data kjv --out runs/lm --size small --max-minutes 10 --threads 1"
        "\nqkv train lm --data my.txt --out runs/mine --tokenizer bytebpe"
        "\nqkv train lm --arch gpt --data kjv --out runs/gpt   # GPT-2's layout"
        "\nqkv train lm --window 32 --window-pattern SSSL --out runs/windows"
        "\nqkv train lm --init-from models/gpt2 --data my.txt --out runs/gpt2-mine --max-steps 500"
        "\nqkv train lm --init-from runs/lm --data my.txt --out runs/lm-mine --lr 3e-4",
        out_help="run folder (checkpoints, tokenizer, log.jsonl)",
        notes={"max_tokens": "--batch-size windows of the context"},
    ),
    train=train_with_spec(LM, summary),
    score=score,
    explorers={LM_MODEL: explorer_of_type(LM_MODEL)},
    view=view,
    loader=load_lm,
    reads_text=True,
)
