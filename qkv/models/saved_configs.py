"""Model configs that qkv wrote before one of their defaults changed meaning, read as the
models that were built then (``load_checkpoint`` passes every config through here, with the
shapes of the checkpoint's weights).

Each model type registers its own upgrade with its model (``register_model(..., upgrade=)``,
beside the config whose meaning changed); today:

- RNN translators (``qkv.models.rnn``): ``attention_dim=None`` now means the decoder's width H
  (Bahdanau et al.'s n' = n); before 2026-12-01 it built a score as wide as the encoder states
  (2H).  Such checkpoints get the width their weights have.
- Classifiers (``qkv.models.classifier``): before 2026-12-02 one config held the fields of all
  three; the fields the checkpoint's model never read are dropped (its weights do not depend
  on them).
- Language models (``qkv.models.lm``): before the one-LM config (2026-12-07) the norms'
  epsilon was ``layer_norm_eps``; it is ``norm_eps`` now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .registry import saved_config_upgrade

__all__ = ["upgrade_saved_config"]


def upgrade_saved_config(
    model_type: str, config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, Any]:
    """``config`` with what its weights say where a default changed since it was written
    (the upgrade registered for ``model_type``; a copy as it is when none is)."""
    upgrade = saved_config_upgrade(model_type)
    return dict(config) if upgrade is None else upgrade(dict(config), shapes)
