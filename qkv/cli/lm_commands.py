"""Subcommands for language models: `qkv train lm` and `qkv generate`."""

from __future__ import annotations

import argparse
import sys

from .options import add_train_options, train_config_from

EXAMPLE = "\n\nexample:\n  "
#: Training defaults that suit a small language model (the shared ones suit translation).
LM_TRAIN_DEFAULTS = dict(
    lr=2e-3,
    warmup_steps=100,
    label_smoothing=0.0,
    validate_every=250,
    eval_batches=10,  # a fixed sample (nanoGPT: eval_iters); ~1.5% of a run at 250 steps
    log_every=50,
    max_tokens=None,
)


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train lm` (to ``tasks``, the subcommands of `qkv train`) and `qkv generate`."""
    raw = argparse.RawDescriptionHelpFormatter
    lm = tasks.add_parser(
        "lm",
        help="train a decoder-only language model (GPT) on text",
        description="Train a decoder-only Transformer language model on the built-in King James "
        "Bible (kjv, ~4.5 MB of English) or any UTF-8 text file (its last 5% of lines are the "
        "validation text). Language-model training defaults: --lr 0.002, --warmup-steps 100, "
        "--label-smoothing 0, --validate-every 250, --eval-batches 10, --log-every 50. Checkpoints, the tokenizer and log.jsonl (with validation loss and "
        "perplexity) go to --out; --resume continues exactly; `qkv curves` plots the run."
        + EXAMPLE
        + "qkv train lm --data kjv --out runs/lm --size small --max-minutes 10 --threads 1"
        + "\n  qkv train lm --data my.txt --out runs/mine --tokenizer bytebpe --positions rope",
        formatter_class=raw,
    )
    lm.add_argument("--data", default="kjv", help="kjv (default) or a UTF-8 text file")
    lm.add_argument("--out", required=True, help="run folder (checkpoints, tokenizer, log.jsonl)")
    lm.add_argument(
        "--size",
        default="small",
        choices=["small", "medium"],
        help="small: 4 layers x 128 wide, context 128 (default); medium: 6 x 384, context 256",
    )
    lm.add_argument("--context", type=int, help="tokens per training window (default: the size's)")
    lm.add_argument(
        "--positions",
        default="learned",
        help="learned (default), sinusoidal, rope or alibi (the last three extend past --context)",
    )
    lm.add_argument(
        "--tokenizer",
        default="char",
        choices=["char", "bytebpe"],
        help="char (default) or byte-level BPE",
    )
    lm.add_argument(
        "--vocab-size", type=int, default=4096, help="byte-level BPE vocabulary (default: 4096)"
    )
    lm.add_argument("--num-kv-heads", type=int, help="grouped key/value heads (default: all)")
    lm.add_argument("--window", type=int, help="attend to the last W positions only (flex kernel)")
    lm.add_argument("--dropout", type=float, help="dropout, overriding the size's default")
    lm.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="windows per batch (default: 16); sets --max-tokens unless that is given",
    )
    add_train_options(lm)
    lm.set_defaults(run=_train_lm, **LM_TRAIN_DEFAULTS)

    generate = commands.add_parser(
        "generate",
        help="generate text with a trained language model (streams as it samples)",
        description="Continue a prompt with a language model trained by `qkv train lm`, printing "
        "tokens as they are sampled. The prompt comes from --prompt or stdin."
        + EXAMPLE
        + 'qkv generate --checkpoint runs/lm --prompt "And God said" --max-new-tokens 200 --seed 1'
        + '\n  echo "In the beginning" | qkv generate --checkpoint runs/lm --top-k 20'
        + '\n  qkv generate --pretrained models/qwen2 "The capital of France is" --temperature 0',
        formatter_class=raw,
    )
    generate.add_argument("--checkpoint", help="a run folder or a step folder")
    generate.add_argument("--pretrained", help="a Hugging Face gpt2/llama/qwen2/mistral folder")
    generate.add_argument("--prompt", help="text to continue (default: read stdin)")
    generate.add_argument("text", nargs="?", help="the prompt, as --prompt")
    generate.add_argument("--max-new-tokens", type=int, default=200, help="default: 200")
    generate.add_argument("--temperature", type=float, default=1.0, help="default: 1.0; 0 = greedy")
    generate.add_argument("--top-k", type=int, help="sample among the k most probable tokens")
    generate.add_argument("--top-p", type=float, help="nucleus sampling: smallest set with mass p")
    generate.add_argument("--seed", type=int, help="seed: the same seed gives the same text")
    generate.add_argument("--num-samples", type=int, default=1, help="default: 1")
    generate.add_argument(
        "--no-cache", action="store_true", help="recompute every position at each step"
    )
    generate.add_argument("--device", default="cpu", help="cpu or cuda")
    generate.set_defaults(run=_generate)


def _train_lm(args: argparse.Namespace) -> int:
    from ..tasks.lm import LMSetup, train_lm

    setup = LMSetup(
        data=args.data,
        size=args.size,
        context=args.context,
        positions=args.positions,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        num_kv_heads=args.num_kv_heads,
        dropout=args.dropout,
        window=args.window,
    )
    if args.max_tokens is None:
        args.max_tokens = args.batch_size * (setup.context_length + 1)
    result = train_lm(setup, train_config_from(args), args.out, resume=args.resume)
    full = {k.removesuffix("_full"): v for k, v in result.valid.items() if k.endswith("_full")}
    valid = full or result.valid
    summary = (
        f", valid loss {valid['valid_loss']:.4f} (perplexity {valid['valid_ppl']:.2f})"
        if "valid_loss" in valid
        else ""
    )
    print(
        f"done: {result.steps} steps, {result.epochs} epochs, {result.elapsed:.0f} s, "
        f"stopped by {result.stop_reason}{summary}"
    )
    print(f"checkpoint: {args.out}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from ..tasks.lm import generate_text
    from ..tasks.pretrained_lm import load_generator

    prompt = args.prompt if args.prompt is not None else args.text
    prompt = prompt if prompt is not None else sys.stdin.read().rstrip("\n")
    lm = load_generator(checkpoint=args.checkpoint, pretrained=args.pretrained, device=args.device)
    stream = args.num_samples == 1

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    texts = generate_text(
        lm,
        prompt,
        max_new_tokens=args.max_new_tokens,
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        use_cache=not args.no_cache,
        stream=show if stream else None,
    )
    if stream:
        show("\n")
        return 0
    for index, text in enumerate(texts):
        print(f"--- sample {index + 1}")
        print(prompt + text)
    return 0
