"""The explorer's data: rollout and head summaries by hand, the JSON schema of each model
kind, and the page's numbers against the weights the library computes with need_weights."""

import json
import re
import urllib.error
import urllib.request

import pytest
import torch

import qkv
from qkv.data import BOS_ID, EOS_ID, CharTokenizer
from qkv.data.captions import WordVocab
from qkv.decoding import beam_search, greedy_search
from qkv.errors import InputError, NotFiniteError
from qkv.explore import (
    WEIGHT_SCALE,
    PageServer,
    attention_rollout,
    explore,
    head_summary,
    iframe_html,
    quantize,
    render_html,
)
from qkv.models import (
    Captioner,
    CaptionerConfig,
    RNNBaseline,
    RNNConfig,
    RNNTranslator,
    Transformer,
    TransformerConfig,
)

# The page stores round(w * WEIGHT_SCALE): each number is within half a unit of the weight.
TOLERANCE = 0.5 / WEIGHT_SCALE + 1e-6
SENTENCES = ["the fox", "over 1998-03-03 the brown fox"]


def tiny_tokenizer() -> CharTokenizer:
    return CharTokenizer.train(["the quick brown fox jumps over 1998-03-03"])


def tiny_transformer(vocab_size: int, *, layers: int = 3, heads: int = 4) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        source_vocab_size=vocab_size,
        d_model=8 * heads,
        num_heads=heads,
        d_ff=32,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        max_len=64,
        dropout=0.0,
    )
    return Transformer(config).eval()


def tiny_rnn(vocab_size: int) -> RNNTranslator:
    torch.manual_seed(1)
    config = RNNConfig(source_vocab_size=vocab_size, embedding_dim=16, hidden_dim=16)
    return RNNTranslator(config).eval()


def tiny_captioner(**changes) -> tuple[Captioner, WordVocab]:
    torch.manual_seed(2)
    vocab = WordVocab(["<pad>", "<s>", "</s>", "<unk>", "a", "red", "blue", "circle", "square"])
    options = dict(
        vocab_size=len(vocab),
        image_size=32,
        grid=4,
        feature_dim=16,
        embedding_dim=16,
        hidden_dim=16,
        attention_dim=16,
        max_len=6,
    )
    model = Captioner(CaptionerConfig(**{**options, **changes})).eval()
    with torch.no_grad():  # a random model may end at once: make </s> unlikely, captions long
        model.output.bias[EOS_ID] = -10.0
    return model, vocab


def matrices(data):
    """Every stored matrix of a page's data, with the view it belongs to."""
    for page in data["inputs"]:
        for view in page["views"]:
            for layer in view["layers"]:
                for head in layer["heads"]:
                    yield view, head
                if "rollout" in layer:
                    yield view, layer["rollout"]


# -------------------------------------------------------------------- the math, by hand


def test_rollout_of_two_layers_matches_the_hand_computation():
    # layer 1: two heads whose mean is [[1, 0], [.5, .5]]; 0.5 A + 0.5 I = [[1, 0], [.25, .75]]
    layer1 = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])
    # layer 2: one matrix; 0.5 A + 0.5 I = [[.5, .5], [0, 1]]
    layer2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    first, second = attention_rollout([layer1, layer2])
    torch.testing.assert_close(first, torch.tensor([[1.0, 0.0], [0.25, 0.75]]))
    # [[.5, .5], [0, 1]] @ [[1, 0], [.25, .75]] = [[.625, .375], [.25, .75]]
    torch.testing.assert_close(second, torch.tensor([[0.625, 0.375], [0.25, 0.75]]))


def test_rollout_renormalises_rows_that_do_not_sum_to_one():
    # a row with no weight (a fully masked query) keeps only its residual: itself
    weights = torch.tensor([[0.0, 0.0], [0.5, 0.5]])
    (rollout,) = attention_rollout([weights])
    torch.testing.assert_close(rollout, torch.tensor([[1.0, 0.0], [0.25, 0.75]]))


def test_rollout_refuses_what_is_not_square_self_attention():
    with pytest.raises(InputError, match="square"):
        attention_rollout([torch.rand(3, 4)])
    with pytest.raises(InputError, match="at least one layer"):
        attention_rollout([])


def test_head_summary_by_hand():
    weights = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    summary = head_summary(weights, self_attention=True)
    # entropies 0 and 1 bit; diagonal (1 + .5) / 2; previous: row 1 only; first (1 + .5) / 2
    assert summary == {"entropy": 0.5, "diagonal": 0.75, "previous": 0.5, "first": 0.75}
    cross = head_summary(weights, self_attention=False)
    assert cross["diagonal"] is None and cross["previous"] is None and cross["first"] == 0.75


def test_quantize_rounds_to_the_stated_scale_and_refuses_nan():
    assert quantize(torch.tensor([[0.12344, 0.87656], [0.00004, 0.99996]])) == [
        [1234, 8766],
        [0, WEIGHT_SCALE],
    ]
    assert quantize(torch.tensor([[1.0, 0.0]])) == [[WEIGHT_SCALE, 0]]
    with pytest.raises(NotFiniteError, match="NaN"):
        quantize(torch.tensor([[float("nan"), 1.0]]))


# -------------------------------------------------------------------- the schema


def check_schema(data, kind):
    json.dumps(data, allow_nan=False)  # plain JSON, no NaN or infinity
    assert data["format"] == "qkv-explorer" and data["version"] == 1
    assert data["model"]["kind"] == kind and data["weight_scale"] == WEIGHT_SCALE
    for page in data["inputs"]:
        assert {"name", "source", "source_tokens", "output", "output_tokens", "views"} <= set(page)
        for view in page["views"]:
            assert {"id", "title", "kind", "query_side", "key_side"} <= set(view)
            assert {view["query_side"], view["key_side"]} <= {"source", "target"}
            for layer in view["layers"]:
                assert len(layer["summaries"]) == len(layer["heads"])
                assert set(layer["mean_summary"]) == {"entropy", "diagonal", "previous", "first"}
    for view, matrix in matrices(data):
        assert len(matrix) == len(view["query_tokens"])
        for row in matrix:
            assert len(row) == len(view["key_tokens"])
            assert all(isinstance(w, int) and 0 <= w <= WEIGHT_SCALE for w in row)
            # each row is a distribution (up to half a unit of rounding per entry)
            assert abs(sum(row) - WEIGHT_SCALE) <= len(row) / 2 + 1


def test_transformer_data_has_every_layer_and_head_of_the_three_attentions():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size)
    data = explore(model, SENTENCES, tokenizer=tokenizer, max_len=8)
    check_schema(data, "transformer")
    page = data["inputs"][1]
    assert [view["id"] for view in page["views"]] == ["encoder", "decoder", "cross"]
    encoder, decoder, cross = page["views"]
    assert (
        encoder["query_tokens"]
        == page["source_tokens"]
        == tokenizer.tokens(tokenizer.encode(SENTENCES[1]))
    )
    assert decoder["query_tokens"] == ["<s>", *page["output_tokens"]]
    assert cross["key_tokens"] == page["source_tokens"]
    for view in page["views"]:
        assert len(view["layers"]) == 3 and all(len(x["heads"]) == 4 for x in view["layers"])
    assert all("rollout" in layer for layer in encoder["layers"])
    assert not any("rollout" in layer for layer in cross["layers"] + decoder["layers"])
    # the decoder's self-attention is causal: nothing above the diagonal
    for head in decoder["layers"][0]["heads"]:
        assert all(w == 0 for i, row in enumerate(head) for w in row[i + 1 :])


def test_rnn_data_shows_greedy_and_every_beam_hypothesis_with_scores():
    tokenizer = tiny_tokenizer()
    data = explore(tiny_rnn(tokenizer.vocab_size), SENTENCES[:1], tokenizer=tokenizer, beam=3)
    check_schema(data, "rnn-attention")
    views = data["inputs"][0]["views"]
    assert [view["id"] for view in views] == ["greedy", "beam 1", "beam 2", "beam 3"]
    assert all(isinstance(view["score"], float) and view["kind"] == "alignment" for view in views)


def test_captioner_data_has_the_picture_the_regions_and_the_gates():
    model, vocab = tiny_captioner()
    data = explore(model, [torch.rand(3, 32, 32)], tokenizer=vocab, beam=2)
    check_schema(data, "captioner")
    page = data["inputs"][0]
    assert page["image"]["png"].startswith("data:image/png;base64,")
    assert page["image"]["grid"] == [4, 4] and len(page["source_tokens"]) == 16
    for view in page["views"]:
        assert len(view["gates"]) == len(view["query_tokens"])


def test_the_baselines_without_attention_are_refused_clearly():
    tokenizer = tiny_tokenizer()
    baseline = RNNBaseline(RNNConfig(source_vocab_size=tokenizer.vocab_size, hidden_dim=8))
    with pytest.raises(InputError, match="baseline without attention"):
        explore(baseline, ["the fox"], tokenizer=tokenizer)
    captioner, vocab = tiny_captioner(attention=False)
    with pytest.raises(InputError, match="baseline without attention"):
        explore(captioner, [torch.rand(3, 32, 32)], tokenizer=vocab)


def test_bad_inputs_fail_early_with_one_clear_error():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size, layers=1, heads=2)
    with pytest.raises(InputError, match="list of inputs"):
        explore(model, "the fox", tokenizer=tokenizer)
    with pytest.raises(InputError, match="empty"):
        explore(model, ["  "], tokenizer=tokenizer)
    with pytest.raises(InputError, match="positions reach 64"):
        explore(model, ["x" * 70], tokenizer=tokenizer)
    with pytest.raises(InputError, match="at most 63 tokens"):
        explore(model, ["the fox"], tokenizer=tokenizer, max_len=100)
    captioner, vocab = tiny_captioner()
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        explore(captioner, [torch.full((3, 32, 32), 255.0)], tokenizer=vocab)


# -------------------------------------------------------------------- the numbers


def close(stored, weights) -> bool:
    return bool(
        ((torch.tensor(stored, dtype=torch.float64) / WEIGHT_SCALE) - weights).abs().max()
        <= TOLERANCE
    )


def test_transformer_numbers_are_those_need_weights_computes():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size)
    data = explore(model, SENTENCES, tokenizer=tokenizer, max_len=8)
    for sentence, page in zip(SENTENCES, data["inputs"], strict=True):
        source = torch.tensor([tokenizer.encode(sentence)])
        found = greedy_search(model, source, max_len=8, need_attention=True)
        assert page["output_tokens"] == tokenizer.tokens(found.tokens[0])
        target = torch.tensor([[BOS_ID, *found.tokens[0]]])
        with torch.no_grad():
            attention = model(source, target, need_weights=True).attention
        views = {view["id"]: view for view in page["views"]}
        for name in ("encoder", "decoder", "cross"):
            for layer, weights in zip(views[name]["layers"], attention[name], strict=True):
                for head, stored in enumerate(layer["heads"]):
                    assert close(stored, weights[0, head].double())
        # independently of the teacher-forced pass: the decoder's own step attention (last
        # layer's cross-attention averaged over heads) is the page's, row for row
        heads = torch.tensor(views["cross"]["layers"][-1]["heads"], dtype=torch.float64)
        steps = found.attention[0].double()
        assert ((heads.mean(0) / WEIGHT_SCALE)[: len(steps)] - steps).abs().max() <= TOLERANCE


def test_rnn_numbers_are_the_searches_own_attention_for_every_hypothesis():
    tokenizer = tiny_tokenizer()
    model = tiny_rnn(tokenizer.vocab_size)
    sentence = SENTENCES[1]
    data = explore(model, [sentence], tokenizer=tokenizer, beam=3, max_len=10)
    source = torch.tensor([tokenizer.encode(sentence)])
    greedy = greedy_search(model, source, max_len=10, need_attention=True)
    beams = beam_search(model, source, beam_size=3, num_return=3, max_len=10, need_attention=True)
    expected = [(greedy, 0)] + [(beams, rank) for rank in range(3)]
    for view, (found, row) in zip(data["inputs"][0]["views"], expected, strict=True):
        assert view["score"] == pytest.approx(found.scores[row])
        (stored,) = view["layers"][0]["heads"]
        steps = found.attention[row].double()  # (T, S): the steps that produced each token
        assert close(stored[: len(steps)], steps)
        target = torch.tensor([[BOS_ID, *found.tokens[row]]])
        with torch.no_grad():
            (weights,) = model(source, target, need_weights=True).attention["cross"]
        assert close(stored, weights[0].double())


def test_captioner_numbers_and_gates_are_the_models():
    model, vocab = tiny_captioner()
    image = torch.rand(3, 32, 32)
    data = explore(model, [image], tokenizer=vocab)
    (view,) = data["inputs"][0]["views"]
    found = greedy_search(model, image[None], max_len=5, need_attention=True)
    steps = found.attention[0].double()
    assert close(view["layers"][0]["heads"][0][: len(steps)], steps)
    target = torch.tensor([[BOS_ID, *found.tokens[0]]])
    with torch.no_grad():
        gates = model.decode_teacher_forced(image[None], target).gates[0]
    assert view["gates"] == pytest.approx(gates.tolist(), abs=1e-4)


def test_qkv_attention_and_the_explorer_share_one_extraction():
    from qkv.tasks import Translator

    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size)
    translator = Translator.of_model(model, tokenizer, max_len=8)
    (translation,) = translator.translate([SENTENCES[0]])
    layers = translator.cross_attention(translation)
    # Translator(max_len=8) generates up to 8 + 1 tokens (room for </s>)
    data = explore(model, SENTENCES[:1], tokenizer=tokenizer, max_len=9)
    assert data["inputs"][0]["output_tokens"] == translation.tokens
    cross = data["inputs"][0]["views"][2]
    for layer, weights in zip(cross["layers"], layers, strict=True):
        for stored, head in zip(layer["heads"], weights, strict=True):
            assert close(stored, head.double())


# -------------------------------------------------------------------- the page and the server


def test_the_page_carries_the_data_inline_and_nothing_from_outside():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size, layers=1, heads=2)
    data = qkv.explore(model, SENTENCES[:1], tokenizer=tokenizer, max_len=4, names=["</script>"])
    page = render_html(data)
    found = re.search(
        r'<script type="application/json" id="qkv-data">(.*?)</script>', page, flags=re.S
    )
    assert json.loads(found.group(1)) == json.loads(json.dumps(data))  # "</script>" survived
    assert page.count("<script") == 2
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page)
    assert "default-src 'none'" in page
    assert "srcdoc=" in iframe_html(data)


def test_the_server_serves_the_page_on_localhost_and_nothing_else():
    server = PageServer("<p>the page</p>", port=0)
    server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=5) as answer:
            assert answer.status == 200 and answer.read() == b"<p>the page</p>"
        for path in ("favicon.ico", "etc/passwd", "../"):
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(server.url + path, timeout=5)
            assert error.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(InputError, match="port=70000"):
        PageServer("x", port=70000)


# -------------------------------------------------------------------- the command


def test_qkv_explore_writes_a_page_for_a_translator_and_a_captioner(tmp_path, capsys):
    from PIL import Image

    from qkv.cli.main import main
    from qkv.training import save_checkpoint

    tokenizer = tiny_tokenizer()
    run = tmp_path / "translator"
    save_checkpoint(
        run,
        tiny_transformer(tokenizer.vocab_size, layers=1, heads=2),
        step=1,
        metadata={"setup": {"max_len": 32}},
        tokenizers={"tokenizer": tokenizer},
    )
    out = tmp_path / "explore.html"
    args = ["explore", "--checkpoint", str(run), *SENTENCES, "--out", str(out), "--beam", "2"]
    assert main(args) == 0
    page = out.read_text(encoding="utf-8")
    assert 'id="qkv-data"' in page and "the fox" in capsys.readouterr().out
    assert main([*args, "--vectors", "0"]) == 0  # the neuron view of every attention
    found = re.search(r'id="qkv-data">(.*?)</script>', out.read_text(encoding="utf-8"), re.S)
    views = json.loads(found.group(1))["inputs"][0]["views"]
    assert [sorted(view["vectors"]) for view in views] == [["0"]] * 3

    model, vocab = tiny_captioner()
    run = tmp_path / "captioner"
    save_checkpoint(run, model, step=1, tokenizers={"vocab": vocab})
    picture = tmp_path / "scene.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(picture)
    assert main(["explore", "--checkpoint", str(run), str(picture), "--out", str(out)]) == 0
    assert "scene.png" in out.read_text(encoding="utf-8")


def test_qkv_explore_refuses_the_baseline_and_a_missing_destination(tmp_path, capsys):
    from qkv.cli.main import main
    from qkv.training import save_checkpoint

    tokenizer = tiny_tokenizer()
    baseline = RNNBaseline(RNNConfig(source_vocab_size=tokenizer.vocab_size, hidden_dim=8))
    save_checkpoint(tmp_path / "rnn", baseline, step=1, tokenizers={"tokenizer": tokenizer})
    out = str(tmp_path / "x.html")
    assert main(["explore", "--checkpoint", str(tmp_path / "rnn"), "abc", "--out", out]) == 2
    assert "baseline without attention" in capsys.readouterr().err
    assert main(["explore", "--checkpoint", str(tmp_path / "rnn"), "abc"]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["explore", "--checkpoint", str(tmp_path / "rnn"), "a", "--out", "x.png"]) == 2
    assert ".html file" in capsys.readouterr().err


def test_qkv_explore_has_help_with_an_example(capsys):
    from qkv.cli.main import main

    with pytest.raises(SystemExit):
        main(["explore", "--help"])
    assert "qkv explore --checkpoint" in capsys.readouterr().out
