"""The model families, each one typed record (:class:`Family`) that every command reads:
`qkv train` makes one subcommand per family, `qkv evaluate` scores with the family's
scorer, `qkv explore` and `qkv attention` open a checkpoint through its family.

The built-in families (translation, captioning, classifier, lm) are registered on import;
a family of one's own is one more :func:`register_family` call (tests/toy_family shows one).
"""

from . import captioning, classifier, lm, translation
from .record import (
    AnyFamily,
    ExplorerPage,
    ExplorerView,
    Family,
    Loader,
    Scorer,
    TrainCommand,
    Trained,
    Trainer,
    ViewRequest,
    evaluate_checkpoint,
    explore_with,
    families,
    family_named,
    family_of_checkpoint,
    family_of_type,
    register_family,
    train_with_spec,
)

# in this order: the order of `qkv train --help`
register_family(translation.FAMILY)
register_family(captioning.FAMILY)
register_family(classifier.FAMILY)
register_family(lm.FAMILY)

__all__ = [
    "AnyFamily",
    "Family",
    "TrainCommand",
    "Trained",
    "Trainer",
    "Scorer",
    "ExplorerView",
    "ExplorerPage",
    "ViewRequest",
    "Loader",
    "explore_with",
    "train_with_spec",
    "register_family",
    "families",
    "family_named",
    "family_of_type",
    "family_of_checkpoint",
    "evaluate_checkpoint",
]
