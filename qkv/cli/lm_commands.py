"""Subcommands for language models: `qkv train lm`, `qkv generate` and `qkv export`."""

from __future__ import annotations

import argparse
import json
import sys

from ..tasks.lm import LMSetup
from ..tasks.lm_start import FINETUNE_CONTEXT, START_FIELDS
from ..tasks.presets import LM_FINETUNE, PRESETS, sizes_of
from .commands import add_command, add_device_option, report_run, train_task_from_args
from .options import add_task_options, call_with_options

#: LMSetup field -> help of its option.
SETUP_HELP = {
    "data": "kjv or a UTF-8 text file",
    "init_from": "fine-tune: a Hugging Face gpt2, llama, qwen2 or mistral folder (config.json, "
    "model.safetensors, tokenizer.json), or a run of `qkv train lm`. Its model and its "
    "tokenizer are used; the options that build a model ("
    + ", ".join("--" + name.replace("_", "-") for name in START_FIELDS)
    + ") are refused unless left at their defaults or equal to its own",
    "arch": "the architecture: gpt (LayerNorm, GELU, learned positions, tied output), llama "
    "(RMSNorm, SwiGLU, RoPE, untied) or nanochat (parameter-free RMSNorm, ReLU^2, RoPE, "
    "QK-norm, soft-capped logits)",
    "size": "; ".join(f"{size}: {PRESETS[('lm', size)].summary}" for size in sizes_of("lm")),
    "context": "tokens per training window (default: the size's; with --init-from, the "
    f"model's positions, at most {FINETUNE_CONTEXT})",
    "positions": "learned, sinusoidal, rope or alibi (the last three extend past --context; "
    "default: the architecture's, gpt learned, llama and nanochat rope)",
    "tokenizer": "char or byte-level BPE",
    "vocab_size": "byte-level BPE vocabulary",
    "num_kv_heads": "grouped key/value heads (default: all)",
    "window": "attend to the last W positions only (sliding window on the flex kernel)",
    "window_pattern": "which layers use --window: S (window) and L (full attention) tiled over "
    "the layers, the last always full, e.g. SSSL (default: every layer)",
    "pack": "pack documents end to end into each window, attention and positions kept inside "
    "each document (kjv: a verse is a document; a text file: paragraphs separated by a blank "
    "line); with --init-from each opens with the folder's BOS token",
    "dropout": "dropout, overriding the size's default (with --init-from: the model's; a "
    "folder's loads with 0)",
    "batch_size": "windows per batch; sets --max-tokens unless that is given",
}


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train lm` (to ``tasks``, the subcommands of `qkv train`) and `qkv generate`."""
    lm = add_command(
        tasks,
        "lm",
        help="train a decoder-only language model (GPT, Llama, nanochat) on text",
        description="Train a decoder-only Transformer language model on the built-in King James "
        "Bible (kjv, ~4.5 MB of English) or any UTF-8 text file (its last 5% of lines are the "
        "validation text). Checkpoints, the tokenizer and log.jsonl (with validation loss and "
        "perplexity) go to --out; --resume continues exactly; `qkv curves` plots the run. "
        "With --init-from a pretrained model (a Hugging Face GPT-2 or Llama-family folder, or "
        "another run) is fine-tuned on the text, encoded with its own tokenizer; `qkv "
        "generate --checkpoint` samples from the result.",
        examples="qkv train lm --data kjv --out runs/lm --size small --max-minutes 10 --threads 1"
        "\nqkv train lm --data my.txt --out runs/mine --tokenizer bytebpe --positions rope"
        "\nqkv train lm --arch llama --window 32 --window-pattern SSSL --out runs/llama"
        "\nqkv train lm --init-from models/gpt2 --data my.txt --out runs/gpt2-mine --max-steps 500"
        "\nqkv train lm --init-from runs/lm --data my.txt --out runs/lm-mine --lr 3e-4",
    )
    lm.add_argument("--out", required=True, help="run folder (checkpoints, tokenizer, log.jsonl)")
    presets = {size: PRESETS[("lm", size)] for size in sizes_of("lm")}
    presets["--init-from"] = LM_FINETUNE
    notes = {"max_tokens": "--batch-size windows of the context"}
    add_task_options(lm, LMSetup, {None: SETUP_HELP}, presets, notes=notes)
    lm.set_defaults(run=_train_lm)

    generate = add_command(
        commands,
        "generate",
        help="generate text with a trained language model (streams as it samples)",
        description="Continue a prompt with a language model trained by `qkv train lm`, printing "
        "tokens as they are sampled. The prompt comes from --prompt or stdin.",
        examples='qkv generate --checkpoint runs/lm --prompt "And God said" --max-new-tokens 200 '
        '--seed 1\necho "In the beginning" | qkv generate --checkpoint runs/lm --top-k 20'
        '\nqkv generate --pretrained models/qwen2 "The capital of France is" --temperature 0',
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
        "--no-cache",
        dest="use_cache",
        action="store_false",
        help="recompute every position at each step",
    )
    add_device_option(generate)
    generate.set_defaults(run=_generate)

    export = add_command(
        commands,
        "export",
        help="write a trained language model as a Hugging Face folder (transformers loads it)",
        description="Write a run of `qkv train lm` as a folder that transformers' "
        "AutoModelForCausalLM.from_pretrained loads with the same logits: the gpt architecture "
        "as GPT-2, llama as Llama (Mistral with a window on every layer, Qwen2 with windows on "
        "some), nanochat as NanoChat. config.json and model.safetensors are written, and "
        "tokenizer.json for a byte-level BPE run. A component no transformers architecture has "
        "(packed-document attention, a window in GPT-2's layout, ...) is refused by name.",
        examples="qkv export --checkpoint runs/lm --to hf --out exported/lm",
    )
    export.add_argument("--checkpoint", required=True, help="a run folder or a step folder")
    export.add_argument("--to", choices=("hf",), default="hf", help="the format: hf (default)")
    export.add_argument("--out", required=True, help="a new (or empty) folder to write")
    export.set_defaults(run=_export)


def _train_lm(args: argparse.Namespace) -> int:
    from ..tasks.lm import LM

    result = train_task_from_args(LM, LMSetup, args)
    # the last validation scored the whole text as well (``*_full``): report that one
    full = {k.removesuffix("_full"): v for k, v in result.valid.items() if k.endswith("_full")}
    valid = full or result.valid
    summary = ""
    if "valid_loss" in valid:
        summary = f", valid loss {valid['valid_loss']:.4f} (perplexity {valid['valid_ppl']:.2f})"
    return report_run(result, args.out, summary)


def _generate(args: argparse.Namespace) -> int:
    from ..tasks.lm import generate_text
    from ..tasks.pretrained_lm import load_generator

    prompt = args.prompt if args.prompt is not None else args.text
    prompt = prompt if prompt is not None else sys.stdin.read().rstrip("\n")
    lm = call_with_options(load_generator, args)
    stream = args.num_samples == 1

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    texts = call_with_options(generate_text, args, lm, prompt, stream=show if stream else None)
    if stream:
        show("\n")
        return 0
    for index, text in enumerate(texts):
        print(f"--- sample {index + 1}")
        print(prompt + text)
    return 0


def _export(args: argparse.Namespace) -> int:
    from ..pretrained.export import export_hf
    from ..tasks.lm import load_lm

    loaded = load_lm(args.checkpoint)
    folder = export_hf(loaded.model, args.out, tokenizer=loaded.tokenizer)
    family = json.loads((folder / "config.json").read_text(encoding="utf-8"))["model_type"]
    print(f"wrote {folder} ({family}): transformers.AutoModelForCausalLM.from_pretrained loads it")
    if not (folder / "tokenizer.json").is_file():
        print(
            f"the run's {loaded.tokenizer.kind} tokenizer has no tokenizer.json form: encode "
            "text with qkv's tokenizer (qkv.tasks.lm.load_lm) and pass the ids to the model"
        )
    return 0
