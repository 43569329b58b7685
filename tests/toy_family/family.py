"""The toy family's record: its setup, data, training parts, scorer and explorer view.

Task: does a string of digits hold a 7?  The data is generated from the setup's seed, so the
family needs no files; the page shows its one self-attention layer as an encoder's."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from qkv.data.batch import BOS_ID, Batch
from qkv.errors import InputError
from qkv.explore import ExplorerAdapter, ExploreRequest, PageKind, explore
from qkv.explore.views import attention_view
from qkv.families import ExplorerPage, Family, TrainCommand, ViewRequest, train_with_spec
from qkv.models import LoadedModel
from qkv.tasks.evaluate import Evaluation, EvaluationRequest
from qkv.tasks.presets import Preset
from qkv.tasks.task import TaskData, TaskSpec, setup_field
from qkv.training import load_checkpoint

from .model import PAD, TOY_MODEL, ToyClassifier, ToyConfig

CLASSES = ("no 7", "a 7")


@dataclass(frozen=True)
class ToySetup:
    """What the toy trains on and how big its model is."""

    data: str = setup_field("digits", "the generated digit strings", choices=("digits",))
    examples: int = setup_field(64, "training strings (validation and test: a quarter each)")
    data_seed: int = setup_field(0, "the seed of the generated strings")
    d_model: int = setup_field(16, "the attention's width", group="model")


def encode(text: str, max_len: int) -> list[int]:
    """Digit d -> id d + 1 (id 0 pads); anything else is refused by name."""
    if not text or not text.isdigit() or len(text) > max_len:
        raise InputError(f"{text!r}: the toy reads 1 to {max_len} digits")
    return [int(c) + 1 for c in text]


class DigitTokens:
    """The page's tokenizer of the toy: ids back to digits."""

    def tokens(self, ids: Sequence[int]) -> list[str]:
        return [str(i - 1) for i in ids]


class DigitStrings:
    """Strings of digits and whether each holds a 7, as the trainer reads them."""

    def __init__(self, count: int, seed: int, max_len: int):
        rng = random.Random(seed)
        self.texts = [
            "".join(rng.choice("0123456789") for _ in range(rng.randint(2, max_len)))
            for _ in range(count)
        ]
        self.labels = [int("7" in text) for text in self.texts]
        self.max_len = max_len
        self.source_lengths = [len(text) for text in self.texts]
        self.target_lengths = [1] * count

    def __len__(self) -> int:
        return len(self.texts)

    def collate(self, indices: list[int]) -> Batch:
        longest = max(self.source_lengths[i] for i in indices)
        source = torch.full((len(indices), longest), PAD, dtype=torch.long)
        for row, i in enumerate(indices):
            ids = encode(self.texts[i], self.max_len)
            source[row, : len(ids)] = torch.tensor(ids)
        labels = torch.tensor([self.labels[i] + 1 for i in indices])  # class c -> id c + 1
        target = torch.stack([torch.full_like(labels, BOS_ID), labels], dim=1)  # (B, 2)
        return Batch(source, target, torch.tensor(indices))


def splits(setup: ToySetup) -> tuple[DigitStrings, DigitStrings]:
    config = ToyConfig()
    quarter = max(1, setup.examples // 4)
    return (
        DigitStrings(setup.examples, setup.data_seed, config.max_len),
        DigitStrings(quarter, setup.data_seed + 1, config.max_len),
    )


def accuracy(model: nn.Module, data: DigitStrings) -> float:
    with torch.no_grad():
        batch = data.collate(list(range(len(data))))
        predicted = model(batch.source).logits[:, 0, 1:].argmax(-1)  # ids 1.. are the classes
    return float((predicted == batch.target[:, 1] - 1).float().mean())


SPEC: TaskSpec[ToySetup, tuple[DigitStrings, DigitStrings], None] = TaskSpec(
    task="toy",
    preset=lambda setup: TINY,
    read=splits,
    build=lambda setup, data, vocabulary: ToyClassifier(ToyConfig(d_model=setup.d_model)),
    datasets=lambda setup, model, data, vocabulary: TaskData(
        data[0], data[1], lambda m: {"accuracy": accuracy(m, data[1])}
    ),
)
TINY = Preset(
    train=dict(
        lr=1e-2, warmup_steps=2, max_tokens=256, validate_every=4, log_every=2, label_smoothing=0.0
    ),
    summary="one layer, 16 wide",
)


def score(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """Accuracy on a test split the run never saw."""
    found = load_checkpoint(checkpoint, map_location=request.device)
    setup = ToySetup(**found.metadata["setup"])
    test = DigitStrings(request.limit or 32, setup.data_seed + 2, found.model.config.max_len)
    value = accuracy(found.model.eval(), test)
    return Evaluation({"accuracy": value}, [f"accuracy: {value:.2%} of {len(test)}"])


#: The toy's kind of page: its one layer's heads over the digits (no qkv code names it).
TOY_PAGE = PageKind(
    info=lambda facts: f"toy: {facts['heads']} heads over the digits",
    multi_head=True,
    source_row="digits",
)


class ToyAdapter(ExplorerAdapter):
    """The toy on the page: one self-attention layer over the digits, in a kind of page of
    its own."""

    kind, views = "toy", ("encoder",)
    config_facts = {"layers": "num_layers", "heads": "num_heads", "positions": "max_len"}
    page = TOY_PAGE

    def pages(self, model: nn.Module, inputs: list[Any], request: ExploreRequest) -> list[dict]:
        pages = []
        for text in inputs:
            ids = encode(text, model.config.max_len)
            with torch.no_grad():
                output = model(torch.tensor([ids]), need_weights=True)
            tokens = request.tokenizer.tokens(ids)
            layers = [weights[0] for weights in output.attention["self"]]  # (H, S, S)
            view = attention_view(
                "encoder", "self-attention", tokens, tokens, "source", "source", layers
            )
            view.update(causal=False)  # no q, k, v stored: the neuron view says so
            label = CLASSES[int(output.logits[0, 0, 1:].argmax())]
            pages.append(
                {
                    "name": text,
                    "source": text,
                    "source_tokens": tokens,
                    "output": label,
                    "output_tokens": [],
                    "views": [view],
                }
            )
        return pages


def load(checkpoint: str | Path, /, *, device: str = "cpu") -> LoadedModel:
    found = load_checkpoint(checkpoint, map_location=device)
    setup = ToySetup(**found.metadata["setup"])
    return LoadedModel(found.model, DigitTokens(), "toy", TOY_MODEL, str(checkpoint), setup=setup)


def view(checkpoint: str, inputs: Sequence[str], request: ViewRequest) -> ExplorerPage:
    loaded = load(checkpoint, device=request.device)
    return ExplorerPage(explore(loaded.model, list(inputs), tokenizer=loaded.tokenizer))


FAMILY = Family(
    name="toy",
    model_types=(TOY_MODEL,),
    setup=ToySetup,
    presets={"tiny": TINY},
    spec=SPEC,
    command=TrainCommand(
        help="train the toy: does a string of digits hold a 7?",
        description="A family declared outside qkv, registered through its record.",
        examples="qkv train toy --out runs/toy --max-steps 8",
        out_help="run folder",
    ),
    train=train_with_spec(SPEC),
    score=score,
    explorers={TOY_MODEL: ToyAdapter()},
    view=view,
    loader=load,
)
