"""The model families, each one typed record (:class:`Family`) that every command reads:
`qkv train` makes one subcommand per family, `qkv evaluate` scores with the family's
scorer, `qkv explore` and `qkv attention` open a checkpoint through its family.

The built-in families (translation, captioning, classifier, lm) are registered on import;
a family of one's own is one more :func:`register_family` call (tests/toy_family shows one).
"""

from . import captioning, classifier, lm, record, translation
from .record import *  # noqa: F403  (the record's names are the package's interface)

# in this order: the order of `qkv train --help`
record.register_family(translation.FAMILY)
record.register_family(captioning.FAMILY)
record.register_family(classifier.FAMILY)
record.register_family(lm.FAMILY)

__all__: list[str] = []
__all__ += record.__all__  # the record's names, the package's whole interface
