"""`qkv explore`: one self-contained HTML page with every attention of a model on some
inputs (sentences for a translator, pictures for a captioner, prompts for a language model),
written and/or served.  Its model options are `qkv attention`'s too
(``attention_commands``)."""

from __future__ import annotations

import argparse
import sys

from ..explore.live import LIVE_MAX_MB
from .commands import add_device_option
from .options import call_with_options

EXAMPLE = (
    "\n\nexamples:\n"
    '  qkv explore --checkpoint qkv-demo "Tuesday, March 3, 1998" "3/4/01" --out explore.html\n'
    "  qkv explore --checkpoint qkv-demo-captioning scene1.png scene2.png --out explore.html\n"
    "  cat sentences.txt | qkv explore --checkpoint runs/de-en --serve --port 8765\n"
    "  qkv explore --checkpoint runs/clips --test 8 --out clips.html\n"
    "  qkv explore --checkpoint runs/fashion sneaker.png --out fashion.html\n"
    '  qkv explore --checkpoint runs/lm "And God said" --generate 20 --seed 1 --out lm.html\n'
    '  qkv explore --checkpoint qkv-demo "3/4/01" --live --out live.html   # type your own dates\n'
    '  qkv explore --pretrained ~/models/bart-base "The cat sat." --target "Le chat." --out b.html\n'
    "  qkv explore --pretrained ~/models/vit-base-patch16-224 cat.jpg --out vit.html\n"
    '  qkv explore --pretrained ~/models/clip-vit-base-patch32 cat.jpg dog.jpg "a photo of a cat" '
    '"a photo of a dog" --out clip.html   # every image against every text'
)


def register(commands: argparse._SubParsersAction) -> None:
    explore = commands.add_parser(
        "explore",
        help="write an interactive attention explorer (one offline HTML page)",
        description="Decode each input and write one HTML page that shows the model's "
        "attention: every layer and head of a Transformer (encoder, decoder, cross; mean over "
        "heads; encoder rollout), an RNN's alignment for the greedy and every beam "
        "hypothesis, a captioner's attention over the picture word by word, a classifier's "
        "attention (feature-map attention over a picture, pooling weights over a clip's "
        "frames, a frame tagger's heads over the frames), a language model's causal "
        "self-attention (every layer and head, mean, rollout, previous-token, first-token and "
        "induction scores per head), a pretrained folder's attention (any text or vision model "
        "transformers loads, computed through qkv's attention). The page holds "
        "its data, script and styles; it opens from disk and makes no network request. "
        "docs/explorer.md is its manual." + EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(explore)
    explore.add_argument(
        "inputs",
        nargs="*",
        help="sentences (translators), prompts (language models) or image files "
        "(captioners, image classifiers, vision folders); a dual-encoder folder (CLIP, "
        "SigLIP) takes texts and image files together, at least one of each: the page has an "
        "entry per input with its tower's self-attention, and compares every image with every "
        "text (each image's softmax over the texts); default: one per line on stdin",
    )
    explore.add_argument(
        "--test",
        type=int,
        metavar="N",
        help="classifiers: the first N items of the test split of the data the classifier "
        "was trained on, with their true labels (clip classifiers and frame taggers take "
        "clips this way only)",
    )
    explore.add_argument("--out", help="the HTML file to write (e.g. explore.html)")
    explore.add_argument(
        "--beam",
        type=int,
        default=4,
        help="beam size (default: 4); an RNN or captioner page shows greedy and every beam "
        "hypothesis, a Transformer page the best one; 1: greedy only",
    )
    explore.add_argument(
        "--length-penalty", type=float, default=1.0, help="GNMT length penalty alpha (beam)"
    )
    explore.add_argument("--max-len", type=int, help="the most tokens to generate per input")
    explore.add_argument(
        "--target",
        dest="targets",
        action="append",
        metavar="TEXT",
        help="encoder-decoder folders (--pretrained, via transformers): the text the decoder "
        "reads instead of its greedy output; once per input, in order",
    )
    add_sampling_options(explore)
    explore.add_argument(
        "--live",
        action="store_true",
        help="Transformer and RNN translators, language models: embed the weights and a "
        "forward pass in the page, so typed inputs are recomputed in the browser, offline "
        "(window.qkvLive.run; docs/explorer.md)",
    )
    explore.add_argument(
        "--live-max-mb",
        type=float,
        default=LIVE_MAX_MB,
        metavar="MB",
        help=f"with --live: the most megabytes of float32 weights to embed (default: "
        f"{LIVE_MAX_MB:g}); a larger model gets a static page and one line saying so",
    )
    add_device_option(explore)
    explore.add_argument(
        "--serve",
        action="store_true",
        help="also serve the page on 127.0.0.1 and print its URL (Ctrl-C stops)",
    )
    explore.add_argument(
        "--port", type=int, default=0, help="port for --serve (default: 0, any free port)"
    )
    explore.set_defaults(run=_explore)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model to look at: a qkv run, or a pretrained Hugging Face folder."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a run folder or a step folder")
    source.add_argument(
        "--pretrained",
        metavar="DIR",
        help="a Hugging Face folder (config.json, weights, tokenizer or image processor): "
        "BERT, GPT-2, Llama, Qwen2 and Mistral are read by qkv's own re-implementations; "
        "any other text or vision model whose attention goes through transformers' "
        "attention interface (RoBERTa, ModernBERT, Gemma, BART, T5, ViT, ...) is loaded by "
        "transformers with attn_implementation='qkv' (needs pip install -e '.[hf]'); a "
        "vision model takes image files as its inputs, a dual encoder (a whole CLIP or "
        "SigLIP) texts and image files together",
    )
    parser.add_argument(
        "--via",
        choices=("qkv", "transformers"),
        help="with --pretrained: read the folder with qkv's re-implementation or with "
        "transformers' model through qkv's attention (default: qkv's where it has one)",
    )


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """Language models: the tokens to sample after the prompt, as `qkv generate` samples."""
    parser.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="language models: also show N tokens sampled after each prompt (default: 0)",
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="with --generate: 0 = greedy (default 1)"
    )
    parser.add_argument("--top-k", type=int, help="with --generate: sample among the k likeliest")
    parser.add_argument("--seed", type=int, help="with --generate: the same seed, the same text")
    parser.add_argument(
        "--vectors",
        metavar="all|L,...",
        help="language models, pretrained folders and Transformer translators: store q, k, v "
        "of these layers for the page's neuron view (default: none; 'all' grows the page by "
        "3 x T x d per layer and attention)",
    )


def _explore(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..explore import check_page_path, explorer_of_type
    from ..families import ViewRequest, family_of_checkpoint

    if not args.out and not args.serve:
        raise InputError("say where the page goes: --out explore.html, or --serve, or both")
    if args.out:
        check_page_path(args.out)
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port} must be between 0 (any free port) and 65535")
    if not args.live_max_mb > 0:
        raise InputError(f"--live-max-mb {args.live_max_mb:g} must be a positive number of MB")
    if args.via is not None and not args.pretrained:
        raise InputError(f"--via {args.via} says how to read a --pretrained folder")
    if args.pretrained:
        data, model, tokenizer = _pretrained_data(args)
        for page in data["inputs"]:
            print(f"{page['name']} -> {len(page['source_tokens'])} tokens")
        _make_live(args, data, model, tokenizer)
        return _write_page(args, data)
    model_type, family = family_of_checkpoint(args.checkpoint)
    adapter = explorer_of_type(model_type)
    if args.live and adapter.live is None:
        raise InputError(
            "--live is for Transformer and RNN translators and language models; this "
            f"checkpoint is a {model_type!r} model: write a static page"
        )
    if args.generate and not adapter.generates:
        raise InputError("--generate N is for language models; this checkpoint decodes")
    if args.vectors is not None and not adapter.vectors:
        raise InputError(
            "--vectors (the neuron view) is for language models, pretrained folders and "
            "Transformer translators"
        )
    inputs = args.inputs
    if not adapter.takes_labels:  # a classifier reads pictures or test items (--test N)
        if args.test is not None:
            raise InputError("--test N is for classifiers; pass sentences or image files")
        inputs = inputs or [line.strip() for line in sys.stdin if line.strip()]
        if not inputs:
            raise InputError("no inputs: pass sentences or image files as arguments or on stdin")
    if family is None:
        raise InputError(f"no model family registered owns {model_type!r} checkpoints")
    request = call_with_options(ViewRequest, args, device=str(args.device))
    opened = family.view(args.checkpoint, inputs, request)
    data = opened.data
    if opened.loaded is not None:
        _make_live(args, data, opened.loaded.model, opened.loaded.tokenizer)
    for page in data["inputs"]:
        truth = page.get("truth_tokens")
        print(
            f"{page['name']} -> {page['output']}" + (f" (true: {' '.join(truth)})" if truth else "")
        )
    return _write_page(args, data)


def _make_live(args: argparse.Namespace, data: dict, model, tokenizer) -> None:
    """With --live, the weights and forward pass into the page, or one line saying why not."""
    from ..explore import add_live

    if args.live:
        why_not = add_live(data, model, tokenizer, max_mb=args.live_max_mb)
        print(why_not or f"live page: {data['live']['mb']:.1f} MB of weights embedded")


def _write_page(args: argparse.Namespace, data: dict) -> int:
    from ..explore import render_html, serve, write_html

    if args.out:
        print(f"explorer: {write_html(data, args.out)}")
    if args.serve:
        serve(render_html(data), port=args.port)
    return 0


def _pretrained_data(args: argparse.Namespace) -> tuple[dict, object, object]:
    from ..errors import InputError
    from ..explore import explore, load_folder

    inputs = args.inputs or [line.strip() for line in sys.stdin if line.strip()]
    if not inputs:
        raise InputError("no inputs: pass texts as arguments or on stdin")
    if args.test is not None:
        raise InputError("--test N is for classifiers; pass texts")
    loaded = load_folder(args.pretrained, device=args.device, via=args.via)
    data = call_with_options(
        explore,
        args,
        loaded.model,
        inputs,
        tokenizer=loaded.tokenizer,
        eos_ids=loaded.eos_ids,
        architecture=loaded.name,
    )
    return data, loaded.model, loaded.tokenizer
