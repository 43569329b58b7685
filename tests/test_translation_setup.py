"""Model sizes of the translation task: each size builds, and --dropout overrides it."""

import pytest

from qkv.tasks.translation import SIZES, TranslationSetup, build_translation_model


@pytest.mark.parametrize("model", ["transformer", "rnn-attention", "rnn"])
def test_each_size_but_base_builds_and_dropout_overrides_it(model):
    widths = {}
    for size in SIZES[:-1]:  # base is the paper's 6 + 6 model: too slow to build here
        config = build_translation_model(TranslationSetup(model=model, size=size), 100).config
        widths[size] = config
    assert widths["medium"].dropout == 0.3
    overridden = build_translation_model(
        TranslationSetup(model=model, size="medium", dropout=0.05), 100
    ).config
    assert overridden.dropout == 0.05


def test_medium_transformer_is_wider_than_small():
    small = build_translation_model(TranslationSetup(size="small"), 100).config
    medium = build_translation_model(TranslationSetup(size="medium"), 100).config
    assert (small.d_model, medium.d_model) == (96, 256)
    assert medium.num_encoder_layers == medium.num_decoder_layers == 3


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        build_translation_model(TranslationSetup(size="huge"), 100)
