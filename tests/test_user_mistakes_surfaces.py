"""A table of user mistakes on the surfaces added after the first commands: pretrained
folders, generation, context-parallel shards, device names and attention patterns.

Each is what a user who has just downloaded a folder, trained for an hour or typed a flag
from memory might try.  Through the command (run in-process by ``qkv.cli.main.main``) each
must end in one short line, exit 2, no traceback, nothing printed that looks like a result
(a NaN never becomes text or a number), and every file the user had left as it was.  Through
the library each is a :class:`~qkv.errors.QkvError` of one line, which the command would
show the same way.  The folder cases go through the pretrained loaders' one check
(:func:`qkv.pretrained.files.load_checked` and :func:`~qkv.pretrained.files.check_tokenizer`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from qkv.cli.main import exit_code_for, main
from qkv.errors import InputError, NotFiniteError, QkvError
from qkv.models.base import StepOutput
from qkv.training.devices import machine_devices, parse_device
from tests.ring_worker import MISTAKES, mistake_worker


@dataclass(frozen=True)
class Mistake:
    """One row of the table.  ``attempt``: a command line (``{name}`` is a path of the
    fixtures: runs, folders, ``{out}`` a place nothing may be written) or a library call;
    ``words``: what its one line must say; ``gpus``: the CUDA GPUs the machine is made to
    have (None: as it is)."""

    name: str
    attempt: str | Callable[[dict], object]
    words: str
    gpus: int | None = None


def _table(cases: list[Mistake]) -> list:
    return [pytest.param(c, id=c.name) for c in cases]


def _snapshot(root: Path) -> dict:
    """Every file and folder under ``root``: its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _machine(monkeypatch, gpus: int | None) -> None:
    """Make torch see ``gpus`` CUDA GPUs and no MPS (the refusals come before any use)."""
    if gpus is None:
        return
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def _try(case: Mistake, paths: dict, root: Path, capsys, monkeypatch) -> str:
    """Run one case; return its one line after checking everything the table promises."""
    _machine(monkeypatch, case.gpus)
    if callable(case.attempt):
        with pytest.raises(QkvError) as raised:
            case.attempt(paths)
        line = str(raised.value)
        assert exit_code_for(raised.value) == 2 and "\n" not in line.strip(), line
        assert case.words in line, line
        return line
    values = {key: str(value) for key, value in paths.items()}
    argv = [part.format(out=root / "refused", **values) for part in case.attempt.split("|")]
    before = _snapshot(root)
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own refusals (a flag's type) exit here
        code = exit.code
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("qkv: error:"), err
    assert "Traceback" not in err and "bug in qkv" not in err
    assert captured.out == "", captured.out  # nothing that looks like a result
    assert _snapshot(root) == before  # no file touched, nothing written
    assert case.words.format(**values) in err, err
    return err


def _command(text: str) -> str:
    """A command line written with spaces, its arguments separated by | for _try (a prompt
    may hold spaces: write it with ~ for each)."""
    return "|".join(part.replace("~", " ") for part in text.split())


# -------------------------------------------------------------------- runs and folders


def _poison(weights_file: Path, *, every: bool = False, part: str = "") -> None:
    """Fill the float tensors of a safetensors file whose name holds ``part`` (or, with
    ``every``, all of them) with NaN."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(weights_file), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(str(weights_file))
    for name, tensor in tensors.items():
        if (every or part in name) and tensor.is_floating_point():  # not BatchNorm's count
            tensor.fill_(float("nan"))
    save_file(tensors, str(weights_file), metadata=metadata)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, Path]:
    """Tiny runs of `qkv train`, their copies whose weights became NaN, and a text."""
    root = tmp_path_factory.mktemp("runs")
    text = root / "text.txt"
    text.write_text("".join(f"line {i} of a small text.\n" for i in range(60)))
    quick = ["--max-steps", "1", "--threads", "1", "--device", "cpu"]
    lm = ["train", "lm", "--data", str(text), "--context", "16"]
    assert main([*lm, "--out", str(root / "lm"), *quick]) == 0
    window = ["--window", "4", "--positions", "learned"]
    assert main([*lm, *window, "--out", str(root / "win"), *quick]) == 0
    pairs = "".join(f"ab{c}\t{c}ba\n" for c in "cdefghijklmnop")
    for split in ("train", "valid", "test"):
        (root / f"{split}.tsv").write_text(pairs)
    data = ["--data", str(root / "{split}.tsv"), "--tokenizer", "char", "--max-tokens", "64"]
    assert main(["train", "translation", *data, "--out", str(root / "tr"), *quick]) == 0
    images = ["--image-size", "32", "--feature-dim", "8", "--train-size", "8", "--valid-size"]
    images += ["4", "--max-tokens", "64"]
    classifier = ["train", "classifier", "--data", "shapes", *images, "--out", str(root / "cls")]
    assert main([*classifier, *quick]) == 0
    captioner = ["train", "captioning", "--data", "shapes", *images, "--grid", "4"]
    captioner += ["--embedding-dim", "16", "--hidden-dim", "32", "--attention-dim", "16"]
    assert main([*captioner, "--min-count", "1", "--out", str(root / "cap"), *quick]) == 0
    from PIL import Image

    Image.new("RGB", (32, 32), "white").save(root / "scene.png")
    for name in ("lm", "tr", "cls", "cap"):
        shutil.copytree(root / name, root / f"{name}-nan")
        for weights in (root / f"{name}-nan").rglob("model.safetensors"):
            _poison(weights, every=True)
    names = ("lm", "win", "tr", "lm-nan", "tr-nan", "cls-nan", "cap-nan")
    paths = {name: root / name for name in names} | {"scene": root / "scene.png"}
    return paths | {"text": text, "root": root}, root


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "earth", "heaven", "and", "##s"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[dict, Path]:
    """Hugging Face folders as a user downloads them, each broken one way."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    from tests.test_lm_gpt2 import save_random_gpt2
    from tests.test_pretrained_llama import save_random, save_tokenizer

    root = tmp_path_factory.mktemp("folders")

    def gpt2(name: str) -> Path:
        folder = root / name
        folder.mkdir()
        save_random_gpt2(folder)
        save_tokenizer(folder)
        return folder

    def llama(name: str) -> Path:
        folder = root / name
        folder.mkdir()
        save_random(folder, "llama")
        save_tokenizer(folder)
        return folder

    def bert(name: str, words: int = 32) -> Path:
        folder = root / name
        folder.mkdir()
        config = transformers.BertConfig(
            vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=32,
        )  # fmt: skip
        torch.manual_seed(0)
        transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
        extra = [f"w{i}" for i in range(words - len(WORDS))]
        (folder / "vocab.txt").write_text("\n".join(WORDS + extra) + "\n")
        return folder

    def truncate(folder: Path) -> None:
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])

    def edit(folder: Path, **changes) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | changes))

    (gpt2("gpt2-no-config") / "config.json").unlink()
    truncate(gpt2("gpt2-truncated"))
    truncate(llama("llama-truncated"))
    truncate(bert("bert-truncated"))
    _poison(gpt2("gpt2-nan") / "model.safetensors", part="attn.c_attn.weight")
    _poison(llama("llama-nan") / "model.safetensors", part="q_proj")
    _poison(bert("bert-nan") / "model.safetensors", part="query")
    edit(gpt2("gpt2-shapes"), n_embd=64)
    edit(llama("llama-shapes"), intermediate_size=64)
    edit(bert("bert-shapes"), hidden_size=32)
    # a model of 100 tokens beside the tokenizer of 300
    small = gpt2("gpt2-small-vocab")
    edit(small, vocab_size=100)
    tensors = load_file(str(small / "model.safetensors"))
    tensors = {k: t[:100] if t.shape[0] == 300 else t for k, t in tensors.items()}
    save_file(tensors, str(small / "model.safetensors"), metadata={"format": "pt"})
    missing = bert("bert-missing-tensor")
    tensors = load_file(str(missing / "model.safetensors"))
    del tensors[next(name for name in tensors if name.endswith("attention.self.key.bias"))]
    save_file(tensors, str(missing / "model.safetensors"), metadata={"format": "pt"})
    bert("bert-big-tokenizer", words=70)  # vocab.txt of 70 words, 32 embeddings
    (gpt2("gpt2-bad-json") / "config.json").write_text("{not json")
    (gpt2("gpt2-no-tokenizer") / "tokenizer.json").unlink()
    (gpt2("gpt2-no-weights") / "model.safetensors").unlink()
    return {p.name: p for p in root.iterdir()} | {"root": root}, root


# -------------------------------------------------------------------- the table: folders

GEN = "generate --pretrained {{{0}}} the~earth --max-new-tokens 3"
EXPLORE = "explore --pretrained {{{0}}} the~earth --out {{out}}.html"

FOLDERS = [
    Mistake("no config: generate", _command(GEN.format("gpt2-no-config")), "no config.json"),
    Mistake("no config: explore", _command(EXPLORE.format("gpt2-no-config")), "no config.json"),
    Mistake("truncated gpt2", _command(GEN.format("gpt2-truncated")), "corrupt"),
    Mistake("truncated llama", _command(EXPLORE.format("llama-truncated")), "corrupt"),
    Mistake("truncated bert", _command(EXPLORE.format("bert-truncated")), "corrupt"),
    Mistake(
        "nan gpt2, greedy",
        _command(GEN.format("gpt2-nan") + " --temperature 0"),
        "the weights of {gpt2-nan} hold NaN or infinite values",
    ),
    Mistake(
        "nan gpt2: explore",
        _command(EXPLORE.format("gpt2-nan")),
        "the weights of {gpt2-nan} hold NaN",
    ),
    Mistake(
        "nan llama, sampled",
        _command(GEN.format("llama-nan") + " --seed 1"),
        "the weights of {llama-nan} hold NaN or infinite values",
    ),
    Mistake(
        "nan bert: attention",
        _command("attention --pretrained {bert-nan} the~earth --out {out}.png"),
        "the weights of {bert-nan} hold NaN or infinite values",
    ),
    Mistake(
        "gpt2 shapes unlike config: generate",
        _command(GEN.format("gpt2-shapes")),
        "config.json",
    ),
    Mistake(
        "gpt2 shapes unlike config: explore",
        _command(EXPLORE.format("gpt2-shapes")),
        "config.json",
    ),
    Mistake("llama shapes unlike config", _command(GEN.format("llama-shapes")), "config.json"),
    Mistake("bert shapes unlike config", _command(EXPLORE.format("bert-shapes")), "config.json"),
    Mistake(
        "tokenizer bigger than the vocabulary: generate",
        _command("generate --pretrained {gpt2-small-vocab} the~earth~heaven~waters"),
        "but its model has only 100",
    ),
    Mistake(
        "tokenizer bigger than the vocabulary: explore",
        _command("explore --pretrained {gpt2-small-vocab} the~earth~heaven --out {out}.html"),
        "but its model has only 100",
    ),
    Mistake(
        "bert tokenizer bigger than the vocabulary",
        _command("explore --pretrained {bert-big-tokenizer} w50~w60~the --out {out}.html"),
        "but its model has only",
    ),
    Mistake(
        "bert missing a tensor",
        _command(EXPLORE.format("bert-missing-tensor")),
        "key.bias",
    ),
    Mistake("config not JSON", _command(GEN.format("gpt2-bad-json")), "not valid JSON"),
    Mistake("no tokenizer", _command(GEN.format("gpt2-no-tokenizer")), "no tokenizer"),
    Mistake("no weights", _command(EXPLORE.format("gpt2-no-weights")), "has no weights"),
]


@pytest.mark.parametrize("case", _table(FOLDERS))
def test_a_broken_pretrained_folder_is_one_line(case, folders, capsys, monkeypatch):
    paths, root = folders
    _try(case, paths, root, capsys, monkeypatch)


# -------------------------------------------------------------------- generation


class Scripted:
    """A Decodable over 5 tokens whose scores are uniform, except that at step ``bad``
    row 0 becomes ``value`` (NaN, inf) -- or, with ``everywhere``, all of row 0 does."""

    config = None

    def __init__(self, bad: int, value: float, *, everywhere: bool = False):
        self.bad, self.value, self.everywhere = bad, value, everywhere

    def start(self, source):
        return torch.zeros(source.shape[0], dtype=torch.long)  # steps taken

    def step(self, tokens, state, *, need_attention=False):
        log_probs = torch.full((tokens.shape[0], 5), -torch.log(torch.tensor(5.0)))
        log_probs[:, 4] = float("-inf")  # a token the model rules out: not a mistake
        if int(state[0]) + 1 == self.bad:
            log_probs[0, slice(None) if self.everywhere else 1] = self.value
        return StepOutput(log_probs, state + 1, None)


def _tiny_lm():
    from qkv.models import DecoderLM, LMConfig

    config = LMConfig(
        20, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32, positions="rope"
    )
    torch.manual_seed(0)
    return DecoderLM(config).eval()


def _sample(model, prompt, **options):
    from qkv.decoding import sample

    return sample(model, torch.tensor(prompt), max_new_tokens=4, seed=0, **options)


def _search(kind: str, model):
    from qkv.decoding import beam_search, greedy_search

    source = torch.zeros(2, 3, dtype=torch.long)
    if kind == "greedy":
        return greedy_search(model, source, max_len=6, eos_id=3)
    return beam_search(model, source, beam_size=3, max_len=6, eos_id=3)


NAN_SCORES = "the model's scores for generated token 1 are NaN"
GENERATION = [
    Mistake(
        "nan run, sampled",
        _command("generate --checkpoint {lm-nan} --prompt line"),
        "{lm-nan}: " + NAN_SCORES,
    ),  # fmt: skip
    Mistake(
        "nan run, greedy",
        _command("generate --checkpoint {lm-nan} --prompt line --temperature 0"),
        "{lm-nan}: " + NAN_SCORES,
    ),
    Mistake(
        "nan run, no cache, top-k, two samples",
        _command("generate --checkpoint {lm-nan} --prompt a --no-cache --top-k 3 --num-samples 2"),
        "{lm-nan}: " + NAN_SCORES,
    ),
    Mistake(
        "nan translator", _command("translate --checkpoint {tr-nan} abc"), "{tr-nan}: " + NAN_SCORES
    ),  # fmt: skip
    Mistake(
        "nan translator, beam 3",
        _command("translate --checkpoint {tr-nan} --beam 3 abc"),
        "{tr-nan}: " + NAN_SCORES,
    ),
    Mistake(
        "nan translator: evaluate",
        _command("evaluate --checkpoint {tr-nan}"),
        "{tr-nan}: " + NAN_SCORES,
    ),  # fmt: skip
    Mistake(
        "nan run: evaluate its perplexity",
        _command("evaluate --checkpoint {lm-nan}"),
        "{lm-nan}: the model's loss on the text is nan",
    ),
    Mistake(
        "nan run: explore with generation",
        _command("explore --checkpoint {lm-nan} line --generate 3 --out {out}.html"),
        "{lm-nan}: " + NAN_SCORES,
    ),
    Mistake(
        "nan run: attention heatmap",
        _command("attention --checkpoint {lm-nan} line --out {out}.png"),
        "{lm-nan}: the model's attention weights on this text hold NaN",
    ),
    Mistake(
        "nan captioner",
        _command("caption --checkpoint {cap-nan} {scene}"),
        "{cap-nan}: " + NAN_SCORES,
    ),
    Mistake(
        "nan classifier",
        _command("classify --checkpoint {cls-nan} --limit 3"),
        "{cls-nan}: the model's scores for the classes are NaN",
    ),
    Mistake(
        "nan classifier: evaluate its accuracy",
        _command("evaluate --checkpoint {cls-nan} --limit 3"),
        "{cls-nan}: the model's scores for the classes are NaN",
    ),
    Mistake(
        "last prompt id past the vocabulary",
        lambda _: _sample(_tiny_lm(), [[1, 2, 20]]),
        "outside the model's vocabulary 0..19 (min 1, max 20)",
    ),
    Mistake(
        "end id past the vocabulary",
        lambda _: _sample(_tiny_lm(), [[1, 2]], eos_ids=(25,)),
        "eos_ids [25] are outside the model's vocabulary 0..19",
    ),
    Mistake(
        "greedy search on NaN scores",
        lambda _: _search("greedy", Scripted(2, float("nan"))),
        "scores for generated token 2 are NaN (row 0 of 2)",
    ),
    Mistake(
        "beam search on inf scores",
        lambda _: _search("beam", Scripted(3, float("inf"))),
        "scores for generated token 3 are inf",
    ),
    Mistake(
        "sampling where every token is ruled out",
        lambda _: _sample(Scripted(1, float("-inf"), everywhere=True), [[1]]),
        "scores for generated token 1 are -inf for every choice",
    ),
]


@pytest.mark.parametrize("case", _table(GENERATION))
def test_generation_never_picks_from_garbage(case, runs, capsys, monkeypatch):
    paths, root = runs
    _try(case, paths, root, capsys, monkeypatch)


def test_scores_ruled_out_are_not_a_mistake_and_a_tiny_temperature_is_greedy():
    """-inf for a token the model rules out decodes as before; a temperature so small that
    logits / temperature overflow still samples the most probable token, never NaN."""
    from qkv.decoding import greedy_search

    clean = Scripted(0, 0.0)
    assert greedy_search(clean, torch.zeros(2, 3, dtype=torch.long), max_len=3).tokens
    lm = _tiny_lm()
    prompt = [[1, 2, 3]]
    cold = _sample(lm, prompt, temperature=1e-38)
    assert torch.equal(cold, _sample(lm, prompt, temperature=0))


# -------------------------------------------------------------------- shards


@pytest.fixture(scope="module")
def ring_refusals(tmp_path_factory) -> dict:
    """Each rank's error for every case of ring_worker.MISTAKES, from one run of two gloo
    processes; and the largest output of a correct call made after them."""
    from tests.test_ring_attention import run_processes

    out = tmp_path_factory.mktemp("ring")
    assert run_processes(mistake_worker, 2, str(out), timeout=120) == [0, 0]
    return {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)}


def _every_rank(name: str, words: str, *, own: dict | None = None) -> Callable[[dict], None]:
    """A library case read from the two processes: every rank refused ``name`` in one line
    with an InputError holding ``words`` (or, for a rank in ``own``, its own error's)."""

    def check(refusals: dict) -> None:
        for rank, seen in refusals.items():
            line = seen[name]
            expected = (own or {}).get(rank, words)
            assert line.startswith("InputError: ") and expected in line, (rank, line)
            assert "\n" not in line
        raise InputError(refusals[0][name])  # the table's one line: rank 0's

    return check


def _shard(dim: int, *, whole: bool = False):
    from qkv.distributed import shard_sequence, unshard_sequence

    x = torch.zeros(2, 3, 8, 4)
    return (unshard_sequence if whole else shard_sequence)(x, dim)


SHARDS = [
    Mistake(
        "unequal lengths (6 and 5)",
        _every_rank("unequal lengths", "(rank 0: 6, rank 1: 5 positions)"),
        "different lengths",
    ),
    Mistake(
        "unequal causal lengths (6 and 4)",
        _every_rank("unequal causal lengths", "(rank 0: 6, rank 1: 4 positions)"),
        "different lengths",
    ),
    Mistake(
        "heads differ between ranks",
        _every_rank("heads differ", "rank 1: query (1, 4, 4, 8)"),
        "different shapes or options",
    ),
    Mistake(
        "causal on one rank only",
        _every_rank(
            "causal on one rank",
            "rank 0: query (1, 2, 4, 8), key (1, 2, 4, 8), value (1, 2, 4, 8), causal=True",
        ),  # fmt: skip
        "different shapes or options",
    ),
    Mistake(
        "block sizes differ",
        _every_rank("block sizes differ", "block_size=2; rank 1"),
        "different shapes or options",
    ),
    Mistake(
        "a 3-D tensor on one rank",
        _every_rank(
            "a 3-D tensor on one rank", "rank 1 refused its inputs", own={1: "(B, H, T, D)"}
        ),
        "rank 1 refused its inputs",
    ),
    Mistake("shard dim past the last", lambda _: _shard(4), "dim=4 is out of range"),
    Mistake("shard dim before the first", lambda _: _shard(-5), "in [-4, 3]"),
    Mistake("unshard dim past the last", lambda _: _shard(7, whole=True), "dim=7"),
]


@pytest.mark.parametrize("case", _table(SHARDS))
def test_shards_that_disagree_are_refused_on_every_rank(case, ring_refusals, capsys, monkeypatch):
    _try(case, ring_refusals, Path("."), capsys, monkeypatch)


def test_the_ring_still_works_after_every_refusal(ring_refusals):
    """No refused call left a rank half-way through an exchange."""
    assert all(seen["after"] > 0 for seen in ring_refusals.values())
    assert set(ring_refusals[0]) == {*MISTAKES, "after"}


# -------------------------------------------------------------------- devices


def _load_lm(paths: dict, device: str):
    from qkv.tasks.lm import load_lm

    return load_lm(paths["lm"], device=device)


def _translator(paths: dict, device: str):
    from qkv.tasks import Translator

    return Translator.from_checkpoint(paths["tr"], device=device)


DEVICES = [
    Mistake(
        "gpu for cuda",
        _command("generate --checkpoint {lm} --prompt a --device gpu"),
        "device='gpu' is not a device qkv runs on ('cuda' is the GPU)",
        gpus=0,
    ),
    Mistake(
        "cuda without a GPU",
        _command("generate --checkpoint {lm} --prompt a --device cuda"),
        "has no CUDA GPU that torch can use (it has: cpu)",
        gpus=0,
    ),
    Mistake(
        "cuda:3 with two GPUs",
        _command("translate --checkpoint {tr} abc --device cuda:3"),
        "device='cuda:3' but this machine has 2 GPUs (it has: cpu, cuda (2 GPUs: cuda:0",
        gpus=2,
    ),
    Mistake(
        "mps off a Mac",
        _command("explore --checkpoint {lm} line --out {out}.html --device mps"),
        "no MPS (Apple GPU)",
        gpus=0,
    ),
    Mistake(
        "meta",
        _command("evaluate --checkpoint {tr} --device meta"),
        "device='meta' is not a device qkv runs on",
    ),
    Mistake(
        "an index that is not a number",
        _command("evaluate --checkpoint {lm} --device cuda:x"),
        "device='cuda:x' is not a device qkv runs on",
    ),
    Mistake(
        "train on gpu",
        _command("train lm --data {text} --out {out} --max-steps 1 --device gpu"),
        "(set by --device gpu)",
    ),
    Mistake(
        "train on cuda without a GPU",
        _command("train lm --data {text} --out {out} --max-steps 1 --device cuda"),
        "has no CUDA GPU",
        gpus=0,
    ),
    Mistake(
        "train on cuda:1 (torchrun picks each process's GPU)",
        _command("train lm --data {text} --out {out} --max-steps 1 --device cuda:1"),
        "device='cuda:1' is unknown",
        gpus=2,
    ),
    Mistake("load_lm on gpu (not 'corrupt')", lambda paths: _load_lm(paths, "gpu"), "device='gpu'"),
    Mistake(
        "a translator on cuda without a GPU",
        lambda paths: _translator(paths, "cuda"),
        "no CUDA GPU",
        gpus=0,
    ),
]


@pytest.mark.parametrize("case", _table(DEVICES))
def test_a_device_this_machine_lacks_is_one_line_naming_what_it_has(
    case, runs, capsys, monkeypatch
):
    paths, root = runs
    _try(case, paths, root, capsys, monkeypatch)


def test_parse_device_reads_what_the_machine_has(monkeypatch):
    _machine(monkeypatch, 2)
    assert parse_device("auto") == torch.device("cuda")
    assert parse_device("cuda:1") == torch.device("cuda", 1)
    assert parse_device(torch.device("cpu")) == torch.device("cpu")
    assert machine_devices() == "cpu, cuda (2 GPUs: cuda:0, cuda:1)"
    _machine(monkeypatch, 0)
    assert parse_device("auto") == torch.device("cpu")
    assert machine_devices() == "cpu"


# -------------------------------------------------------------------- patterns


def _flex(**options):
    from qkv.functional.flex import flex_attention

    q = torch.randn(1, 2, 8, 4)
    return flex_attention(q, q, q, **options)


def _block_mask(mask_mod, **options):
    from qkv.functional.block_mask import create_block_mask

    return create_block_mask(mask_mod, 1, 2, 8, 8, **options)


def _patterns():
    from qkv.functional import patterns

    return patterns


PATTERNS = [
    Mistake(
        "window 0",
        _command("train lm --data {text} --out {out} --window 0"),
        "window=0 must be at least 1 position (omit it for full attention) (set by --window 0)",
    ),
    Mistake(
        "a negative window",
        _command("train lm --data {text} --out {out} --window -3"),
        "window=-3",
    ),
    Mistake(
        "a fractional window",
        _command("train lm --data {text} --out {out} --window 2.5"),
        "argument --window: invalid int value: '2.5'",
    ),
    Mistake(
        "packed documents in a text that has none",
        _command("train lm --data {text} --out {out} --pack"),
        "(set by --pack)",
    ),
    Mistake(
        "a window with learned positions: a prompt past max_len",
        _command("generate --checkpoint {win} --prompt " + "line~" * 5),
        "this model learned only max_len=16 positions",
    ),
    Mistake(
        "a window with learned positions: explore past max_len",
        _command("explore --checkpoint {win} " + "line~" * 5 + " --out {out}.html"),
        "exceed the model's 16 positions",
    ),
    Mistake(
        "a window with learned positions: attention past max_len",
        _command("attention --checkpoint {win} " + "line~" * 5 + " --out {out}.png"),
        "the model's positions reach 16",
    ),
    Mistake("sliding_window(0)", lambda _: _patterns().sliding_window(0), "window=0"),
    Mistake(
        "softcap of NaN",
        lambda _: _patterns().softcap(float("nan")),
        "cap=nan must be a positive finite number",
    ),
    Mistake("a scale of NaN", lambda _: _flex(scale=float("nan")), "scale=nan"),
    Mistake(
        "a block mask on 'gpu'",
        lambda _: _block_mask(_patterns().causal, device="gpu"),
        "device='gpu' is not a device name",
    ),
    Mistake(
        "document ids shorter than the sequence",
        lambda _: _flex(block_mask=_block_mask(_patterns().document(torch.zeros(4).long()))),
        "mask_mod indexed a tensor past its end",
    ),
    Mistake(
        "a relative bias table for fewer heads",
        lambda _: _flex(score_mod=_patterns().relative_bias(torch.zeros(1, 5))),
        "score_mod indexed a tensor past its end",
    ),
    Mistake(
        "a mask_mod returning integers",
        lambda _: _flex(block_mask=_block_mask(lambda b, h, q, k: (q >= k).int())),
        "mask_mod must return a boolean tensor",
    ),
    Mistake(
        "a score_mod of the wrong arity",
        lambda _: _flex(score_mod=lambda score, q, k: score),
        "score_mod could not be evaluated elementwise",
    ),
]


@pytest.mark.parametrize("case", _table(PATTERNS))
def test_a_bad_pattern_is_one_line(case, runs, capsys, monkeypatch):
    paths, root = runs
    _try(case, paths, root, capsys, monkeypatch)


def test_the_table_holds_thirty_cases_five_per_surface():
    surfaces = {
        "folders": FOLDERS,
        "generation": GENERATION,
        "shards": SHARDS,
        "devices": DEVICES,
        "patterns": PATTERNS,
    }
    assert sum(map(len, surfaces.values())) >= 30
    assert all(len(cases) >= 5 for cases in surfaces.values())
    assert issubclass(NotFiniteError, QkvError)
