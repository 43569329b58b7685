"""Subcommands for language models: `qkv generate` and `qkv export`."""

from __future__ import annotations

import argparse
import json
import sys

from .commands import add_command, add_device_option
from .options import call_with_options


def register(commands: argparse._SubParsersAction) -> None:
    """Add `qkv generate` and `qkv export` (`qkv train lm` is the family's:
    ``train_commands``)."""
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


def _generate(args: argparse.Namespace) -> int:
    from ..tasks.lm import generate_text

    prompt = args.prompt if args.prompt is not None else args.text
    prompt = prompt if prompt is not None else sys.stdin.read().rstrip("\n")
    lm = _generator(args)
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


def _generator(args: argparse.Namespace):
    """The model to sample from: --checkpoint through its family's loader (a family whose
    models do not generate text says which commands read them), or a --pretrained folder."""
    from ..errors import CheckpointError
    from ..families import family_of_checkpoint
    from ..tasks.pretrained_lm import load_generator
    from ..tasks.translator import reading_errors

    if args.checkpoint is None or args.pretrained is not None:
        # a folder; or neither, or both: load_generator says to give exactly one
        return call_with_options(load_generator, args)
    with reading_errors(CheckpointError):
        model_type, family = family_of_checkpoint(args.checkpoint)
    if family is None or not family.explorers[model_type].generates:
        use = family.commands.get(model_type) if family is not None else None
        use = use or "the command for that model's task"
        raise CheckpointError(
            f"{args.checkpoint} holds a {model_type!r} model, which does not generate text; "
            f"use {use}"
        )
    return family.loader(args.checkpoint, device=str(args.device))


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
