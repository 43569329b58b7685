"""Token-level cross-entropy for sequence models, with label smoothing, padding ignored."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sequence_loss"]


def sequence_loss(
    logits: Tensor, target: Tensor, *, pad_id: int = 0, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy over the non-padding target tokens, and how many there are.

    With label smoothing epsilon (Szegedy et al. 2016) each token's loss is
    (1 - epsilon) * (-log p(y)) + epsilon * mean_v(-log p(v)): the target distribution puts
    epsilon / V on every class and 1 - epsilon on the right one, as in
    ``F.cross_entropy(label_smoothing=epsilon)``.  The sum (not the mean) is returned so
    the caller can normalise over a whole step (accumulated batches, several processes).
    The loss is computed in float32 whatever the dtype of ``logits``.

    Shapes:
        logits (B, T, V); target (B, T) ids with ``pad_id`` where there is no token.
        Returns (loss_sum (), num_tokens ()), both 0-dim tensors on the logits' device.
    """
    if logits.dim() != 3 or target.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} must be (B, T, V) "
            "and (B, T)"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing} must lie in [0, 1)")
    keep = target != pad_id  # (B, T)
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    # a pad outside the vocabulary (NO_PAD_ID) is gathered as class 0, then dropped by keep
    picked = target.clamp(min=0) if pad_id < 0 else target
    nll = -log_probs.gather(-1, picked.unsqueeze(-1)).squeeze(-1)  # (B, T)
    if label_smoothing > 0.0:
        uniform = -log_probs.mean(dim=-1)  # (B, T)
        token_loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    else:
        token_loss = nll
    loss_sum = torch.where(keep, token_loss, torch.zeros_like(token_loss)).sum()
    return loss_sum, keep.sum()
