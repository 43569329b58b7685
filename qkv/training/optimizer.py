"""The trainer's optimizers: AdamW with decoupled weight decay on the weight matrices only,
or Muon on the hidden weight matrices with AdamW on the rest (nanochat's and
modded-nanogpt's split).  ``TrainConfig.optimizer`` picks one; the choices are
:data:`OPTIMIZERS`."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from .config import OPTIMIZERS, TrainConfig

__all__ = ["make_optimizer", "MuonAdamW", "OPTIMIZERS", "muon_matrices"]


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer ``config.optimizer`` names over ``model``'s trainable parameters.

    Weight decay applies to tensors of two or more dimensions (linear and embedding
    weights), not to biases and norm gains, whose shrinking towards zero is not a useful
    prior.  With ``"muon"`` the hidden layers' weight matrices (:func:`muon_matrices`) take
    Muon's orthogonalised updates and everything else AdamW's; on a torch without
    ``torch.optim.Muon`` (before 2.9) the run says so in one line and uses AdamW."""
    muon = set()
    if config.optimizer == "muon":
        if hasattr(torch.optim, "Muon"):
            muon = {id(p) for p in muon_matrices(model)}
        else:
            warnings.warn(
                f"optimizer 'muon' needs torch>=2.9 (this is {torch.__version__}); "
                "training with AdamW instead",
                stacklevel=2,
            )
    matrices, vectors, hidden = [], [], []
    for parameter in model.parameters():
        if not parameter.requires_grad:
            continue
        if id(parameter) in muon:
            hidden.append(parameter)
        else:
            (matrices if parameter.dim() >= 2 else vectors).append(parameter)
    if not matrices and not vectors and not hidden:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    groups = [
        {"params": matrices, "weight_decay": config.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    if not hidden:
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)
    return MuonAdamW(
        hidden, groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )


def muon_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The weights Muon updates: every trainable 2-D weight (the hidden layers' maps, a
    packed query/key/value projection orthogonalised as one matrix) except embedding tables
    and the output layer (a model names it with ``get_output_embeddings()``, as
    transformers' models do).  Those, biases and norm gains stay with AdamW: an embedding's
    rows and a classifier's columns are not the hidden maps whose updates Muon
    orthogonalises."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    excluded = {id(head.weight)} if head is not None else set()
    excluded |= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return [
        p for p in model.parameters() if p.requires_grad and p.dim() == 2 and id(p) not in excluded
    ]


class MuonAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` over ``hidden`` (2-D weights) and ``torch.optim.AdamW`` over
    ``groups``, stepped together as one optimizer, so that a schedule, gradient clipping
    and checkpoints treat them as one.

    Muon's step is scaled to match AdamW's update size (``adjust_lr_fn="match_rms_adamw"``),
    so both share one learning rate and one weight decay.  ``param_groups`` are the two
    optimizers' own groups (Muon's first): a scheduler that sets ``group["lr"]`` sets it for
    the optimizer that reads it."""

    def __init__(
        self,
        hidden: list[nn.Parameter],
        groups: list[dict[str, Any]],
        *,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        momentum: float = 0.95,
    ) -> None:
        self.muon = torch.optim.Muon(
            hidden,
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            adjust_lr_fn="match_rms_adamw",
        )
        self.adamw = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas)
        # the children's group dicts themselves: one lr set by a scheduler reaches its owner
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != {"muon", "adamw"}:
            raise ValueError(
                "this optimizer state was not saved by MuonAdamW (expected its 'muon' and "
                "'adamw' parts); resume with the optimizer the run was trained with"
            )
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        # loading gives each child new group dicts: share them again, or a schedule would
        # set the learning rate of groups no optimizer reads
        self.param_groups = [*self.muon.param_groups, *self.adamw.param_groups]
