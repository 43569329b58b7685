"""Dual encoders (a whole CLIP, SigLIP) on the explorer through attn_implementation="qkv":
small random-weight folders made from transformers' config classes.  Each tower's weights
equal the same folder's ``eager`` output_attentions to 1e-5 (the page's to its rounding),
the similarity is the model's logits_per_image, inputs pair as the module says, and bad
input is one line naming what to pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from qkv.errors import InputError
from qkv.explore import explore, input_attention, load_folder
from qkv.explore.dual_encoders import run_dual

from .test_explore_transformers_folders import (
    LAYERS,
    TARGET,
    TEXT,
    VOCAB,
    assert_close,
    assert_page,
    one_line,
    qkv_cli,
    save_tokenizer,
)

transformers = pytest.importorskip("transformers")

END = "<|endoftext|>"


def _models():
    t = transformers
    square = {"height": 32, "width": 32}
    return {
        # name -> (the config class, the model class, the image processor); CLIP's text
        # tower is causal, SigLIP's not
        "clip": (
            lambda **towers: t.CLIPConfig(**towers, projection_dim=16),
            t.CLIPModel,
            lambda: t.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square),
        ),
        "siglip": (
            t.SiglipConfig,
            t.SiglipModel,
            lambda: t.SiglipImageProcessor(size=square),
        ),
    }


def save_text_tokenizer(folder: Path) -> int:
    """The byte-level tokenizer of the other folders, ending each text with an end token
    of its own, as CLIP's does (CLIP pools the text tower at it, SigLIP at the last token):
    its id."""
    from tokenizers import processors

    save_tokenizer(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": [END]})
    end = tokenizer.convert_tokens_to_ids(END)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {END}", special_tokens=[(END, end)]
    )
    tokenizer.save_pretrained(folder)
    return end


def save_dual(root: Path, name: str) -> Path:
    config, model, processor = _models()[name]
    folder = root / name
    end = save_text_tokenizer(folder)
    text = dict(vocab_size=VOCAB + 8, hidden_size=32, max_position_embeddings=40, **LAYERS,
                pad_token_id=0, bos_token_id=1)  # fmt: skip
    vision = dict(hidden_size=32, image_size=32, patch_size=8, **LAYERS)
    torch.manual_seed(0)
    hf = model(config(text_config={**text, "eos_token_id": end}, vision_config=vision))
    with torch.no_grad():  # biases and norms away from their defaults, so mix-ups show
        for parameter_name, parameter in hf.named_parameters():
            if parameter_name.endswith("bias") or "norm" in parameter_name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    hf.save_pretrained(folder)
    processor().save_pretrained(folder)
    return folder


def save_pictures(root: Path) -> list[Path]:
    from PIL import Image

    paths = []
    for seed, size in ((0, (40, 48)), (1, (36, 36))):
        pixels = np.random.default_rng(seed).random((*size, 3)) * 255
        paths.append(root / f"picture{seed}.png")
        Image.fromarray(pixels.astype("uint8")).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("dual-encoders")
    found = {name: save_dual(root, name) for name in _models()}
    found["pictures"] = save_pictures(root)
    return found


def eager_run(folder: Path, loaded, texts, pictures):
    """The eager model's output per text, on that text and all the pictures."""
    from PIL import Image

    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    images = [Image.open(p).convert("RGB") for p in pictures]
    pixels = loaded.model.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return [
            model(
                input_ids=torch.tensor([loaded.tokenizer.encode(text)]),
                pixel_values=pixels,
                output_attentions=True,
            )
            for text in texts
        ], pixels


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_both_towers_and_the_similarity_equal_eager(folders, name):
    loaded = load_folder(folders[name])
    assert loaded.name == {"clip": "CLIPModel", "siglip": "SiglipModel"}[name]
    pictures = [str(p) for p in folders["pictures"]]
    inputs = [pictures[0], TEXT, pictures[1], TARGET]
    theirs, pixels = eager_run(folders[name], loaded, [TEXT, TARGET], pictures)
    # the weights gathered through qkv's implementation, before any rounding
    ids = [loaded.tokenizer.encode(text) for text in (TEXT, TARGET)]
    run = run_dual(loaded.model, ids, pixels)
    for j, output in enumerate(theirs):
        assert_close(run.text[j], output.text_model_output.attentions)
        torch.testing.assert_close(
            run.logits[:, j], output.logits_per_image[:, 0], atol=1e-5, rtol=0
        )
    for i in range(len(pictures)):
        reference = [w[i : i + 1] for w in theirs[0].vision_model_output.attentions]
        assert_close(run.vision[i], reference)
    # the page: one entry per input, in the order given
    data = explore(loaded.model, inputs, tokenizer=loaded.tokenizer)
    assert data["model"]["kind"] == "dual-encoder"
    assert data["model"]["implementation"] == f"transformers {loaded.name} through qkv's attention"
    assert data["model"]["page"]["info"].startswith(f"{loaded.name}: dual encoder")
    pages = data["inputs"]
    assert [p["name"] for p in pages] == ["picture0.png", TEXT, "picture1.png", TARGET]
    assert [[v["id"] for v in p["views"]] for p in pages] == [["vision"], ["text"]] * 2
    logits = torch.cat([output.logits_per_image for output in theirs], dim=1)  # (images, texts)
    assert (logits[:, 0] - logits[:, 1]).abs().min() > 1e-3  # the texts are told apart
    # each model's own scoring: CLIP a softmax over the texts, SigLIP a sigmoid per pair
    shares = logits.softmax(dim=1) if name == "clip" else logits.sigmoid()
    for j, page in zip((0, 1), (pages[1], pages[3]), strict=True):
        view = page["views"][0]
        assert_page(view, theirs[j].text_model_output.attentions)
        assert view["query_tokens"] == loaded.tokenizer.tokens(ids[j])
        assert view["causal"] is (name == "clip")  # CLIP's text tower is causal, shown so
        assert view["title"] == ("text tower: causal self-attention" if name == "clip" else
                                 "text tower: self-attention")  # fmt: skip
        similarity = page["similarity"]
        assert similarity["names"] == ["picture0.png", "picture1.png"]
        assert np.allclose(similarity["logits"], logits[:, j], atol=1e-4)
        assert np.allclose(similarity["probabilities"], shares[:, j], atol=1e-4)
    for i, page in zip((0, 1), (pages[0], pages[2]), strict=True):
        reference = [w[i : i + 1] for w in theirs[0].vision_model_output.attentions]
        assert_page(page["views"][0], reference)
        lead = 1 if name == "clip" else 0  # CLIP's [CLS]; SigLIP has none
        assert page["image"]["grid"] == [4, 4] and page["image"]["offset"] == lead
        assert page["image"]["png"].startswith("data:image/png;base64,")
        assert page["similarity"]["names"] == [TEXT, TARGET]
        assert np.allclose(page["similarity"]["probabilities"], shares[i], atol=1e-4)
        assert page["output"] == [TEXT, TARGET][int(shares[i].argmax())]


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_one_input_gives_its_towers_attention(folders, name, tmp_path, capsys):
    """`qkv attention` reads one input: a text (the text tower) or an image (the vision's)."""
    loaded = load_folder(folders[name])
    picture = str(folders["pictures"][0])
    theirs, _ = eager_run(folders[name], loaded, [TEXT], [picture])
    found = input_attention(loaded.model, loaded.tokenizer, TEXT)
    assert_close(found["attention"]["text"], theirs[0].text_model_output.attentions)
    found = input_attention(loaded.model, loaded.tokenizer, picture)
    assert_close(found["attention"]["vision"], theirs[0].vision_model_output.attentions)
    out = tmp_path / "vision.npz"
    code, err = qkv_cli(capsys, "attention", "--pretrained", str(folders[name]), picture,
                        "--weights-out", str(out))  # fmt: skip
    assert code == 0, err
    tokens = 17 if name == "clip" else 16  # 4 x 4 patches, and CLIP's [CLS]
    assert np.load(out)["vision.layer1"].shape == (4, tokens, tokens)


def test_the_neuron_view_holds_each_towers_vectors(folders):
    loaded = load_folder(folders["clip"])
    picture = str(folders["pictures"][0])
    data = explore(loaded.model, [TEXT, picture], tokenizer=loaded.tokenizer, vectors="all")
    for page in data["inputs"]:
        view = page["views"][0]
        assert set(view["vectors"]) == {"0", "1"}
        for layer, stored in view["vectors"].items():
            assert "absent" not in stored, (view["id"], layer, stored)
            count = len(view["query_tokens"])
            assert len(stored["q"][0]) == count and len(stored["k"][0]) == count


def test_qkv_explore_opens_a_whole_clip_folder(folders, tmp_path, capsys):
    page = tmp_path / "clip.html"
    pictures = [str(p) for p in folders["pictures"]]
    code, err = qkv_cli(capsys, "explore", "--pretrained", str(folders["clip"]), *pictures,
                        TEXT, TARGET, "--out", str(page))  # fmt: skip
    assert code == 0, err
    text = page.read_text("utf-8")
    assert "transformers CLIPModel through qkv's attention" in text
    assert '"similarity"' in text


# -- bad input ----------------------------------------------------------------------------


def test_texts_alone_or_images_alone_say_what_to_pass(folders):
    loaded = load_folder(folders["clip"])
    picture = str(folders["pictures"][0])
    with pytest.raises(InputError, match="dual encoder: give image files and texts together") as e:
        explore(loaded.model, [TEXT, TARGET], tokenizer=loaded.tokenizer)
    assert "only texts were given" in one_line(e)
    with pytest.raises(InputError, match="only image files were given") as e:
        explore(loaded.model, [picture], tokenizer=loaded.tokenizer)
    one_line(e)
    with pytest.raises(InputError, match="input 1: no image file 'cat.png'"):
        explore(loaded.model, [picture, "cat.png", TEXT], tokenizer=loaded.tokenizer)
    with pytest.raises(InputError, match="targets .* are for encoder-decoder"):
        explore(loaded.model, [picture, TEXT], tokenizer=loaded.tokenizer, targets=[TEXT] * 2)
    with pytest.raises(InputError, match="input 1 has .* tokens; the model's positions reach 40"):
        explore(loaded.model, [picture, " ".join([TEXT] * 20)], tokenizer=loaded.tokenizer)


def test_a_text_and_vision_model_that_is_no_dual_encoder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llava"}')
    with pytest.raises(InputError, match="text and a vision tower that is not a dual") as e:
        load_folder(tmp_path)
    assert "vision_model.save_pretrained" in one_line(e)
