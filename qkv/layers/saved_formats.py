"""Layouts of weights that qkv wrote before: read into today's layers, so old checkpoints
keep loading (the checkpoint fixtures in tests/ hold examples)."""

from __future__ import annotations

from collections.abc import MutableMapping

import torch

__all__ = ["stack_legacy_projections"]


def stack_legacy_projections(state: MutableMapping[str, object], prefix: str) -> None:
    """Rewrite, in place, one layer's separate ``q_proj``/``k_proj``/``v_proj`` entries (qkv
    checkpoints before the projections were stacked) as ``in_proj_weight``/``in_proj_bias``.
    Works on tensors and on shapes (tuples: the rows add up), so a checkpoint's header can be
    checked before its tensors are read."""
    for kind, new in (("weight", "in_proj_weight"), ("bias", "in_proj_bias")):
        names = [f"{prefix}{p}_proj.{kind}" for p in "qkv"]
        if not all(name in state for name in names) or prefix + new in state:
            continue
        parts = [state[name] for name in names]
        if isinstance(parts[0], tuple):
            if len({part[1:] for part in parts}) > 1:  # columns differ: cannot stack
                continue
            stacked = (sum(part[0] for part in parts), *parts[0][1:])
        else:
            try:
                stacked = torch.cat(parts)
            except RuntimeError:  # widths that cannot stack: leave them to be reported
                continue
        for name in names:
            del state[name]
        state[prefix + new] = stacked
