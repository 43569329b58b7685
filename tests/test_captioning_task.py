"""The captioning task: training through the shared trainer and loading back, the `caption`,
`train captioning` and `evaluate` commands, BLEU and grounding scores (grounding against a
hand computation on a scripted model), beam 1 = greedy, batched = one at a time, the
Karpathy JSON path end to end on generated pictures, and the errors users meet."""

import argparse
import contextlib
import io
import json
import shutil
import sys

import numpy as np
import pytest
import sacrebleu
import torch
from PIL import Image
from torch import nn

from qkv.cli import captioning_commands
from qkv.data.captions import CaptionDataset, CaptionExample, WordVocab
from qkv.data.scenes import SceneObject, scene_dataset
from qkv.decoding import beam_search
from qkv.evaluation.grounding import ground_caption, mean_grounding, name_objects
from qkv.models import CaptionerConfig, LoadedModel, StepOutput
from qkv.tasks import (
    CaptioningSetup,
    ImageCaptioner,
    caption_examples,
    evaluate_captioning,
    train_captioning,
)
from qkv.tasks.captioning import (
    KARPATHY_LAMBDA,
    MODEL_FIELDS,
    SCENES_LAMBDA,
    CaptionTrainingData,
    build_captioner,
    remember_images,
)
from qkv.training import TrainConfig, checkpoint_model_type, load_checkpoint

TINY = [
    "--image-size", "32", "--grid", "4", "--feature-dim", "16", "--embedding-dim", "16",
    "--hidden-dim", "32", "--attention-dim", "16", "--min-count", "1",
]  # fmt: skip
BUDGET = ["--max-steps", "4", "--validate-every", "2", "--max-tokens", "128", "--device", "cpu"]


def run_cli(argv: list[str]) -> int:
    """`qkv ...` as the user types it.  Until the lead wires the captioning hooks into
    ``qkv.cli.main``, the same hooks are wired here into a parser of their own."""
    from qkv.cli import main as cli_main

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            cli_main.build_parser().parse_args(argv)
    except SystemExit:  # this qkv does not know the captioning commands yet
        pass
    else:
        return cli_main.main(argv)
    parser = argparse.ArgumentParser(prog="qkv")
    commands = parser.add_subparsers(dest="command", required=True)
    captioning_commands.register(commands)
    captioning_commands.add_train_parser(commands.add_parser("train").add_subparsers())
    evaluate = commands.add_parser("evaluate")
    for name in ("--checkpoint", "--data", "--images"):
        evaluate.add_argument(name)
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--beam", type=int, default=4)
    evaluate.add_argument("--limit", type=int)
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(run=captioning_commands.evaluate_command)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, OSError) as error:
        print(f"qkv: error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny captioner trained 4 steps on 8 scenes with `qkv train captioning`."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("captioner")
    argv = ["train", "captioning", "--data", "shapes", "--out", str(out), *TINY, *BUDGET]
    assert run_cli([*argv, "--train-size", "8", "--valid-size", "4", "--lr", "3e-3"]) == 0
    return out


@pytest.fixture(scope="module")
def captioner(run_dir):
    return ImageCaptioner.from_checkpoint(run_dir)


def test_train_writes_a_checkpoint_that_loads_back(run_dir, captioner):
    assert checkpoint_model_type(run_dir) == "captioner"
    checkpoint = load_checkpoint(run_dir, load_tokenizers=False)
    setup = checkpoint.metadata["setup"]
    assert checkpoint.metadata["task"] == "captioning"
    assert (setup["data"], setup["image_size"], setup["min_count"]) == ("shapes", 32, 1)
    assert (checkpoint.directory / "tokenizer_vocab.json").is_file()
    # the vocabulary is the training captions' words, most frequent first, after the specials
    train = scene_dataset("train", image_size=32, size=8)
    expected = WordVocab.build(caption for example in train for caption in example.captions)
    assert captioner.vocab.tokens == expected.tokens
    assert checkpoint.config.vocab_size == len(expected)
    for name, tensor in checkpoint.model.state_dict().items():
        assert torch.equal(tensor, captioner.model.state_dict()[name]), name
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    valid = [event for event in events if event["event"] == "valid"]
    assert {2, 4} <= {event["step"] for event in valid}  # every 2 steps and at epoch ends
    for key in ("valid_loss", "bleu", "exact_match"):
        assert all(key in event for event in valid), key
    assert events[-1]["reason"] == "max_steps" and events[-1]["step"] == 4


def test_training_data_counts_an_image_as_its_regions():
    examples = scene_dataset("train", image_size=32, size=3)
    vocab = WordVocab.build(caption for example in examples for caption in example.captions)
    data = CaptionTrainingData(CaptionDataset(examples, vocab, max_caption_len=5), num_regions=16)
    assert len(data) == 6  # two captions per scene
    assert data.source_lengths == [16] * 6
    assert data.target_lengths == [min(len(c), 5) + 2 for e in examples for c in e.captions]
    batch = data.collate([0, 3])
    assert batch.source.shape == (2, 3, 32, 32) and batch.target.shape[1] == 7


def test_remembered_images_are_the_same_images():
    examples = scene_dataset("valid", image_size=32, size=3)
    remembered = remember_images(examples)
    for original, kept in zip(examples, remembered, strict=True):
        assert torch.equal(kept.image, original.image)
        assert torch.equal(kept.image, original.image)  # the second read comes from memory
    assert remember_images(examples, max_bytes=0)[0].image.shape == (3, 32, 32)


def test_caption_command_writes_one_strip_per_image(run_dir, captioner, tmp_path, capsys):
    scenes = scene_dataset("test", image_size=48, size=2)  # another size: resized to 32
    files = []
    for index, example in enumerate(scenes):
        pixels = (example.image.permute(1, 2, 0).numpy() * 255).astype(np.uint8)
        files.append(tmp_path / f"scene{index}.png")
        Image.fromarray(pixels).save(files[-1])
    out = tmp_path / "strip.png"
    argv = ["caption", "--checkpoint", str(run_dir), *map(str, files), "--attention-out", str(out)]
    assert run_cli(argv) == 0
    printed = capsys.readouterr().out
    # the captions printed are the ones the library gives for the same files
    expected = captioner.caption(captioner.load_images(files))
    for file, caption in zip(files, expected, strict=True):
        assert f"{file}: {caption.text}\n" in printed
    for index, caption in enumerate(expected):
        with Image.open(tmp_path / f"strip-{index}.png") as strip:
            # the image and one panel per word, side by side (plot_image_attention's strip)
            assert (
                strip.format == "PNG"
                and strip.width > (len(caption.words) + 1) * strip.height * 0.6
            )
    assert not out.exists()
    assert run_cli(["caption", "--checkpoint", str(run_dir), str(files[0]), "--attention-out",
                    str(out), "--beam", "2"]) == 0  # fmt: skip
    assert out.is_file()


def test_beam_one_equals_greedy_and_batches_equal_single_images(captioner):
    images = [example.image for example in scene_dataset("test", image_size=32, size=5)]
    together = captioner.caption(images, need_attention=True)
    for image, caption in zip(images, together, strict=True):
        (alone,) = captioner.caption([image], need_attention=True)
        assert alone.ids == caption.ids
        assert alone.score == pytest.approx(caption.score, abs=1e-5)
        torch.testing.assert_close(alone.attention, caption.attention, atol=1e-5, rtol=0)
    found = beam_search(captioner.model, torch.stack(images), beam_size=1, max_len=21)
    assert found.tokens == [caption.ids for caption in together]
    assert found.scores == pytest.approx([caption.score for caption in together], abs=1e-5)
    for caption in together:
        assert caption.attention.shape == (len(caption.words), 16)
        torch.testing.assert_close(caption.attention.sum(-1), torch.ones(len(caption.words)))


def test_evaluate_command_json(run_dir, capsys):
    argv = ["evaluate", "--checkpoint", str(run_dir), "--data", "shapes", "--split", "test"]
    assert run_cli([*argv, "--limit", "6", "--beam", "2", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["num_images"] == 6 and scores["beam"] == 2 and scores["tokenize"] == "none"
    # the same numbers by hand: the first 6 test scenes captioned with beam 2, sacreBLEU on
    # the captions against every reference, grounding word by word
    captioner = ImageCaptioner.from_checkpoint(run_dir)
    examples = scene_dataset("test", image_size=32, size=6)
    captions = captioner.caption([e.image for e in examples], beam=2, need_attention=True)
    hypotheses = [caption.text for caption in captions]
    streams = list(zip(*[[" ".join(c) for c in e.captions] for e in examples], strict=True))
    for order in range(1, 5):
        metric = sacrebleu.BLEU(tokenize="none", max_ngram_order=order)
        want = metric.corpus_score(hypotheses, [list(s) for s in streams]).score
        assert scores[f"bleu{order}"] == pytest.approx(want, abs=1e-9), order
    exact = sum(c.words in e.captions for c, e in zip(captions, examples, strict=True)) / 6
    assert scores["exact_match"] == pytest.approx(exact)
    grounded = [
        word
        for caption, example in zip(captions, examples, strict=True)
        for word in ground_caption(
            caption.words, caption.attention, example.objects, image_size=32, grid=4
        )
    ]
    assert scores["grounded_words"] == len(grounded)
    grounding, uniform = mean_grounding(grounded) or (None, None)
    assert scores["grounding"] == pytest.approx(grounding)
    assert scores["grounding_uniform"] == pytest.approx(uniform)
    assert run_cli([*argv, "--limit", "3", "--beam", "1"]) == 0
    assert "BLEU-4" in capsys.readouterr().out


# ---------------------------------------------------------------------------- grounding


class ScriptedCaptioner(nn.Module):
    """Writes the same caption for every image, with hand-written attention at each step."""

    def __init__(self, vocab: WordVocab, words: list[str], maps: torch.Tensor):
        super().__init__()
        self.config = CaptionerConfig(vocab_size=len(vocab), image_size=32, grid=4)
        self.ids = [*vocab.encode(words), 2]  # then </s>
        self.maps = torch.cat([maps, torch.full((1, 16), 1 / 16)])  # (T + 1, P)
        self.anchor = nn.Parameter(torch.zeros(()))

    def start(self, images):
        return torch.zeros(images.shape[0], dtype=torch.long)

    def step(self, tokens, state, *, need_attention=True):
        position = state.clamp(max=len(self.ids) - 1)  # past </s>: keep offering </s>
        scores = torch.full((len(state), self.config.vocab_size), -30.0)
        scores[torch.arange(len(state)), torch.tensor(self.ids)[position]] = 0.0
        return StepOutput(scores.log_softmax(-1), state + 1, self.maps[position])


def hand_scene() -> CaptionExample:
    """32 x 32 pixels, a 4 x 4 grid of 8-pixel cells; region p = row * 4 + column."""
    objects = (
        SceneObject("circle", "red", "small", (0, 0, 12, 12)),  # cells 0, 1, 4, 5 in part
        SceneObject("square", "blue", "large", (16, 16, 32, 32)),  # cells 10, 11, 14, 15
    )
    caption = "a small red circle left of a large blue square".split()
    return CaptionExample("hand", [caption], [" ".join(caption)], lambda: torch.rand(3, 32, 32),
                          objects=objects, grounding=({2: 0, 3: 0, 8: 1, 9: 1},))  # fmt: skip


def test_grounding_equals_a_hand_computation():
    example = hand_scene()
    words = example.captions[0]
    maps = torch.zeros(len(words), 16)
    maps[:, 6] = 1.0  # words that name nothing: anywhere
    maps[2] = torch.eye(16)[5]  # "red": all on cell 5, a quarter of it in the box -> 0.25
    maps[3] = 0.5 * (torch.eye(16)[0] + torch.eye(16)[15])  # "circle": half inside -> 0.5
    maps[8] = torch.full((16,), 1 / 16)  # "blue": uniform -> the box's 4 cells of 16 -> 0.25
    maps[9] = torch.eye(16)[15]  # "square": all inside -> 1.0
    grounded = ground_caption(words, maps, example.objects, image_size=32, grid=4)
    assert [(g.position, g.word, g.object_index) for g in grounded] == [
        (2, "red", 0), (3, "circle", 0), (8, "blue", 1), (9, "square", 1)
    ]  # fmt: skip
    assert [g.mass for g in grounded] == pytest.approx([0.25, 0.5, 0.25, 1.0])
    assert [g.uniform for g in grounded] == pytest.approx([144 / 1024] * 2 + [0.25] * 2)

    vocab = WordVocab.build(example.captions)
    scripted = LoadedModel(ScriptedCaptioner(vocab, words, maps), vocab, "scripted", "captioner")
    captioner = ImageCaptioner(scripted, max_caption_len=20)
    for beam in (1, 3):
        scores, captions = evaluate_captioning(captioner, [example, example], beam=beam)
        assert captions[0].words == words
        assert scores.grounding == pytest.approx((0.25 + 0.5 + 0.25 + 1.0) / 4)
        assert scores.grounding_uniform == pytest.approx((2 * 144 / 1024 + 2 * 0.25) / 4)
        assert scores.grounded_words == 8
        assert scores.exact_match == 1.0 and scores.bleu4 == pytest.approx(100.0)


def test_which_object_a_generated_word_names():
    circle = SceneObject("circle", "red", "small", (0, 0, 8, 8))
    objects = (circle, SceneObject("circle", "blue", "small", (9, 9, 17, 17)),
               SceneObject("square", "blue", "large", (20, 0, 30, 10)))  # fmt: skip
    assert name_objects("a red circle".split(), objects) == {1: 0, 2: 0}
    assert name_objects("a blue circle".split(), objects) == {1: 1, 2: 1}
    assert name_objects("a small circle".split(), objects) == {}  # two circles: ambiguous
    assert name_objects("a square".split(), objects) == {1: 2}  # the only square
    assert name_objects("a green square".split(), objects) == {}  # no green square
    assert name_objects("a red square above a red".split(), objects) == {}


def test_a_caption_that_is_one_reference_of_several_is_exact():
    example = hand_scene()
    other = "a large blue square right of a small red circle".split()
    example = CaptionExample("two", [other, example.captions[0]], [], example.load_image,
                             objects=example.objects)  # fmt: skip
    words = example.captions[1]
    vocab = WordVocab.build(example.captions)
    maps = torch.full((len(words), 16), 1 / 16)
    scripted = LoadedModel(ScriptedCaptioner(vocab, words, maps), vocab, "scripted", "captioner")
    captioner = ImageCaptioner(scripted, max_caption_len=20)
    scores, _ = evaluate_captioning(captioner, [example])
    assert scores.exact_match == 1.0 and scores.bleu1 == pytest.approx(100.0)
    assert scores.grounding == pytest.approx(scores.grounding_uniform)  # uniform maps


# ---------------------------------------------------------------------------- Karpathy JSON


def write_karpathy(folder, splits=("train", "train", "train", "restval", "val", "test")):
    """Scene pictures saved as files of several modes and sizes, with their captions."""
    folder.mkdir(parents=True, exist_ok=True)
    scenes = scene_dataset("train", image_size=48, size=len(splits))
    records = []
    for index, (example, split) in enumerate(zip(scenes, splits, strict=True)):
        pixels = (example.image.permute(1, 2, 0).numpy() * 255).astype(np.uint8)
        picture = Image.fromarray(pixels)
        if index % 3 == 1:
            picture = picture.convert("L")  # grayscale: replicated to RGB
        elif index % 3 == 2:
            picture = picture.convert("RGBA").resize((60, 48))  # alpha, not square
        picture.save(folder / f"{index}.png")
        sentences = [{"tokens": words, "raw": raw} for words, raw in
                     zip(example.captions, example.raw, strict=True)]  # fmt: skip
        records.append({"filename": f"{index}.png", "split": split, "sentences": sentences})
    path = folder / "captions.json"
    path.write_text(json.dumps({"images": records}))
    return path


def test_karpathy_json_end_to_end(tmp_path, capsys):
    data = write_karpathy(tmp_path / "pictures")
    out = tmp_path / "run"
    argv = ["train", "captioning", "--data", str(data), "--images", str(tmp_path / "pictures")]
    assert run_cli([*argv, "--out", str(out), *TINY, "--max-steps", "2", "--device", "cpu"]) == 0
    assert json.loads((out / "best.json").read_text())["metric"] == "bleu"
    capsys.readouterr()
    examples = caption_examples(str(data), "train", image_size=32)  # restval counts as train
    assert len(examples) == 4 and all(e.image.shape == (3, 32, 32) for e in examples)
    evaluate = ["evaluate", "--checkpoint", str(out), "--data", str(data), "--json"]
    assert run_cli([*evaluate, "--split", "test", "--beam", "2"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["num_images"] == 1 and scores["grounding"] is None
    picture = tmp_path / "pictures" / "2.png"  # RGBA, 60 x 48
    assert run_cli(["caption", "--checkpoint", str(out), str(picture)]) == 0
    assert capsys.readouterr().out.startswith(f"{picture}: ")


def test_training_on_a_json_without_a_val_split(tmp_path):
    data = write_karpathy(tmp_path, splits=("train", "train", "test"))
    setup = CaptioningSetup(data=str(data), image_size=32, grid=4, feature_dim=8,
                            embedding_dim=8, hidden_dim=8, attention_dim=8, min_count=1)  # fmt: skip
    config = TrainConfig(max_steps=1, epochs=None, device="cpu", warmup_steps=0)
    result = train_captioning(setup, config, tmp_path / "run")
    assert result.steps == 1 and result.best_checkpoint is None
    assert result.last_checkpoint is not None


# ---------------------------------------------------------------------------- errors


def error_of(argv, capsys) -> str:
    assert run_cli(argv) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("qkv: error: ") and "\n" not in message
    return message


def test_bad_images_give_one_clear_line(run_dir, tmp_path, capsys):
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    caption = ["caption", "--checkpoint", str(run_dir)]
    assert "cannot read" in error_of([*caption, str(text)], capsys)
    assert "not found" in error_of([*caption, str(tmp_path / "missing.jpg")], capsys)
    picture = tmp_path / "ok.png"
    Image.new("RGB", (10, 7), (200, 10, 10)).save(picture)  # tiny, odd size: resized
    assert ".png file" in error_of([*caption, str(picture), "--attention-out", "a.jpg"], capsys)
    assert run_cli([*caption, str(picture)]) == 0


def test_bad_data_gives_one_clear_line(run_dir, tmp_path, capsys):
    evaluate = ["evaluate", "--checkpoint", str(run_dir), "--json"]
    data = write_karpathy(tmp_path / "only-train", splits=("train", "train"))
    assert "no images in split 'test'" in error_of([*evaluate, "--data", str(data)], capsys)
    assert "neither 'shapes'" in error_of([*evaluate, "--data", "dates"], capsys)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"images": [{"split": "test", "filename": "0.png"}]}))
    assert "'sentences'" in error_of([*evaluate, "--data", str(broken)], capsys)
    broken.write_text("{not json")
    assert "not valid JSON" in error_of([*evaluate, "--data", str(broken)], capsys)
    with pytest.raises(ValueError, match="no images to evaluate"):
        evaluate_captioning(ImageCaptioner.from_checkpoint(run_dir), [])
    with pytest.raises(ValueError, match="lower min_count"):
        train_captioning(CaptioningSetup(train_size=2, min_count=1000), TrainConfig(), tmp_path)


def test_no_attention_baseline_has_no_strips(tmp_path, capsys):
    out = tmp_path / "baseline"
    argv = ["train", "captioning", "--data", "shapes", "--out", str(out), "--no-attention"]
    assert run_cli([*argv, *TINY, "--max-steps", "1", "--train-size", "4", "--valid-size", "2",
                    "--device", "cpu"]) == 0  # fmt: skip
    picture = tmp_path / "scene.png"
    Image.new("RGBA", (40, 40), (0, 0, 255, 128)).save(picture)
    caption = ["caption", "--checkpoint", str(out), str(picture)]
    assert "no-attention baseline" in error_of([*caption, "--attention-out", "x.png"], capsys)
    argv = ["evaluate", "--checkpoint", str(out), "--data", "shapes", "--limit", "2", "--json"]
    assert run_cli(argv) == 0
    assert json.loads(capsys.readouterr().out)["grounding"] is None


def test_demo_trains_scores_and_writes_strips(tmp_path):
    from qkv.tasks import demo_captioning

    setup = CaptioningSetup(image_size=32, grid=4, feature_dim=8, embedding_dim=8, hidden_dim=8,
                            attention_dim=8, min_count=1, train_size=8, valid_size=2,
                            max_caption_len=6)  # fmt: skip
    config = TrainConfig(max_steps=2, epochs=None, warmup_steps=0, device="cpu")
    lines = []
    scores = demo_captioning(tmp_path, setup=setup, config=config, say=lines.append)
    # what the demo reports is what its checkpoint scores on the same test scenes
    from qkv.tasks.captioning_demo import TEST_IMAGES

    test = caption_examples("shapes", "test", image_size=32, size=TEST_IMAGES)
    expected, _ = evaluate_captioning(ImageCaptioner.from_checkpoint(tmp_path), test, beam=1)
    assert scores["steps"] == 2 and scores["bleu4"] == pytest.approx(expected.bleu4)
    assert scores["exact_match"] == pytest.approx(expected.exact_match)
    assert scores["grounding"] == pytest.approx(expected.grounding)
    assert scores["grounding_uniform"] == pytest.approx(expected.grounding_uniform)
    assert sorted(p.name for p in (tmp_path / "attention").iterdir()) == [
        f"scene-{index}.png" for index in range(4)
    ]
    assert any(line.startswith("test scenes: BLEU-4") for line in lines)


def test_a_checkpoint_with_the_first_vocabulary_format_still_loads(run_dir, captioner, tmp_path):
    """Captioning checkpoints written before the vocabulary became a tokenizer hold
    ``{"kind": "words", "tokens": [...]}`` (WordVocab.save's format): they load the same."""
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    for vocab_file in old.rglob("tokenizer_vocab.json"):
        assert json.loads(vocab_file.read_text())["format"] == "qkv-tokenizer"
        captioner.vocab.save(vocab_file)  # the first format
        assert "format" not in json.loads(vocab_file.read_text())
    loaded = ImageCaptioner.from_checkpoint(old)
    assert loaded.vocab.tokens == captioner.vocab.tokens
    images = scene_dataset("test", image_size=32, size=3)
    expected = captioner.caption([e.image for e in images])
    assert [c.words for c in loaded.caption([e.image for e in images])] == [
        c.words for c in expected
    ]


def test_every_model_field_of_the_setup_reaches_the_config():
    assert set(MODEL_FIELDS) == {
        "image_size", "encoder", "pretrained_encoder", "feature_dim", "grid", "embedding_dim",
        "hidden_dim", "attention_dim", "score", "attention", "gate", "doubly_stochastic",
        "dropout",
    }  # fmt: skip
    changed = dict(
        image_size=48, feature_dim=24, grid=4, embedding_dim=20, hidden_dim=12,
        attention_dim=None, score="general", attention=False, gate=False,
        doubly_stochastic=0.7, dropout=0.2,
    )  # fmt: skip
    config = build_captioner(CaptioningSetup(max_caption_len=9, **changed), 30).config
    assert {name: getattr(config, name) for name in changed} == changed
    assert (config.vocab_size, config.max_len) == (30, 10)


def test_lambda_defaults_by_the_data_and_an_explicit_value_wins():
    # each data's own (the scenes': measured in docs/results.md), where the data is known
    assert CaptioningSetup().doubly_stochastic == SCENES_LAMBDA
    assert CaptioningSetup(data="flickr8k.json").doubly_stochastic == KARPATHY_LAMBDA
    assert build_captioner(CaptioningSetup(), 9).config.doubly_stochastic == SCENES_LAMBDA
    assert CaptioningSetup(doubly_stochastic=0.5).doubly_stochastic == 0.5
    assert (
        build_captioner(CaptioningSetup(doubly_stochastic=0.5), 9).config.doubly_stochastic == 0.5
    )
