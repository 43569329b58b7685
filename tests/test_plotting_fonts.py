"""Chinese, Japanese and Korean labels are drawn as characters: no plot makes matplotlib
warn "Glyph ... missing from font".  Needs a CJK font (Debian: fonts-noto-cjk, which .ci/run
installs)."""

import warnings

import numpy as np

from qkv.plotting import fonts, plot_alignment, plot_alignment_grid

TOKENS = list("我爱AI")


def glyph_warnings(draw) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_a_heatmap_of_chinese_tokens_warns_of_no_missing_glyph(tmp_path):
    assert fonts._installed_fallbacks(), (
        "no CJK font is installed: apt-get install fonts-noto-cjk (as .ci/run does)"
    )
    weights = np.full((4, 4), 0.25)
    missing = glyph_warnings(
        lambda: plot_alignment(weights, TOKENS, TOKENS, tmp_path / "a.png", title="我爱AI")
    )
    assert missing == []
    grid = np.full((2, 3, 3), 1 / 3)
    words = ["こんにちは", "한국어", "漢字"]  # Japanese, Korean, traditional Chinese
    missing = glyph_warnings(
        lambda: plot_alignment_grid(grid, words, words, tmp_path / "b.png", titles=["头", "頭"])
    )
    assert missing == []


def test_without_a_cjk_font_the_warning_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(fonts, "_installed_fallbacks", lambda: ())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_alignment(np.full((4, 4), 0.25), TOKENS, TOKENS, tmp_path / "a.png")
    ours = [str(w.message) for w in caught if w.category is fonts.MissingGlyphsWarning]
    assert len(ours) == 1 and "fonts-noto-cjk" in ours[0] and "我爱" in ours[0]
    # and matplotlib reports the missing glyphs: what the test above would catch
    assert any("Glyph 25105" in str(w.message) for w in caught)


def test_latin_labels_keep_the_default_font():
    assert fonts.fallback_fonts(["attention", "is all", "you need.", None]) == []
    assert fonts.fallback_fonts(["我爱AI"]) == ["Noto Sans CJK SC"]
