"""`qkv attention`: one attention as a heatmap (PNG) and/or every layer's and head's
weights as arrays (.npz)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .explore_commands import add_model_options
from .options import call_with_options


def register(commands: argparse._SubParsersAction) -> None:
    attention = commands.add_parser(
        "attention",
        help="plot one attention as a heatmap (PNG), or write every layer's and head's "
        "weights (.npz)",
        description="Translate one sentence and plot which source tokens each generated "
        "token attended to; for a language model, plot the causal self-attention of the text. "
        "--weights-out writes every layer's and head's weights, one array per attention "
        "named by its view (e.g. decoder.layer0, cross.layer1, self.layer2: (H, Tq, Tk)), "
        "with the tokens as `tokens` (and `source_tokens` for a translator). A pretrained "
        "folder read via transformers writes each of its attentions (encoder, decoder, "
        "cross for an encoder-decoder; a vision model's patches, given an image file; a dual "
        "encoder such as CLIP: the text tower's, given a text, or the vision tower's, given an "
        "image file)."
        "\n\nexample:\n"
        '  qkv attention --checkpoint qkv-demo "Tuesday, March 3, 1998" --out alignment.png '
        "--layer 1 --head 0\n"
        '  qkv attention --checkpoint runs/lm "And God said" --layer 1 --head 2 --out lm.png\n'
        '  qkv attention --checkpoint runs/lm "And God said" --weights-out lm.npz',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(attention)
    attention.add_argument(
        "sentence",
        help="the source sentence (a language model: the text; a vision folder: an image "
        "file; a dual encoder: a text or an image file)",
    )
    attention.add_argument(
        "--target",
        metavar="TEXT",
        help="encoder-decoder folders: the text the decoder reads (default: its greedy output)",
    )
    attention.add_argument("--out", help="PNG file to write")
    attention.add_argument(
        "--weights-out", metavar="FILE.npz", help="write every layer's and head's weights"
    )
    attention.add_argument(
        "--layer", type=int, help="decoder layer (a language model: block; default: the last)"
    )
    attention.add_argument("--head", type=int, help="head (default: the mean over heads)")
    attention.add_argument(
        "--all-heads", action="store_true", help="one panel per head of the layer"
    )
    attention.add_argument(
        "--beam", type=int, default=1, help="beam size for the translation (default: 1)"
    )
    attention.set_defaults(run=_attention)


def _attention(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..families import family_of_checkpoint

    if not args.out and not args.weights_out:
        raise InputError("say what to write: --out heatmap.png, --weights-out weights.npz, or both")
    if args.out and not args.out.lower().endswith(".png"):
        raise InputError(f"--out {args.out!r} must be a .png file")
    if args.weights_out and not args.weights_out.lower().endswith(".npz"):
        raise InputError(f"--weights-out {args.weights_out!r} must be a .npz file")
    for path in (args.out, args.weights_out):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"the folder of {path!r} does not exist; create it first")
    if args.via is not None and not args.pretrained:
        raise InputError(f"--via {args.via} says how to read a --pretrained folder")
    if args.pretrained:
        from ..explore import load_folder

        loaded = load_folder(args.pretrained, via=args.via)
        return _text_attention(args, loaded.model, loaded.tokenizer)
    if args.target is not None:
        raise InputError("--target is for encoder-decoder folders (--pretrained)")
    _, family = family_of_checkpoint(args.checkpoint)
    if family is not None and family.reads_text:  # a model that reads one text
        loaded = family.loader(args.checkpoint)
        return _text_attention(args, loaded.model, loaded.tokenizer)
    return _translation_attention(args)  # a translator (another model: its error and fix)


def _text_attention(args: argparse.Namespace, model, tokenizer) -> int:
    """A model that reads one input: a language model, an encoder, a pretrained folder."""
    from ..explore import input_attention, plot_attention, write_weights

    found = input_attention(model, tokenizer, args.sentence, target=args.target)
    if args.weights_out:
        path = write_weights(args.weights_out, found["attention"], **found["tokens"])
        print(f"weights: {path}")
    if args.out:
        view, queries, keys = found["plot"]
        layers = found["attention"][view]
        name = f"{view} self-attention" if queries is keys else f"{view}-attention"
        path = call_with_options(plot_attention, args, layers, queries, keys, args.out, name=name)
        print(f"heatmap: {path}")
    return 0


def _translation_attention(args: argparse.Namespace) -> int:
    import torch

    from ..data import BOS_ID
    from ..explore import teacher_forced_attention, write_weights
    from ..tasks import Translator, plot_translation_attention

    translator = Translator.from_checkpoint(args.checkpoint)
    (translation,) = translator.translate([args.sentence], beam=args.beam)
    print(f"{translation.source} -> {translation.text}")
    if args.weights_out:
        source = torch.tensor(translator.encode_sources([translation.source]))
        target_input = torch.tensor([[BOS_ID, *translation.ids]])
        attention = teacher_forced_attention(translator.model, source, target_input)
        path = write_weights(
            args.weights_out,
            attention,
            tokens=["<s>", *translation.tokens],
            source_tokens=translation.source_tokens,
        )
        print(f"weights: {path}")
    if args.out:
        path = call_with_options(
            plot_translation_attention, args, translator, translation, args.out
        )
        print(f"heatmap: {path}")
    return 0
