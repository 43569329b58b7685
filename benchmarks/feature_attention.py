"""What SelfAttention2d costs: one training step of the Fashion-MNIST image classifier with
and without feature-map self-attention after the CNN's last stage, side by side.

    python -m benchmarks.feature_attention               # batch 512 (the CLI's default)
    python -m benchmarks.feature_attention --batch 128

Each step is forward + backward + AdamW update on random 28 x 28 grey images (the time does
not depend on the pixels).  The two models take turns (``interleaved``), once on one thread
and once on torch's default threads, so a load on the machine hits both alike.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import interleaved, machine, table
from qkv.models import ClassifierConfig, ImageClassifier


def _step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run() -> None:
        logits = model(images).logits[:, 0]
        torch.nn.functional.cross_entropy(logits, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--feature-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    images, labels = torch.rand(args.batch, 1, 28, 28), torch.randint(1, 11, (args.batch,))
    models = {
        name: ImageClassifier(
            ClassifierConfig(num_classes=10, feature_dim=args.feature_dim, feature_attention=flag)
        )
        for name, flag in (("CNN", False), ("CNN + SelfAttention2d", True))
    }
    default_threads = torch.get_num_threads()
    rows = []
    for threads in sorted({1, default_threads}):
        torch.set_num_threads(threads)
        runs = {name: _step(model, images, labels) for name, model in models.items()}
        seconds = interleaved(runs, rounds=args.rounds)
        for name, model in models.items():
            parameters = sum(p.numel() for p in model.parameters())
            ratio = seconds[name] / seconds["CNN"]
            rows.append([name, threads, parameters, 1000 * seconds[name], ratio])
    print(f"{machine()}; batch {args.batch} images 28 x 28, feature_dim {args.feature_dim}")
    print(table(["model", "threads", "parameters", "ms / step", "x CNN"], rows))


if __name__ == "__main__":
    main()
