"""Sizes and defaults: one :class:`Preset` per model family and size, the single place the
tasks, ``--help`` and the docs read a size's model fields, training recipe and vocabulary from.

Families: ``transformer`` and ``rnn`` (translation; ``rnn`` with or without attention),
``captioner`` (one size, ``default``), ``lm`` and ``classifier`` (whose "size" follows the
data: 28-pixel pictures, 64-pixel pictures, clips).

A preset's ``recipe`` (peak lr, warm-up, batch tokens; :mod:`qkv.training.recipes`) is fitted
to the run's budget; ``train`` holds the trainer fields that differ from ``TrainConfig``'s
defaults for the family.  A value the user gives always wins over both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..training.recipes import Recipe

__all__ = [
    "Preset",
    "PRESETS",
    "TRANSFORMER_SIZES",
    "RNN_SIZES",
    "CAPTIONER_SIZES",
    "LM_SIZES",
    "CLASSIFIER_SIZES",
    "LM_FINETUNE",
    "RECIPES",
    "preset_for",
    "recipe_for",
    "sizes_of",
]


@dataclass(frozen=True)
class Preset:
    """One size of one family: the model's fields, how it trains, its vocabulary.

    model: config fields of the family's model (translation Transformers: over
        ``TransformerConfig.small``, ``base`` over ``TransformerConfig.base``).
    recipe: lr, warm-up and batch tokens fitted to the run's budget (None: not fitted).
    vocab_size: the BPE vocabulary trained when none is given (None: the family's own).
    train: ``TrainConfig`` fields this family trains with unless the user gives them.
    summary: what the size is for, in a few words (``--help``)."""

    model: Mapping[str, Any] = field(default_factory=dict)
    recipe: Recipe | None = None
    vocab_size: int | None = None
    train: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""


#: ``medium``, the Transformer: 3 + 3 blocks 256 wide (the sizes of ``small-data`` too).
_MEDIUM = dict(d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024)

#: ``small-data``, the Transformer.  Started from the low-resource recipes of Sennrich &
#: Zhang (2019, "Revisiting Low-Resource NMT") and Araabi & Monz (2020, "Optimizing
#: Transformer for Low-Resource NMT"): pre-norm blocks, few layers and heads, dropout 0.3 on
#: the residuals and the feed-forward activation, 0.1 on the attention weights, word dropout
#: 0.1 (Araabi & Monz found 5 + 5 blocks best; 3 + 3 here, for CPU budgets).  Chosen by
#: measurement on ding-de-en's valid split (``python -m benchmarks.small_data_presets``;
#: docs/results.md): in runs of 20-30 minutes on a CPU, a few epochs, that regularisation
#: slowed learning more than it prevented over-fitting; dropout 0.1 everywhere and no word
#: dropout, with a peak lr of 2e-3, reached a valid loss of 4.47 at update 400 where the
#: recipe's values had 5.25.  Raise them for longer runs.  The peaks of both small-data
#: recipes (2e-3, from the published 1e-3) were chosen the same way; the recipes add the
#: plateau schedule and label smoothing 0.1.
SMALL_DATA_TRANSFORMER: dict[str, Any] = dict(
    _MEDIUM,
    norm_first=True,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.1,
    word_dropout=0.0,
)

#: ``small-data``, the RNNs (with and without attention): 256 wide.  Started from Sennrich &
#: Zhang's RNN (dropout 0.3, lr 1e-3; they also used word dropout, which ``RNNConfig`` does
#: not have); chosen by measurement on ding-de-en's valid split: dropout 0.2 with a peak lr
#: of 2e-3 reached a valid loss of 3.91 in 12 minutes where dropout 0.3 and 1e-3 had 4.08.
SMALL_DATA_RNN: dict[str, Any] = dict(embedding_dim=256, hidden_dim=256, dropout=0.2)

#: The joint BPE vocabulary when none is given: small corpora want small vocabularies
#: (Sennrich & Zhang 2019; 4,000 is what docs/results.md's ding runs used).
SMALL_DATA_VOCAB_SIZE, DEFAULT_VOCAB_SIZE = 4000, 8000

_PLATEAU = dict(max_tokens=2048, schedule="plateau", label_smoothing=0.1)
#: The language model and the classifiers train with fixed values, not a fitted recipe.
_FIXED = dict(lr=2e-3, warmup_steps=100, label_smoothing=0.0, validate_every=250)
#: The language models: AdamW with nanoGPT's weight decay 0.1 and beta2 0.99, a cosine from
#: the peak down to a tenth of it over the steps the budget allows (with --max-minutes, the
#: steps the clock allows at the speed of the run's first steps: training/clock_fit.py).
#: ``small`` was chosen by 6-minute runs on kjv, one thread each, two side by side
#: (``python -m benchmarks.lm_presets``; docs/benchmarks.md): context 64 with batches of 12
#: windows and no dropout reached 1.34 nats/char on kjv valid at a peak of 3e-3, 1.37 at
#: 2e-3; context 128 in batches of 8, 1.47; batches of 16, 1.35-1.36 (the old preset, context
#: 128, dropout 0.1, inverse-sqrt at 2e-3: 1.70 in the issue's run).  ``medium`` takes
#: nanoGPT's published recipe for its 6 x 384 character model (peak 1e-3, floor 1e-4,
#: dropout 0.2), not measured here.  Validation reads a fixed sample of 10 batches (nanoGPT's
#: eval_iters) every 500 steps, all of the text at the end: in a 6-minute run of ``small``,
#: 0.7 % and 2.4 % of the run (``python -m benchmarks.lm_end_to_end``).  ``small`` then
#: takes Muon for its hidden matrices (AdamW for the rest, the same peak and decay): of the
#: levers measured one at a time at a fixed wall clock (``python -m benchmarks.lm_levers``:
#: RoPE, QK-norm, ReLU^2, untied output, windows, Muon), Muon gained the most, about 7 % in
#: nats/char for 24 % fewer updates.  The sizes hold for every architecture (a gated
#: feed-forward takes its own width); Llama's layout with Muon, the default, reached 0.7 %
#: below GPT-2's with Muon over three seeds, and 2 KV heads, a tied output or 6 layers did
#: not beat it (``python -m benchmarks.lm_levers``).
_LM = dict(
    _FIXED,
    validate_every=500,
    schedule="cosine",
    weight_decay=0.1,
    betas=(0.9, 0.99),
    log_every=50,
    eval_batches=10,
)

#: Fine-tuning a language model (``qkv train lm --init-from``): the model is the folder's, so
#: this preset has no model fields.  A pretrained model wants a peak lr well below a fresh
#: one's -- AdamW at 1e-4, the range commonly used to fine-tune GPT-2-sized models, down to
#: 1e-5 by the cosine -- a short warm-up, and validation every 100 steps, as fine-tuning runs
#: are short.
LM_FINETUNE = Preset(
    train={**_LM, "lr": 1e-4, "min_lr": 1e-5, "warmup_steps": 20, "validate_every": 100},
    summary="the model and tokenizer of --init-from",
)

#: What each translation size is for, the same for both families (``base`` says its own).
_TRANSLATION_SUMMARIES = {
    "small": "CPU-sized",
    "medium": "for corpora of ~10-100k sentence pairs, with dropout 0.3",
    "small-data": "low-resource recipes chosen on ding-de-en's valid split",
}


def _translation(
    size: str, recipe: Recipe, model: Mapping[str, Any] | None = None, summary: str = ""
) -> Preset:
    """A translation size of either family: small-data trains the small BPE vocabulary, the
    other sizes the default one."""
    vocab_size = SMALL_DATA_VOCAB_SIZE if size == "small-data" else DEFAULT_VOCAB_SIZE
    summary = summary or _TRANSLATION_SUMMARIES[size]
    return Preset(model=model or {}, recipe=recipe, vocab_size=vocab_size, summary=summary)


#: Each preset family's sizes (size -> preset).  Small sizes: measured on `dates` and the
#: scenes (see docs/results.md, "Defaults that learn"); base: the papers' settings (Vaswani
#: et al. 2017).
TRANSFORMER_SIZES: dict[str, Preset] = {
    "small": _translation("small", Recipe(lr=3e-3, warmup_steps=200, max_tokens=512)),
    "medium": _translation(
        "medium", Recipe(lr=1e-3, warmup_steps=1000, max_tokens=4096), {**_MEDIUM, "dropout": 0.3}
    ),
    "small-data": _translation(
        "small-data", Recipe(lr=2e-3, warmup_steps=1000, **_PLATEAU), SMALL_DATA_TRANSFORMER
    ),
    "base": _translation(
        "base",
        Recipe(lr=5e-4, warmup_steps=4000, max_tokens=4096),
        summary="the paper's Transformer",
    ),
}
RNN_SIZES: dict[str, Preset] = {
    "small": _translation(
        "small",
        Recipe(lr=3e-3, warmup_steps=100, max_tokens=1024),
        dict(embedding_dim=256, hidden_dim=256),
    ),
    "medium": _translation(
        "medium",
        Recipe(lr=1e-3, warmup_steps=200, max_tokens=4096),
        dict(embedding_dim=256, hidden_dim=256, dropout=0.3),
    ),
    "small-data": _translation(
        "small-data", Recipe(lr=2e-3, warmup_steps=300, **_PLATEAU), SMALL_DATA_RNN
    ),
    "base": _translation(
        "base",
        Recipe(lr=1e-3, warmup_steps=1000, max_tokens=4096),
        dict(embedding_dim=512, hidden_dim=512),
        summary="512 wide",
    ),
}
#: no label smoothing (a caption word has few right answers), more frequent validation
CAPTIONER_SIZES: dict[str, Preset] = {
    "default": Preset(
        recipe=Recipe(lr=2e-3, warmup_steps=100, max_tokens=2048),
        train=dict(label_smoothing=0.0, validate_every=500),
    ),
}
LM_SIZES: dict[str, Preset] = {
    "small": Preset(
        model=dict(num_layers=4, d_model=128, num_heads=4, d_ff=512, max_len=64, dropout=0.0),
        train={**_LM, "lr": 3e-3, "min_lr": 3e-4, "optimizer": "muon"},
        summary="4 layers x 128 wide, context 64",
    ),
    "medium": Preset(
        model=dict(num_layers=6, d_model=384, num_heads=6, d_ff=1536, max_len=256, dropout=0.2),
        train={**_LM, "lr": 1e-3, "min_lr": 1e-4},
        summary="6 x 384, context 256",
    ),
}
CLASSIFIER_SIZES: dict[str, Preset] = {
    # batches (frames) and epochs that learn in a few minutes on a CPU (measured, one
    # thread): Fashion-MNIST 2 epochs of 512 pictures (216 updates, 86 % valid); 64-pixel
    # pictures 5 epochs of 64 (the one-object scenes: 320 updates in about a minute, 97 %; at
    # 2 epochs of 64 they were still at 59 %); clips 1 epoch of 512 frames (about 470
    # updates; 400 gave 77 % valid with attention pooling)
    "pictures": Preset(
        train={**_FIXED, "max_tokens": 512, "epochs": 2}, summary="28-pixel pictures"
    ),
    "large-pictures": Preset(
        train={**_FIXED, "max_tokens": 64, "epochs": 5}, summary="pictures of 64 pixels or more"
    ),
    "clips": Preset(train={**_FIXED, "max_tokens": 512, "epochs": 1}, summary="clips"),
}

#: (preset family, size) -> preset: every table above, under its family's name.
PRESETS: dict[tuple[str, str], Preset] = {
    (family, size): preset
    for family, sizes in (
        ("transformer", TRANSFORMER_SIZES),
        ("rnn", RNN_SIZES),
        ("captioner", CAPTIONER_SIZES),
        ("lm", LM_SIZES),
        ("classifier", CLASSIFIER_SIZES),
    )
    for size, preset in sizes.items()
}


#: (family, size) -> recipe, for the families whose recipe is fitted to the budget.
RECIPES: dict[tuple[str, str], Recipe] = {
    key: preset.recipe for key, preset in PRESETS.items() if preset.recipe is not None
}


def sizes_of(family: str) -> tuple[str, ...]:
    """The sizes of a family, in the table's order."""
    return tuple(size for name, size in PRESETS if name == family)


def preset_for(family: str, size: str) -> Preset:
    """The preset of a family and size (an InputError names the known ones)."""
    if (family, size) not in PRESETS:
        known = ", ".join(f"{f}/{s}" for f, s in PRESETS)
        raise InputError(f"no preset for {family}/{size}; known: {known}")
    return PRESETS[(family, size)]


def recipe_for(family: str, size: str) -> Recipe:
    """The recipe of a family and size (an InputError names the known ones)."""
    if (family, size) not in RECIPES:
        known = ", ".join(f"{f}/{s}" for f, s in RECIPES)
        raise InputError(f"no training recipe for {family}/{size}; known: {known}")
    return RECIPES[(family, size)]
