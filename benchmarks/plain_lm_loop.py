"""A plain PyTorch training loop with nanoGPT's published CPU recipe, and the one function that
scores every language model of ``benchmarks.lm_end_to_end`` and ``benchmarks.lm_presets``.

The recipe (nanoGPT's README, "I only have a macbook"): 4 layers x 128 wide, 4 heads, context
64, batches of 12 random windows, AdamW at lr 1e-3 with 100 linear warm-up iterations and a
cosine decay to 1e-4 over 2,000 iterations, betas (0.9, 0.99), weight decay 0.1 on the weight
matrices, gradient clipping at 1.0, dropout 0.  The model is ``benchmarks.lm.PlainGPT``,
initialised as nanoGPT's (``nano_init``: normal weights of std 0.02, the residual projections'
scaled by 1/sqrt(2 x layers), zero biases); the windows start anywhere in the training
text, drawn uniformly with replacement as nanoGPT's ``get_batch`` does.  The loop itself evaluates nothing (the scoring happens on snapshots
taken at wall-clock marks, after the clock has stopped), so it is the fastest a plain loop of
this recipe runs.

``score`` is the issue's yardstick: the mean next-token loss (nats per token; per character
with the char tokenizer) over non-overlapping windows of 65 tokens of the validation text,
each window's 64 predictions made with its own prefix in view.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.lm import PlainGPT

SCORE_WINDOW = 65


@dataclass(frozen=True)
class NanoRecipe:
    num_layers: int = 4
    d_model: int = 128
    num_heads: int = 4
    context: int = 64
    batch_size: int = 12
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: int = 100
    iterations: int = 2000
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.1
    clip_norm: float = 1.0


def nano_lr(recipe: NanoRecipe, iteration: int) -> float:
    """nanoGPT's ``get_lr``: linear warm-up, then half a cosine from lr to min_lr."""
    if iteration < recipe.warmup:
        return recipe.lr * (iteration + 1) / (recipe.warmup + 1)
    if iteration >= recipe.iterations:
        return recipe.min_lr
    progress = (iteration - recipe.warmup) / (recipe.iterations - recipe.warmup)
    return recipe.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (recipe.lr - recipe.min_lr)


def nano_init(model: PlainGPT) -> None:
    """nanoGPT's initialisation: N(0, 0.02) weights (embeddings too; the head is tied), the
    residual output projections N(0, 0.02 / sqrt(2 * layers)), zero biases."""
    residual_std = 0.02 / math.sqrt(2 * len(model.blocks))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.zero_()
        for block in model.blocks:
            block.proj.weight.normal_(0.0, residual_std)
            block.fc_out.weight.normal_(0.0, residual_std)


@dataclass
class LoopResult:
    iterations: int
    seconds: float
    tokens: int
    snapshots: dict[float, dict[str, Tensor]]  # wall-clock minute mark -> weights


def train_plain(
    train_ids: Tensor,
    vocab_size: int,
    *,
    minutes: float,
    marks: list[float],
    recipe: NanoRecipe = NanoRecipe(),
    seed: int = 0,
) -> tuple[PlainGPT, LoopResult]:
    """Train a PlainGPT on ``train_ids`` (N,) until its iterations or ``minutes`` end,
    whichever first; the weights at each wall-clock mark (minutes; a mark after the end gets
    the final weights)."""
    torch.manual_seed(seed)
    model = PlainGPT(
        vocab_size, recipe.d_model, recipe.num_heads, recipe.num_layers, recipe.context
    )
    nano_init(model)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": matrices, "weight_decay": recipe.weight_decay},
            {"params": vectors, "weight_decay": 0.0},
        ],
        lr=recipe.lr,
        betas=recipe.betas,
    )
    offsets = torch.arange(recipe.context + 1)
    pending, snapshots = sorted(marks), {}
    model.train()
    start = time.perf_counter()
    iteration = 0
    while iteration < recipe.iterations:
        elapsed = time.perf_counter() - start
        while pending and elapsed >= 60 * pending[0]:
            snapshots[pending.pop(0)] = _weights(model)
        if elapsed >= 60 * minutes:
            break
        for group in optimizer.param_groups:
            group["lr"] = nano_lr(recipe, iteration)
        starts = torch.randint(len(train_ids) - recipe.context, (recipe.batch_size,))
        windows = train_ids[starts[:, None] + offsets]  # (B, context + 1)
        logits = model(windows[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
        optimizer.step()
        iteration += 1
    seconds = time.perf_counter() - start
    for mark in pending:  # the loop ended before these marks: its final weights
        snapshots[mark] = _weights(model)
    tokens = iteration * recipe.batch_size * recipe.context
    return model, LoopResult(iteration, seconds, tokens, snapshots)


def _weights(model: nn.Module) -> dict[str, Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


@torch.no_grad()
def score(logits_of: Callable[[Tensor], Tensor], ids: Tensor, *, batch_size: int = 64) -> float:
    """Mean next-token loss over the non-overlapping windows of SCORE_WINDOW tokens of ``ids``
    (N,) (the last partial window left out).  ``logits_of``: (B, T) ids -> (B, T, V)."""
    count = ids.numel() // SCORE_WINDOW
    if count == 0:
        raise ValueError(f"the text has fewer than {SCORE_WINDOW} tokens: nothing to score")
    windows = ids[: count * SCORE_WINDOW].view(count, SCORE_WINDOW)
    total = 0.0
    for start in range(0, count, batch_size):
        batch = windows[start : start + batch_size]
        logits = logits_of(batch[:, :-1])
        total += F.cross_entropy(
            logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum"
        ).item()
    return total / (count * (SCORE_WINDOW - 1))


def score_snapshots(
    model: nn.Module,
    snapshots: dict[float, dict[str, Tensor]],
    ids: Tensor,
    logits_of: Callable[[Tensor], Tensor],
) -> dict[float, float]:
    """``score`` of ``model`` holding each snapshot's weights, in eval mode."""
    model.eval()
    scores = {}
    for mark, weights in sorted(snapshots.items()):
        model.load_state_dict(weights)
        scores[mark] = score(logits_of, ids)
    return scores
