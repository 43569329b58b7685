"""The encoder-decoder Transformer: equal to torch.nn.Transformer with copied weights (post-LN
and pre-LN), cached decoding equal to the full forward, causality, padding invariance,
attention shapes, state reordering, config validation, and a tiny model that learns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv.decoding import greedy_search
from qkv.layers.blocks import DecoderBlock, EncoderBlock
from qkv.layers.positions import NoInputPositions
from qkv.layers.relative_positions import ALiBi, RotaryEmbedding
from qkv.models.base import Decodable, select_state
from qkv.models.registry import build_model, config_to_dict, model_type_of
from qkv.models.transformer import Transformer, TransformerState
from qkv.models.transformer_config import TransformerConfig
from qkv.models.transformer_stack import (
    TransformerDecoder,
    TransformerEncoder,
    load_torch_transformer,
)
from qkv.training.checkpoint import load_checkpoint

VOCAB = 23
POSITIONS = ["sinusoidal", "learned", "learned_concat", "rope", "alibi"]
# The tests marked cuda run on the GPU where there is one (``python -m pytest -m cuda``).
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _tiny(**overrides) -> TransformerConfig:
    fields = dict(
        d_model=16,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=64,
    )
    return TransformerConfig(VOCAB, **{**fields, **overrides})


def _model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(_tiny(**overrides)).to(DEVICE).eval()


def _source() -> torch.Tensor:
    torch.manual_seed(100)
    source = torch.randint(4, VOCAB, (3, 7))
    source[1, 4:] = 0  # padding
    source[2, 2:] = 0
    return source.to(DEVICE)


def _target(length: int, batch: int = 3) -> torch.Tensor:
    return torch.randint(4, VOCAB, (batch, length)).to(DEVICE)


@pytest.mark.cuda
@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_equal_torch_transformer(norm_first):
    torch.manual_seed(0)
    d, h, ff = 16, 4, 32
    theirs = nn.Transformer(d, h, 2, 3, ff, dropout=0.0, batch_first=True, norm_first=norm_first)

    def blocks(kind, n):
        return [kind(d, h, ff, dropout=0.0, norm_first=norm_first) for _ in range(n)]

    encoder = TransformerEncoder(blocks(EncoderBlock, 2), norm=nn.LayerNorm(d)).to(DEVICE)
    decoder = TransformerDecoder(blocks(DecoderBlock, 3), norm=nn.LayerNorm(d)).to(DEVICE)
    theirs = theirs.to(DEVICE)
    load_torch_transformer(encoder, decoder, theirs)

    source, target = torch.randn(3, 7, d, device=DEVICE), torch.randn(3, 5, d, device=DEVICE)
    keep = torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None]  # (B, S) True = real
    keep = keep.to(DEVICE)
    ignore = ~keep  # PyTorch's key_padding_mask polarity: True = ignore
    causal = nn.Transformer.generate_square_subsequent_mask(5, device=DEVICE)
    expected_memory = theirs.encoder(source, src_key_padding_mask=ignore)
    expected = theirs(
        source,
        target,
        tgt_mask=causal,
        src_key_padding_mask=ignore,
        memory_key_padding_mask=ignore,
        tgt_is_causal=True,
    )
    source_mask = keep[:, None, None, :]  # (B, 1, 1, S)
    memory = encoder(source, mask=source_mask).hidden
    output = decoder(target, memory, memory_mask=source_mask).hidden
    torch.testing.assert_close(memory[keep], expected_memory[keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)


def test_load_torch_transformer_names_the_mismatch():
    theirs = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)
    model = _model()  # post-LN without final norms, 2 + 2 blocks
    with pytest.raises(ValueError, match="2 blocks, torch has 1"):
        load_torch_transformer(model.encoder, model.decoder, theirs)
    model = _model(num_encoder_layers=1, num_decoder_layers=1)
    with pytest.raises(ValueError, match="final_norm=True"):
        load_torch_transformer(model.encoder, model.decoder, theirs)
    model = _model(num_encoder_layers=1, num_decoder_layers=1, final_norm=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        load_torch_transformer(model.encoder, model.decoder, theirs)
    model = _model(num_encoder_layers=1, num_decoder_layers=1, final_norm=True, activation="gelu")
    with pytest.raises(ValueError, match="activation='gelu', torch='relu'"):
        load_torch_transformer(model.encoder, model.decoder, theirs)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "options",
    [{}, {"norm_first": True}] + [{"positions": kind} for kind in POSITIONS[1:]],
    ids=["post-ln", "pre-ln"] + POSITIONS[1:],
)
def test_cached_decoding_equals_full_forward(options):
    model = _model(**options)
    source = _source()
    target = _target(6)
    with torch.no_grad():
        full = F.log_softmax(model(source, target).logits, dim=-1)
        state = model.start(source)
        steps = []
        for t in range(target.shape[1]):
            out = model.step(target[:, t], state)
            steps.append(out.log_probs)
            state = out.state
    assert isinstance(model, Decodable)
    assert state.offset == 6
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)
    # the step's attention: last block's cross-attention over the source, averaged over heads
    assert out.attention.shape == (3, 7)
    torch.testing.assert_close(out.attention.sum(-1), torch.ones(3, device=DEVICE))
    assert torch.all(out.attention[1, 4:] == 0) and torch.all(out.attention[2, 2:] == 0)


def test_a_step_without_attention_gives_the_same_scores():
    model = _model()
    source, tokens = _source(), _target(4)
    with torch.no_grad():
        state_a, state_b = model.start(source), model.start(source)
        for t in range(tokens.shape[1]):
            a = model.step(tokens[:, t], state_a)
            b = model.step(tokens[:, t], state_b, need_attention=False)
            state_a, state_b = a.state, b.state
            torch.testing.assert_close(a.log_probs, b.log_probs, atol=1e-6, rtol=1e-6)
    assert a.attention is not None and b.attention is None


@pytest.mark.parametrize("positions", POSITIONS)
def test_future_target_tokens_do_not_change_past_logits(positions):
    model = _model(norm_first=True, positions=positions)
    source, target = _source(), _target(6)
    changed = target.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 4) % (VOCAB - 4) + 4
    before, after = model(source, target).logits, model(source, changed).logits
    torch.testing.assert_close(before[:, :4], after[:, :4])
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("positions", POSITIONS)
def test_source_padding_does_not_change_outputs(positions):
    model = _model(positions=positions)
    source, target = _source(), _target(5)
    padded = F.pad(source, (0, 4), value=0)  # four more padding columns
    base, more = model(source, target).logits, model(padded, target).logits
    torch.testing.assert_close(base, more, atol=1e-5, rtol=1e-5)
    alone = model(source[2:, :2], target[2:]).logits  # the short row without any padding
    torch.testing.assert_close(base[2:], alone, atol=1e-5, rtol=1e-5)


def test_attention_weights_have_named_shapes_and_leave_logits_alone():
    model = _model(num_encoder_layers=3)
    source, target = _source(), _target(5)
    plain = model(source, target)
    out = model(source, target, need_weights=True)
    assert plain.attention is None
    torch.testing.assert_close(out.logits, plain.logits)
    assert [tuple(w.shape) for w in out.attention["encoder"]] == [(3, 4, 7, 7)] * 3
    assert [tuple(w.shape) for w in out.attention["decoder"]] == [(3, 4, 5, 5)] * 2
    assert [tuple(w.shape) for w in out.attention["cross"]] == [(3, 4, 5, 7)] * 2
    for weights in out.attention["cross"] + out.attention["encoder"]:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))
        assert torch.all(weights[1, ..., 4:] == 0)
    assert all(torch.all(w.triu(1) == 0) for w in out.attention["decoder"])


def test_state_reorders_for_beam_search():
    model = _model()
    source, target = _source(), _target(4)
    with torch.no_grad():
        state = model.start(source)
        for t in range(3):
            state = model.step(target[:, t], state).state
        order = torch.tensor([2, 2, 0, 1], device=DEVICE)
        picked = select_state(state, order)
        assert isinstance(picked, TransformerState) and picked.offset == 3
        stepped = model.step(target[order, 3], picked).log_probs
        expected = F.log_softmax(model(source[order], target[order]).logits[:, 3], dim=-1)
    torch.testing.assert_close(stepped, expected, atol=1e-5, rtol=1e-5)


def test_embeddings_sharing_and_tying():
    shared = _model(share_embeddings=True)
    assert shared.source_embedding is shared.target_embedding
    assert shared.output.weight is shared.target_embedding.weight
    separate = Transformer(_tiny(target_vocab_size=11, tie_output=False))
    assert separate.output.weight.shape == (11, 16)
    assert separate.output.weight is not separate.target_embedding.weight
    assert torch.all(separate.source_embedding.weight[0] == 0)  # the padding row


def test_registered_and_rebuilt_from_its_config():
    model = _model()
    assert model_type_of(model) == "transformer"
    rebuilt = build_model("transformer", config_to_dict(model.config))
    assert rebuilt.config == model.config
    presets = TransformerConfig.base(100), TransformerConfig.small(100, 90)
    assert (presets[0].d_model, presets[0].num_encoder_layers, presets[0].d_ff) == (512, 6, 2048)
    assert presets[1].target_vocab_size == 90 and presets[1].uses_final_norm


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 18}, "d_model=18 is not divisible by num_heads=4"),
        ({"share_embeddings": True, "target_vocab_size": 30}, "share_embeddings=True"),
        ({"activation": "tanh"}, "activation='tanh'"),
        ({"positions": "rotary"}, "positions='rotary'"),
        ({"positions": "rope", "d_model": 12}, "head_dim=3 must be a positive even integer"),
        ({"dropout": 1.5}, "dropout=1.5"),
        ({"num_decoder_layers": 0}, "num_decoder_layers=0"),
        ({"pad_id": 40}, "pad_id=40"),
    ],
)
def test_bad_configs_raise_early(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _tiny(**overrides)


def test_bad_inputs_raise():
    model = _model(positions="learned", max_len=8)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(_target(7, batch=1)[0], _target(3, batch=1))
    with pytest.raises(ValueError, match="max_len=8"):
        model(_target(9, batch=1), _target(3, batch=1))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        model.step(_target(1, batch=2), model.start(_target(3, batch=2)))


def test_tiny_model_learns_to_reverse():
    torch.manual_seed(0)
    model = Transformer(_tiny(d_model=32, d_ff=64, norm_first=True, max_len=16))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        source = torch.randint(4, 10, (32, 5))
        target = torch.cat([torch.ones(32, 1, dtype=torch.long), source.flip(1)], 1)
        logits = model(source, target[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), target[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.3


OLD_CHECKPOINT = Path(__file__).parent / "data" / "transformer_learned_concat_64dce43"


def test_a_checkpoint_saved_before_positions_became_components_still_loads():
    """Written by the code of commit 64dce43 (``make.py`` beside it), when learned positions
    were one class with a ``mode``: the same weights load by name and give the same logits."""
    checkpoint = load_checkpoint(OLD_CHECKPOINT, load_tokenizers=False)
    assert checkpoint.config.positions == "learned_concat"
    saved = checkpoint.metadata
    with torch.no_grad():
        logits = checkpoint.model(torch.tensor(saved["source"]), torch.tensor(saved["target"]))
    torch.testing.assert_close(logits.logits, torch.tensor(saved["logits"]))


def test_position_kinds_keep_their_checkpoint_layout():
    keys = {kind: list(_model(positions=kind).state_dict()) for kind in POSITIONS}
    learned = ["source_positions.embedding.weight", "target_positions.embedding.weight"]
    assert [key for key in keys["learned"] if "positions" in key] == learned
    concat = [key for key in keys["learned_concat"] if "positions" in key]
    assert concat == [
        f"{side}_positions.{name}"
        for side in ("source", "target")
        for name in ("embedding.weight", "projection.weight", "projection.bias")
    ]
    # sinusoidal, RoPE and ALiBi carry no state: the same keys, the blocks' only
    assert keys["rope"] == keys["alibi"] == keys["sinusoidal"]
    assert not [key for key in keys["sinusoidal"] if "positions" in key]


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_attention_positions_act_in_self_attention_only(kind):
    model = _model(positions=kind)
    shared = model.encoder.layers[0].self_attention.positions
    assert type(shared) is {"rope": RotaryEmbedding, "alibi": ALiBi}[kind]
    for stack in (model.encoder, model.decoder):
        assert all(block.self_attention.positions is shared for block in stack.layers)
    assert all(block.cross_attention.positions is None for block in model.decoder.layers)
    assert isinstance(model.source_positions, NoInputPositions)


def test_decoder_weights_flag_none_last_or_all():
    model = _model(num_decoder_layers=3)
    source, target = _source(), _target(4)
    encoded = model.encode(source)
    x = model.target_embedding(target)

    def run(flag):
        return model.decoder(x, encoded.memory, memory_mask=encoded.source_mask, need_weights=flag)

    plain, last, every = run(False), run("last"), run(True)
    assert plain.alignment is None and plain.self_attention is None
    assert last.self_attention is None and last.cross_attention is None
    assert len(every.self_attention) == len(every.cross_attention) == 3
    torch.testing.assert_close(last.alignment, every.cross_attention[-1])
    torch.testing.assert_close(every.alignment, every.cross_attention[-1])
    for out in (last, every):
        torch.testing.assert_close(out.hidden, plain.hidden)
    with pytest.raises(ValueError, match="need_weights='first'"):
        run("first")


@pytest.mark.cuda
@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_greedy_decoding_equals_uncached(positions):
    """greedy_search through the KV-cached step protocol gives the tokens and scores of a
    greedy loop that reruns the whole prefix through the full forward at every step."""
    model = _model(seed=3, positions=positions, norm_first=True, tie_output=False)
    with torch.no_grad():  # untrained tied logits favour repeating the input token
        model.output.weight.normal_(0.0, 1.0)
    source, bos, eos, steps = _source(), 1, 16, 10  # 16: some rows end early, some do not
    cached = greedy_search(model, source, max_len=steps, bos_id=bos, eos_id=eos)
    prefix = torch.full((source.shape[0], 1), bos, device=DEVICE)
    total = torch.zeros(source.shape[0], device=DEVICE)
    with torch.no_grad():
        for _ in range(steps):
            log_probs = F.log_softmax(model(source, prefix).logits[:, -1].float(), dim=-1)
            best, token = log_probs.max(dim=-1)
            total += torch.where((prefix == eos).any(dim=1), 0.0, best)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
    for row, generated in enumerate(prefix[:, 1:].tolist()):
        expected = generated[: generated.index(eos)] if eos in generated else generated
        assert cached.tokens[row] == expected
    assert cached.scores == pytest.approx(total.tolist(), abs=1e-4)
