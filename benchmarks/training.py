"""Training throughput: qkv's Transformer against an equal ``torch.nn.Transformer``, one run.

    python -m benchmarks.training                      # small model, 20 steps each
    python -m benchmarks.training --steps 5            # a quick look
    python -m benchmarks.training --vocab 1000         # less of the step in the output layer
    python -m benchmarks.training --size base --steps 6 --tokens 2048
    python -m benchmarks.training --family rnn --threads 1   # the recurrent translators

With ``--family rnn``: the no-attention ``rnn`` against ``rnn-attention`` (additive and
general) on ding-de-en batches; see ``benchmarks.recurrent_training``.  The rest of this
text describes the Transformer comparison.

One training step = forward, label-smoothed cross-entropy (``qkv.training.sequence_loss``,
epsilon 0.1, mean over real target tokens), backward, AdamW step (``make_optimizer`` with the
trainer's defaults).  The two models differ only in the encoder-decoder stack: both use the
same token embeddings (x sqrt(d_model)), qkv's sinusoidal positions, the same tied output
projection, the same hyper-parameters (width, heads, layers, feed-forward, dropout,
norm_first, final LayerNorms) and the same starting weights (copied across, then checked to
give the same logits).  ``nn.Transformer`` gets the masks a PyTorch user passes: key padding
masks for source, target and memory, and a boolean causal ``tgt_mask``.

Both models train on the same batches (random ids, ``--tokens`` real target tokens per batch,
source and target lengths uniform in 10..40, right-padded).  Steps alternate between the
models (qkv, torch, torch, qkv, qkv, torch, ...) so that drift on a shared machine hits both
alike.  Throughput counts real (non-padding) target tokens.  The output projection and the
loss over a ``--vocab`` of 8000 (a BPE translation vocabulary) are the same code in both and
take much of a small model's step; a smaller vocabulary shows the stacks' difference more.
On a busy machine, ``--threads 1`` gives steadier numbers.
"""

from __future__ import annotations

import argparse
import math
import statistics
import warnings

import torch
from torch import Tensor, nn

from benchmarks.common import machine, table
from benchmarks.train_steps import make_step, measure
from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, Batch, collate
from qkv.layers.positions import SinusoidalPositionalEncoding
from qkv.models.transformer import Transformer, TransformerConfig
from qkv.models.transformer_stack import load_torch_transformer
from qkv.training.config import TrainConfig
from qkv.training.optimizer import make_optimizer

SPECIAL_IDS = 4  # PAD, BOS, EOS, UNK: random tokens are drawn above them


class TorchTransformer(nn.Module):
    """``nn.Transformer`` with the same embeddings, positions and output layer as qkv's model.

    Shapes: source (B, S), target_input (B, T) token ids -> logits (B, T, V).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if config.positions != "sinusoidal" or config.share_embeddings:
            raise ValueError("the torch twin supports sinusoidal positions, separate embeddings")
        d_model, pad_id = config.d_model, config.pad_id
        self.pad_id = pad_id
        self.embedding_scale = math.sqrt(d_model) if config.scale_embeddings else 1.0
        self.source_embedding = nn.Embedding(config.source_vocab_size, d_model, padding_idx=pad_id)
        self.target_embedding = nn.Embedding(config.target_vocab_size, d_model, padding_idx=pad_id)
        self.source_positions = SinusoidalPositionalEncoding(
            d_model, max_len=config.max_len, dropout=config.dropout
        )
        self.target_positions = SinusoidalPositionalEncoding(
            d_model, max_len=config.max_len, dropout=config.dropout
        )
        with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first was True"
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                d_model=d_model,
                nhead=config.num_heads,
                num_encoder_layers=config.num_encoder_layers,
                num_decoder_layers=config.num_decoder_layers,
                dim_feedforward=config.d_ff,
                dropout=config.dropout,
                activation=config.activation.replace("gelu_tanh", "gelu"),
                layer_norm_eps=config.layer_norm_eps,
                batch_first=True,
                norm_first=config.norm_first,
            )
        self.output = nn.Linear(d_model, config.target_vocab_size, bias=False)
        if config.tie_output:
            self.output.weight = self.target_embedding.weight

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        source_padding = source == self.pad_id  # (B, S), True = ignore (PyTorch's convention)
        target_padding = target_input == self.pad_id  # (B, T)
        length = target_input.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=source.device).triu(1)
        src = self.source_positions(self.source_embedding(source) * self.embedding_scale)
        tgt = self.target_positions(self.target_embedding(target_input) * self.embedding_scale)
        hidden = self.transformer(
            src,
            tgt,
            tgt_mask=causal,
            src_key_padding_mask=source_padding,
            tgt_key_padding_mask=target_padding,
            memory_key_padding_mask=source_padding,
            tgt_is_causal=True,
        )
        return self.output(hidden)  # (B, T, V)


def build_models(config: TransformerConfig, seed: int) -> tuple[Transformer, TorchTransformer]:
    """qkv's model and its torch twin, holding the same weights."""
    torch.manual_seed(seed)
    theirs = TorchTransformer(config)
    # nn.Transformer always ends both stacks in a LayerNorm; give qkv's the same.
    ours = Transformer(config.replace(final_norm=True))
    with torch.no_grad():
        load_torch_transformer(ours.encoder, ours.decoder, theirs.transformer)
        ours.source_embedding.weight.copy_(theirs.source_embedding.weight)
        ours.target_embedding.weight.copy_(theirs.target_embedding.weight)
        if not config.tie_output:
            ours.output.weight.copy_(theirs.output.weight)
    return ours, theirs


def make_batches(
    count: int, *, tokens: int, vocab_size: int, seed: int, lengths: tuple[int, int] = (10, 40)
) -> list[Batch]:
    """``count`` batches of random sentence pairs, each with about ``tokens`` real target
    tokens (words + EOS), lengths uniform in ``lengths``, padded with PAD_ID."""
    gen = torch.Generator().manual_seed(seed)
    low, high = lengths

    def sentence() -> list[int]:
        length = int(torch.randint(low, high + 1, (), generator=gen))
        return torch.randint(SPECIAL_IDS, vocab_size, (length,), generator=gen).tolist()

    batches = []
    for _ in range(count):
        sources, targets, total = [], [], 0
        while total < tokens:
            words = sentence()
            sources.append(sentence())
            targets.append([BOS_ID, *words, EOS_ID])
            total += len(words) + 1
        batches.append(collate(sources, targets, range(len(sources))))
    return batches


def check_same_function(ours: Transformer, theirs: TorchTransformer, batch: Batch) -> float:
    """Largest logit difference between the two models (dropout off) at real target positions;
    raises if they disagree, since then the speed comparison would not be like for like."""
    ours.eval(), theirs.eval()
    with torch.no_grad():
        a = ours(batch.source, batch.target_input).logits
        b = theirs(batch.source, batch.target_input)
    ours.train(), theirs.train()
    real = batch.target_input != PAD_ID
    difference = (a - b)[real].abs().max().item()
    if difference > 1e-3:
        raise AssertionError(f"qkv and torch models disagree: max |logit difference| {difference}")
    return difference


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--family", choices=("transformer", "rnn"), default="transformer")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    parser.add_argument("--size", choices=("small", "base"), default="small")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch")
    parser.add_argument("--vocab", type=int, default=8000, help="vocabulary size (both sides)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("steps", "tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.vocab <= SPECIAL_IDS:
        parser.error(f"--vocab must exceed the {SPECIAL_IDS} special ids")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.family == "rnn":
        from benchmarks.recurrent_training import run

        run(args)
        return

    factory = TransformerConfig.small if args.size == "small" else TransformerConfig.base
    config = factory(args.vocab)
    ours, theirs = build_models(config, args.seed)
    batches = make_batches(
        min(args.steps + args.warmup, 8), tokens=args.tokens, vocab_size=args.vocab, seed=args.seed
    )
    difference = check_same_function(ours, theirs, batches[0])
    options = TrainConfig()
    steps = {
        "qkv Transformer": make_step(
            ours,
            lambda b: ours(b.source, b.target_input).logits,
            make_optimizer(ours, options),
        ),
        "torch nn.Transformer": make_step(
            theirs,
            lambda b: theirs(b.source, b.target_input),
            make_optimizer(theirs, options),
        ),
    }

    print(f"machine: {machine()}")
    parameters = sum(p.numel() for p in ours.parameters())
    print(
        f"model: {args.size} (d_model {config.d_model}, {config.num_heads} heads, "
        f"{config.num_encoder_layers}+{config.num_decoder_layers} layers, d_ff {config.d_ff}, "
        f"dropout {config.dropout}, norm_first {config.norm_first}), vocab {args.vocab}, "
        f"{parameters / 1e6:.1f}M parameters; same logits checked (max diff {difference:.1e})"
    )
    real = [b.num_target_tokens for b in batches]
    padded = [b.target_output.numel() for b in batches]
    print(
        f"batches: ~{statistics.mean(real):.0f} real target tokens "
        f"({100 * (1 - sum(real) / sum(padded)):.0f}% padding), "
        f"~{statistics.mean(b.source.shape[0] for b in batches):.0f} sentences; "
        f"{args.steps} timed steps per model after {args.warmup} warm-up, alternating\n",
        flush=True,
    )

    times = measure(steps, batches, rounds=args.steps, warmup=args.warmup)
    tokens = sum(real[(args.warmup + i) % len(batches)] for i in range(args.steps))
    rate = {name: tokens / sum(seconds) for name, seconds in times.items()}
    torch_rate = rate["torch nn.Transformer"]
    rows = [
        [
            name,
            statistics.median(seconds) * 1e3,
            min(seconds) * 1e3,
            rate[name],
            rate[name] / torch_rate,
        ]
        for name, seconds in times.items()
    ]
    headers = ["model", "median ms/step", "best ms/step", "target tokens/s", "vs torch"]
    print(table(headers, rows))
    print(f"\nqkv / torch throughput: {rate['qkv Transformer'] / torch_rate:.2f}x (target >= 1.0x)")


if __name__ == "__main__":
    main()
