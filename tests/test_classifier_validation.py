"""A classifier's validation is one pass over the data: accuracy and loss from the same
forward pass, the loss equal to the trainer's own validation loss."""

from contextlib import nullcontext

import numpy as np
import torch

from qkv.data.clips import ClipSet, make_clips
from qkv.models import build_model
from qkv.tasks.classifier import CLASSIFIER, ClassificationData, ClassifierSetup
from qkv.training.distributed import DistributedContext
from qkv.training.validation import Validation, validation_loss


class Batches:
    def __init__(self, count: int, size: int):
        self.list = [list(range(i, min(i + size, count))) for i in range(0, count, size)]

    def batches(self, epoch: int) -> list[list[int]]:
        return self.list


def _clips(count: int) -> ClassificationData:
    labels = np.arange(50) % 10
    images = np.zeros((50, 28, 28), dtype=np.uint8)
    for index, label in enumerate(labels):
        images[index, 2 * label + 4 : 2 * label + 6, 6:22] = 200
    clips = make_clips(labels, range(50), task="clip", count=count, seed=0, stream=0)
    return ClassificationData(ClipSet(clips, images), "clip")


def test_validation_scores_accuracy_and_loss_in_one_pass(monkeypatch):
    torch.manual_seed(0)
    model = build_model("clip-classifier", dict(num_classes=10, feature_dim=8, grid=7))
    data = _clips(70)
    task = CLASSIFIER.datasets(ClassifierSetup(data="clips"), model, (data, data), None)
    context = DistributedContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    batches = Batches(len(data), 16)
    with torch.no_grad():
        model.eval()
        want = validation_loss(model, data, batches, context)
    calls = []
    classify = model.classify
    monkeypatch.setattr(model, "classify", lambda *a, **k: calls.append(1) or classify(*a, **k))
    validation = Validation(
        data, batches, context, sample=2, evaluate=task.evaluate, autocast=nullcontext()
    )
    metrics = validation(model, last=True)
    assert len(calls) == 2  # evaluate_classifier's batches of 64: one pass over 70 clips
    assert abs(metrics["valid_loss"] - want["valid_loss"]) < 1e-5
    assert abs(metrics["valid_ppl"] - want["valid_ppl"]) < 1e-4
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["count"] == 70
    assert not any(name.endswith("_full") for name in metrics)  # the one pass saw them all
