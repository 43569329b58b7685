"""Fonts for labels in any script: Chinese, Japanese and Korean tokens drawn as characters.

matplotlib's default font (DejaVu Sans) has no CJK glyphs: a heatmap of 我爱AI would show
boxes (and warn "Glyph ... missing from font").  :func:`use_label_fonts` looks at the texts
of a figure about to be saved; when the default font lacks some of their characters it puts
an installed font that has them (Noto Sans CJK, Debian's ``fonts-noto-cjk``) behind the
default in those texts' font fallback list (matplotlib draws each glyph from the first font
of the list that has it), for that figure only.
When no installed font has them, one :class:`MissingGlyphsWarning` names the characters and
the package to install; the labels then show boxes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from pathlib import Path

import matplotlib
from matplotlib import font_manager
from matplotlib.text import Text

__all__ = ["use_label_fonts", "fallback_fonts", "MissingGlyphsWarning", "CJK_FONT_FAMILIES"]

#: Fonts tried, in order, for characters the default font lacks.
CJK_FONT_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans CJK TC",
    "Noto Sans CJK KR",
    "Noto Sans CJK HK",
    "Noto Serif CJK SC",
)
# Where Debian's fonts-noto-cjk puts them: registered with matplotlib if its font cache was
# built before the package was installed.
_DEBIAN_FONT_FILES = (
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
    Path("/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc"),
)
_INSTALL_HINT = (
    "install a font that has them: Debian/Ubuntu `apt-get install fonts-noto-cjk`, "
    "or any Noto Sans CJK font, then delete matplotlib's font cache (~/.cache/matplotlib)"
)


class MissingGlyphsWarning(UserWarning):
    """Labels hold characters that no installed font can draw."""


def fallback_fonts(texts: Iterable[str | None]) -> list[str]:
    """The font families to put behind the default for ``texts``: none when the default font
    draws every character, else the first of :data:`CJK_FONT_FAMILIES` installed that has
    the characters it lacks (none, and a :class:`MissingGlyphsWarning`, when no font has)."""
    missing = _missing(texts, _default_file())
    if not missing:
        return []
    for family, path in _installed_fallbacks():
        if not _missing(missing, path):
            return [family]
    shown = "".join(sorted(missing))[:20]
    warnings.warn(
        f"no installed font has the characters {shown!r} of these labels, so they are drawn "
        f"as boxes; {_INSTALL_HINT}",
        MissingGlyphsWarning,
        stacklevel=3,
    )
    return []


def use_label_fonts(figure) -> list[str]:
    """Put the :func:`fallback_fonts` of all the texts of ``figure`` (titles, axis and tick
    labels, legends) behind each text's own font families; returns the fallbacks.
    :func:`~qkv.plotting.save_figure` calls it, so every qkv plot draws its labels in a font
    that has their characters."""
    texts = [text for text in figure.findobj(Text) if text.get_text()]
    extra = fallback_fonts(text.get_text() for text in texts)
    for text in texts if extra else ():
        text.set_fontfamily([*text.get_fontfamily(), *extra])
    return extra


def _default_families() -> list[str]:
    family = matplotlib.rcParams["font.family"]
    return [family] if isinstance(family, str) else list(family)


def _default_file() -> str:
    return font_manager.findfont(font_manager.FontProperties(family=_default_families()))


def _missing(texts: Iterable[str | None], font_file: str) -> set[str]:
    """The printable characters of ``texts`` that the font in ``font_file`` has no glyph for."""
    charmap = _charmap(font_file)
    wanted = {char for text in texts if text for char in text if char.isprintable()}
    return {char for char in wanted if not char.isspace() and ord(char) not in charmap}


@functools.lru_cache(maxsize=16)
def _charmap(font_file: str) -> frozenset[int]:
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(font_file).get_charmap())


@functools.lru_cache(maxsize=1)
def _installed_fallbacks() -> tuple[tuple[str, str], ...]:
    """(family, file) of each installed font of :data:`CJK_FONT_FAMILIES`, in that order."""
    known = {entry.name for entry in font_manager.fontManager.ttflist}
    for path in _DEBIAN_FONT_FILES:
        if path.is_file() and not known.intersection(CJK_FONT_FAMILIES):
            font_manager.fontManager.addfont(str(path))
    files = {}
    for entry in font_manager.fontManager.ttflist:
        if entry.name in CJK_FONT_FAMILIES and entry.weight in (400, "normal", "regular"):
            files.setdefault(entry.name, entry.fname)
    return tuple((family, files[family]) for family in CJK_FONT_FAMILIES if family in files)
