"""The recurrent translator: Bahdanau (additive), Luong (dot / general, with and without input
feeding) and the no-attention baseline, with GRU and LSTM cells."""

import time

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, pad_sequences
from qkv.layers import AdditiveScore, BilinearScore, DotScore
from qkv.models import build_model, config_to_dict, model_type_of, select_state
from qkv.models.rnn import RNNBaseline, RNNConfig, RNNTranslator

VOCAB = 12  # 4 special ids, then 8 symbols
SOURCE = [[4, 5, 6, 7, 8], [9, 10, 11], [5, 4]]
TARGET = [[BOS_ID, 6, 7, 8, 9], [BOS_ID, 11, 4], [BOS_ID, 5, 10, 6]]

# (attention, input_feeding): every decoder the model has.
DECODERS = [
    ("additive", False),
    ("dot", False),
    ("dot", True),
    ("general", False),
    ("general", True),
]
ALL = [*DECODERS, ("none", False)]


def _model(attention, input_feeding=False, *, cell="gru", num_layers=1, **fields):
    fields = dict(embedding_dim=8, hidden_dim=6, dropout=0.0, **fields)
    config = RNNConfig(
        VOCAB,
        num_layers=num_layers,
        cell=cell,
        attention=attention,
        input_feeding=input_feeding,
        **fields,
    )
    torch.manual_seed(0)
    model_class = RNNBaseline if attention == "none" else RNNTranslator
    return model_class(config).eval()


def _stepwise(model, source, target_input):
    """Teacher-forced decoding through start/step: log-probs (B, T, V), attention (B, T, S)."""
    state = model.start(source)
    log_probs, attention = [], []
    for t in range(target_input.shape[1]):
        out = model.step(target_input[:, t], state)
        state = out.state
        log_probs.append(out.log_probs)
        attention.append(out.attention)
    weights = None if attention[0] is None else torch.stack(attention, dim=1)
    return torch.stack(log_probs, dim=1), weights


def _greedy(model, source, steps):
    state = model.start(source)
    tokens = torch.full((source.shape[0],), BOS_ID)
    generated = []
    for _ in range(steps):
        out = model.step(tokens, state)
        state, tokens = out.state, out.log_probs.argmax(dim=-1)
        generated.append(tokens)
    return torch.stack(generated, dim=1)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention, input_feeding", ALL)
def test_shapes_and_masked_weights(attention, input_feeding, cell):
    model = _model(attention, input_feeding, cell=cell, num_layers=2)
    source, target = pad_sequences(SOURCE), pad_sequences(TARGET)
    out = model(source, target, need_weights=True)
    assert out.logits.shape == (3, 5, VOCAB)
    assert model(source, target).attention is None
    if attention == "none":
        assert out.attention is None
        return
    (weights,) = out.attention["cross"]
    assert weights.shape == (3, 5, 5)
    real = source != PAD_ID
    assert torch.all(weights.masked_select(~real[:, None, :]) == 0)  # exactly zero
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))


def test_the_scores_are_the_cores():
    assert isinstance(_model("additive").decoder.attention.score, AdditiveScore)
    assert isinstance(_model("general").decoder.attention.score, BilinearScore)
    dot = _model("dot").decoder.attention
    assert isinstance(dot.score, DotScore)
    assert dot.key_proj.weight.shape == (6, 12)  # 2H-wide encoder states -> H-wide keys


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention, input_feeding", ALL)
def test_padding_never_changes_a_sentence(attention, input_feeding, cell):
    model = _model(attention, input_feeding, cell=cell, num_layers=2)
    source, target = pad_sequences(SOURCE), pad_sequences(TARGET)
    with torch.no_grad():
        batched = model(source, target, need_weights=True)
        translations = _greedy(model, source, steps=5)
        for row, (alone_source, alone_target) in enumerate(zip(SOURCE, TARGET)):
            alone = model(
                torch.tensor([alone_source]), torch.tensor([alone_target]), need_weights=True
            )
            length = len(alone_target)
            torch.testing.assert_close(
                batched.logits[row, :length], alone.logits[0], atol=1e-5, rtol=1e-5
            )
            if alone.attention is not None:
                torch.testing.assert_close(
                    batched.attention["cross"][0][row, :length, : len(alone_source)],
                    alone.attention["cross"][0][0],
                    atol=1e-5,
                    rtol=1e-5,
                )
            assert torch.equal(
                _greedy(model, torch.tensor([alone_source]), 5)[0], translations[row]
            )


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention, input_feeding", ALL)
def test_teacher_forcing_equals_step_by_step(attention, input_feeding, cell):
    model = _model(attention, input_feeding, cell=cell, num_layers=2)
    source, target = pad_sequences(SOURCE), pad_sequences(TARGET)
    with torch.no_grad():
        out = model(source, target, need_weights=True)
        log_probs, weights = _stepwise(model, source, target)
    torch.testing.assert_close(log_probs, F.log_softmax(out.logits, -1), atol=1e-5, rtol=1e-5)
    if attention != "none":
        torch.testing.assert_close(weights, out.attention["cross"][0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("attention, input_feeding", ALL)
def test_the_state_reorders_for_beam_search(attention, input_feeding):
    model = _model(attention, input_feeding, cell="lstm", num_layers=2)
    source = pad_sequences(SOURCE)
    with torch.no_grad():
        state = model.step(torch.tensor([4, 5, 6]), model.start(source)).state
        order = torch.tensor([2, 0, 0])
        tokens = torch.tensor([8, 7, 9])
        picked = model.step(tokens[order], select_state(state, order))
        full = model.step(tokens, state)
    assert state.hidden.shape == (3, 2, 6)  # batch-first (B, L, H)
    torch.testing.assert_close(picked.log_probs, full.log_probs[order])
    if attention != "none":
        torch.testing.assert_close(picked.attention, full.attention[order])


@pytest.mark.parametrize("attention, input_feeding", ALL)
def test_gradcheck_through_a_tiny_translator(attention, input_feeding):
    config = RNNConfig(
        5,
        embedding_dim=3,
        hidden_dim=3,
        attention=attention,
        input_feeding=input_feeding,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = (RNNBaseline if attention == "none" else RNNTranslator)(config).double()
    source = torch.tensor([[3, 4, 3], [4, 3, PAD_ID]])  # one padded sentence
    target_input = torch.tensor([[BOS_ID, 4], [BOS_ID, 3]])
    source_weight = model.source_embedding.weight.detach().clone().requires_grad_()
    target_weight = model.target_embedding.weight.detach().clone().requires_grad_()

    def logits(source_embedding, target_embedding):
        weights = {
            "source_embedding.weight": source_embedding,
            "target_embedding.weight": target_embedding,
        }
        return functional_call(model, weights, (source, target_input)).logits

    assert torch.autograd.gradcheck(logits, (source_weight, target_weight))


def test_scheduled_sampling_feeds_the_models_own_predictions():
    torch.manual_seed(0)
    always = RNNConfig(VOCAB, embedding_dim=8, hidden_dim=6, dropout=0.0, scheduled_sampling=1.0)
    model = RNNTranslator(always)
    source, target = pad_sequences(SOURCE), pad_sequences(TARGET)
    with torch.no_grad():
        sampled = model.train()(source, target).logits
        teacher_forced = model.eval()(source, target).logits
        # Greedy decoding feeds the previous argmax at every step: the same inputs.
        greedy = _greedy(model, source, steps=5)
        fed = torch.cat([target[:, :1], greedy[:, :-1]], dim=1)
        log_probs, _ = _stepwise(model, source, fed)
    torch.testing.assert_close(F.log_softmax(sampled, -1), log_probs, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(sampled, teacher_forced)
    never = RNNTranslator(always.replace(scheduled_sampling=0.0))
    never.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(never.train()(source, target).logits, teacher_forced)


def test_registered_as_two_model_types():
    baseline = build_model("rnn", {"source_vocab_size": VOCAB, "hidden_dim": 4})
    attentive = build_model("rnn-attention", {"source_vocab_size": VOCAB, "hidden_dim": 4})
    assert type(baseline) is RNNBaseline and baseline.config.attention == "none"
    assert type(attentive) is RNNTranslator and attentive.config.attention == "additive"
    assert model_type_of(baseline) == "rnn" and model_type_of(attentive) == "rnn-attention"
    luong = RNNTranslator(RNNConfig(VOCAB, attention="general", input_feeding=True))
    rebuilt = build_model(model_type_of(luong), config_to_dict(luong.config))
    assert rebuilt.config == luong.config
    shared = RNNTranslator(RNNConfig(VOCAB, share_embeddings=True))
    assert shared.source_embedding is shared.target_embedding


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"attention": "cosine"}, "attention='cosine' is not a known score"),
        ({"cell": "rnn"}, "cell='rnn'"),
        ({"attention": "additive", "input_feeding": True}, "input_feeding=True is Luong's"),
        ({"attention": "none", "input_feeding": True}, "input_feeding=True is Luong's"),
        ({"hidden_dim": 0}, "hidden_dim=0 must be a positive integer"),
        ({"num_layers": 1.5}, "num_layers=1.5"),
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"scheduled_sampling": 1.5}, "scheduled_sampling=1.5 is a probability"),
        ({"target_vocab_size": 9, "share_embeddings": True}, "share_embeddings=True"),
        ({"pad_id": 12}, "pad_id=12"),
    ],
)
def test_bad_configs_raise_early(fields, message):
    with pytest.raises(ValueError, match=message):
        RNNConfig(VOCAB, **fields)


def test_bad_uses_raise_clear_errors():
    with pytest.raises(ValueError, match="build RNNBaseline"):
        RNNTranslator(RNNConfig(VOCAB, attention="none"))
    with pytest.raises(ValueError, match="has no attention, got attention='dot'"):
        RNNBaseline(RNNConfig(VOCAB, attention="dot"))
    with pytest.raises(TypeError, match="needs an RNNConfig"):
        RNNTranslator({"source_vocab_size": VOCAB})
    model = _model("additive")
    target = torch.tensor([[BOS_ID, 4]])
    with pytest.raises(ValueError, match=r"source rows \[1\] hold only padding"):
        model(torch.tensor([[4, 5], [PAD_ID, PAD_ID]]), target.repeat(2, 1))
    with pytest.raises(ValueError, match="right-padded"):
        model(torch.tensor([[PAD_ID, 4, 5]]), target)
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.tensor([[4.0, 5.0]]), target)
    with pytest.raises(ValueError, match="different batch sizes"):
        model(torch.tensor([[4, 5]]), target.repeat(2, 1))
    with pytest.raises(ValueError, match=r"one token per sequence, \(B,\)"):
        model.step(torch.tensor([[BOS_ID]]), model.start(torch.tensor([[4, 5]])))


def _reversal_batch(generator, size):
    lengths = torch.randint(3, 7, (size,), generator=generator).tolist()
    sources = [torch.randint(4, VOCAB, (n,), generator=generator).tolist() for n in lengths]
    targets = [[BOS_ID, *source[::-1], EOS_ID] for source in sources]
    return pad_sequences(sources), pad_sequences(targets), lengths


def test_learns_to_reverse_and_aligns_output_i_with_input_n_minus_1_minus_i():
    """Bahdanau attention on reversal: the loss falls to near zero, and on held-out
    sequences the attention of output i peaks on input n-1-i (the alignment is anti-diagonal)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two shared ones
    try:
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(0)
        config = RNNConfig(VOCAB, embedding_dim=16, hidden_dim=32, dropout=0.0)
        model = RNNTranslator(config)
        steps = 150
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1 - i / steps)
        began = time.perf_counter()
        for _ in range(steps):
            source, target, _ = _reversal_batch(generator, 64)
            logits = model(source, target[:, :-1]).logits
            loss = F.cross_entropy(
                logits.flatten(0, 1), target[:, 1:].flatten(), ignore_index=PAD_ID
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
        seconds = time.perf_counter() - began

        model.eval()
        source, target, lengths = _reversal_batch(torch.Generator().manual_seed(1234), 200)
        with torch.no_grad():
            out = model(source, target[:, :-1], need_weights=True)
        held_out = F.cross_entropy(
            out.logits.flatten(0, 1), target[:, 1:].flatten(), ignore_index=PAD_ID
        )
        peaks = out.attention["cross"][0].argmax(dim=-1)  # (B, T)
        aligned = [int(peaks[b, i]) == n - 1 - i for b, n in enumerate(lengths) for i in range(n)]
    finally:
        torch.set_num_threads(threads)
    assert held_out < 0.05, f"held-out loss {held_out:.4f} after {steps} steps ({seconds:.1f} s)"
    accuracy = sum(aligned) / len(aligned)
    assert accuracy >= 0.9, f"alignment accuracy {accuracy:.2%}"


def test_the_attention_name_picks_the_decoder_from_the_registry(monkeypatch):
    from qkv.models import rnn_decoder_registry
    from qkv.models.rnn_decoders import BahdanauDecoder, ContextDecoder, LuongDecoder

    small = dict(source_vocab_size=12, embedding_dim=8, hidden_dim=8)
    built = {
        name: type(RNNTranslator(RNNConfig(**small, attention=name)).decoder)
        for name in ("additive", "dot", "general")
    }
    assert built == {"additive": BahdanauDecoder, "dot": LuongDecoder, "general": LuongDecoder}
    assert isinstance(RNNBaseline(RNNConfig(**small)).decoder, ContextDecoder)
    # a new decoder is one registration: the config accepts its name and the model builds it
    monkeypatch.setitem(
        rnn_decoder_registry._DECODERS,
        "fixed-context",
        lambda config, context_dim: ContextDecoder(
            embedding_dim=config.embedding_dim,
            hidden_dim=config.hidden_dim,
            context_dim=context_dim,
            num_layers=config.num_layers,
            cell=config.cell,
            dropout=config.dropout,
        ),
    )
    model = RNNTranslator(RNNConfig(**small, attention="fixed-context"))
    assert isinstance(model.decoder, ContextDecoder)
    assert model.decoder.readout.in_features == 8 + 16 + 8  # [s_t; c (2H, the encoder's); E y]
    source = torch.tensor([[4, 5, 6], [7, 8, 0]])
    assert model(source, torch.tensor([[1, 4], [1, 5]])).logits.shape == (2, 2, 12)
