"""Model sizes of the translation task: the model built for each family and size is the
preset's (every field of ``presets.PRESETS`` reaches the config), --dropout overrides it, a
bigger size has more parameters, and an unknown size is refused."""

import dataclasses

import pytest

from qkv.tasks.presets import PRESETS
from qkv.tasks.translation import SIZES, TranslationSetup, build_translation_model, family_of

MODELS = ["transformer", "rnn-attention", "rnn"]
BUILT = [size for size in SIZES if size != "base"]  # base is the paper's 6 + 6: slow to build


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("size", BUILT)
def test_the_built_model_has_its_presets_fields(model, size):
    config = build_translation_model(TranslationSetup(model=model, size=size), 100).config
    preset = PRESETS[(family_of(model), size)]
    assert preset.model or size == "small"  # only the Transformer's small is all defaults
    for name, value in preset.model.items():
        assert getattr(config, name) == value, name
    overridden = build_translation_model(
        TranslationSetup(model=model, size=size, dropout=0.05), 100
    ).config
    assert overridden.dropout == 0.05
    rest = {k: v for k, v in dataclasses.asdict(config).items() if k != "dropout"}
    assert {k: v for k, v in dataclasses.asdict(overridden).items() if k != "dropout"} == rest


@pytest.mark.parametrize(
    "model, bigger", [("transformer", "medium"), ("rnn-attention", "base"), ("rnn", "base")]
)
def test_a_bigger_size_has_more_parameters_than_small(model, bigger):
    def parameters(size):
        built = build_translation_model(TranslationSetup(model=model, size=size), 100)
        return sum(p.numel() for p in built.parameters())

    assert parameters(bigger) > parameters("small")


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        build_translation_model(TranslationSetup(size="huge"), 100)
