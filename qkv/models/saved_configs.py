"""Model configs that qkv wrote before one of their defaults changed meaning, read as the
models that were built then (``load_checkpoint`` passes every config through here, with the
shapes of the checkpoint's weights)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["upgrade_saved_config"]

#: The additive score's hidden layer of the RNN translators (Bahdanau's decoder).
_ADDITIVE_KEYS = "decoder.attention.score.key_proj.weight"
#: Before 2026-12-02 the three classifiers shared one config holding every one's fields;
#: these are the fields each never read, dropped from its saved config.
_UNREAD_CLASSIFIER_FIELDS = {
    "image-classifier": ("pool", "tagger_layers", "num_heads", "positions"),
    "clip-classifier": ("tagger_layers", "num_heads", "positions"),
    "frame-tagger": ("pool",),
}


def upgrade_saved_config(
    model_type: str, config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, Any]:
    """``config`` with what its weights say where a default changed since it was written.

    - RNN translators: ``attention_dim=None`` now means the decoder's width H (Bahdanau et
      al.'s n' = n); before 2026-12-01 it built a score as wide as the encoder states (2H).
      Such checkpoints get the width their weights have.
    - Classifiers: before 2026-12-02 one config held the fields of all three; the fields
      the checkpoint's model never read are dropped (its weights do not depend on them).
    - Language models: before the one-LM config (2026-12-07) the norms' epsilon was
      ``layer_norm_eps``; it is ``norm_eps`` now."""
    config = dict(config)
    if model_type == "lm" and "layer_norm_eps" in config:
        config["norm_eps"] = config.pop("layer_norm_eps")
    for name in _UNREAD_CLASSIFIER_FIELDS.get(model_type, ()):
        config.pop(name, None)
    if model_type in ("rnn", "rnn-attention") and config.get("attention_dim") is None:
        shape = shapes.get(_ADDITIVE_KEYS)
        if shape and shape[0] != config.get("hidden_dim"):
            config["attention_dim"] = shape[0]
    return config
