"""Grounding on the shapes scenes: how much of a captioner's attention falls on the object a
generated word names.

For every generated word that names an object, the share of that step's attention inside
the object's box (``GroundedWord.mass``), against what a uniform map puts there (the share
of the image the box covers, ``uniform``).  A generated shape word names the one object of
that shape and, if the word before it is a colour, of that colour; the colour word then
names it too.  Words that fit no object, or several, are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from ..data.scenes import COLOURS, SHAPES
from ..models.captioner_grounding import attention_mass_in_box, box_area_fraction

__all__ = ["GroundedWord", "name_objects", "ground_caption", "mean_grounding"]


@dataclass(frozen=True)
class GroundedWord:
    """A generated word that names a scene object: its attention inside the object's box
    (``mass``) and the share of the image that box covers (``uniform``)."""

    position: int
    word: str
    object_index: int
    mass: float
    uniform: float


def name_objects(words: Sequence[str], objects: Sequence) -> dict[int, int]:
    """Word position -> index of the object that word names, for a generated caption.

    A shape word names the one object with that shape and, when the word before it is a
    colour, that colour (the colour word then names it too); no or several matches: none."""
    named: dict[int, int] = {}
    for position, word in enumerate(words):
        if word not in SHAPES:
            continue
        before = words[position - 1] if position > 0 else None
        colour = before if before in COLOURS else None
        matches = [
            index
            for index, obj in enumerate(objects)
            if obj.shape == word and (colour is None or obj.colour == colour)
        ]
        if len(matches) == 1:
            named[position] = matches[0]
            if colour is not None:
                named[position - 1] = matches[0]
    return named


def ground_caption(
    words: Sequence[str], attention: Tensor, objects: Sequence, *, image_size: int, grid: int
) -> list[GroundedWord]:
    """The attention mass inside the named object's box, for each word that names one.

    Shapes: attention (len(words), P) with P = grid * grid."""
    if attention.dim() != 2 or attention.shape[0] != len(words):
        raise ValueError(
            f"attention must be (T, P) with T = {len(words)} words, got {tuple(attention.shape)}"
        )
    grounded = []
    for position, index in sorted(name_objects(words, objects).items()):
        box = objects[index].box
        grounded.append(
            GroundedWord(
                position=position,
                word=words[position],
                object_index=index,
                mass=attention_mass_in_box(attention[position], box, image_size, grid),
                uniform=box_area_fraction(box, image_size),
            )
        )
    return grounded


def mean_grounding(grounded: Sequence[GroundedWord]) -> tuple[float, float] | None:
    """(mean attention mass on the named objects, the uniform map's mean), or None when no
    word was grounded."""
    if not grounded:
        return None
    count = len(grounded)
    return sum(w.mass for w in grounded) / count, sum(w.uniform for w in grounded) / count
