"""The Transformer's dropout sites, each with its own rate: embeddings + residual branches
(``dropout``), attention weights (``attention_dropout``), the feed-forward activation
(``activation_dropout``) and whole-word dropout (``word_dropout``).  Every site is off in
eval mode, on in train mode only where its rate is set, and old configs behave as before."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from qkv.errors import InputError
from qkv.layers.blocks import DecoderBlock, EncoderBlock
from qkv.layers.multihead import MultiHeadAttention
from qkv.models.transformer import Transformer
from qkv.models.transformer_config import TransformerConfig
from qkv.training.checkpoint import load_checkpoint

VOCAB, PAD, BOS = 29, 0, 1
OLD_CHECKPOINT = Path(__file__).parent / "data" / "transformer_learned_concat_64dce43"
SITES = ("dropout", "attention_dropout", "activation_dropout", "word_dropout")


def _config(**rates: float) -> TransformerConfig:
    """A tiny model with every dropout site at 0 unless given."""
    fields = dict(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32)
    return TransformerConfig(VOCAB, **fields, **{**{site: 0.0 for site in SITES}, **rates})


def _twin(config: TransformerConfig, reference: Transformer) -> Transformer:
    """A model built from ``config`` holding ``reference``'s weights."""
    model = Transformer(config)
    model.load_state_dict(reference.state_dict())
    return model


def _batch(batch: int = 4, length: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    source = torch.randint(4, VOCAB, (batch, length), generator=generator)
    target = torch.randint(4, VOCAB, (batch, length), generator=generator)
    source[1, 5:] = PAD
    target[:, 0] = BOS
    target[2, 6:] = PAD
    return source, target


def test_unset_attention_and_activation_rates_follow_dropout():
    model = Transformer(TransformerConfig(VOCAB, d_model=16, num_heads=4, d_ff=32, dropout=0.3))
    for block in [*model.encoder.layers, *model.decoder.layers]:
        assert block.dropout.p == block.feed_forward.dropout.p == 0.3
        assert block.self_attention.dropout == 0.3
    model = Transformer(
        TransformerConfig(VOCAB, d_model=16, num_heads=4, d_ff=32, dropout=0.3).replace(
            attention_dropout=0.1, activation_dropout=0.2
        )
    )
    block = model.decoder.layers[0]
    assert (block.dropout.p, block.feed_forward.dropout.p) == (0.3, 0.2)
    assert block.self_attention.dropout == block.cross_attention.dropout == 0.1


@pytest.mark.parametrize("block_class", [EncoderBlock, DecoderBlock])
def test_blocks_take_the_rates_as_keywords(block_class):
    block = block_class(16, 4, 32, dropout=0.1, attention_dropout=0.2, activation_dropout=0.3)
    assert (block.dropout.p, block.self_attention.dropout, block.feed_forward.dropout.p) == (
        0.1,
        0.2,
        0.3,
    )
    with pytest.raises(InputError, match="activation_dropout=1.5"):
        block_class(16, 4, 32, activation_dropout=1.5)
    with pytest.raises(InputError, match="attention_dropout=-0.1"):
        block_class(16, 4, 32, attention_dropout=-0.1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attention_dropout", 1.0),
        ("activation_dropout", -0.2),
        ("word_dropout", 1.0),
        ("word_dropout", None),
        ("attention_dropout", "0.3"),
        ("bos_id", VOCAB),
        ("bos_id", PAD),
    ],
)
def test_config_names_a_bad_rate(field, value):
    with pytest.raises(InputError, match=field):
        _config(**{field: value})


def test_every_site_is_off_in_eval_mode():
    torch.manual_seed(0)
    quiet = Transformer(_config())
    noisy = _twin(_config(**{site: 0.5 for site in SITES}), quiet)
    source, target = _batch()
    quiet.eval()
    noisy.eval()
    with torch.no_grad():
        expected = quiet(source, target).logits
        first, second = noisy(source, target).logits, noisy(source, target).logits
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(first, expected, rtol=0, atol=0)
    noisy.train()
    with torch.no_grad():
        assert not torch.allclose(noisy(source, target).logits, expected)  # the sites are live


def _changed_sites(model: Transformer) -> set[str]:
    """Run one training-mode forward and name the sites whose activations it changed:
    "embedding" / "residual" / "activation" when an ``nn.Dropout`` there changed its input,
    "attention" when a multi-head attention's output differs from the same module's
    eval-mode output on the same inputs, "word" when the vectors entering the positions
    differ from the scaled token embeddings."""
    changed: set[str] = set()
    calls: list[tuple[nn.Module, tuple, dict, torch.Tensor]] = []
    handles = []

    def dropout_hook(site: str):
        def hook(module, args, output):
            if not torch.equal(args[0], output):
                changed.add(site)

        return hook

    def attention_hook(module, args, kwargs, output):
        calls.append((module, args, kwargs, output[0]))

    def positions_hook(embedding: nn.Embedding):
        def hook(module, args):
            tokens = hook.tokens.pop(0)
            if not torch.equal(args[0], embedding(tokens) * model.embedding_scale):
                changed.add("word")

        hook.tokens = []
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            site = "embedding" if "positions" in name else "residual"
            site = "activation" if "feed_forward" in name else site
            handles.append(module.register_forward_hook(dropout_hook(site)))
        elif isinstance(module, MultiHeadAttention):
            handles.append(module.register_forward_hook(attention_hook, with_kwargs=True))
    source_hook = positions_hook(model.source_embedding)
    target_hook = positions_hook(model.target_embedding)
    handles.append(model.source_positions.register_forward_pre_hook(source_hook))
    handles.append(model.target_positions.register_forward_pre_hook(target_hook))
    source, target = _batch(batch=8, length=12)
    source_hook.tokens.append(source)
    target_hook.tokens.append(target)
    model.train()
    with torch.no_grad():
        model(source, target)
        for handle in handles:
            handle.remove()
        model.eval()
        for module, args, kwargs, output in calls:
            if not torch.equal(module(*args, **kwargs)[0], output):
                changed.add("attention")
    return changed


@pytest.mark.parametrize(
    ("site", "expected"),
    [
        ("dropout", {"embedding", "residual"}),
        ("attention_dropout", {"attention"}),
        ("activation_dropout", {"activation"}),
        ("word_dropout", {"word"}),
    ],
)
def test_in_train_mode_only_the_set_site_acts(site, expected):
    torch.manual_seed(1)
    assert _changed_sites(Transformer(_config(**{site: 0.5}))) == expected


def test_with_every_rate_zero_training_changes_nothing():
    torch.manual_seed(2)
    assert _changed_sites(Transformer(_config())) == set()


def test_the_site_detector_sees_every_site_at_once():
    torch.manual_seed(3)
    every_site = {"embedding", "residual", "attention", "activation", "word"}
    assert _changed_sites(Transformer(_config(**{site: 0.5 for site in SITES}))) == every_site


def _words_kept(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: which tokens reached the source positions with their embedding intact."""
    seen = []
    handle = model.source_positions.register_forward_pre_hook(lambda m, args: seen.append(args))
    with torch.no_grad():
        model.encode(tokens)
    handle.remove()
    expected = model.source_embedding(tokens) * model.embedding_scale
    arrived = seen[0][0]
    dropped = (arrived == 0).all(dim=-1)
    assert torch.equal(arrived[~dropped], expected[~dropped])  # the rest pass unchanged
    return ~dropped


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_word_dropout_drops_the_stated_fraction_never_pad_or_bos(rate):
    torch.manual_seed(4)
    model = Transformer(_config(word_dropout=rate)).train()
    with torch.no_grad():  # a non-zero padding row, so dropping padding would show
        model.source_embedding.weight[PAD].fill_(1.0)
    tokens = torch.randint(4, VOCAB, (256, 200))
    tokens[:, 0] = BOS
    tokens[::2, 150:] = PAD
    kept = _words_kept(model, tokens)
    special = (tokens == PAD) | (tokens == BOS)
    assert kept[special].all()
    words = int((~special).sum())  # 256 * 199 - 128 * 50 = 44,544
    fraction = 1 - kept[~special].float().mean().item()
    # six binomial standard deviations: a false alarm about once in 10^9 runs
    assert abs(fraction - rate) < 6 * math.sqrt(rate * (1 - rate) / words)


def test_word_dropout_differs_between_calls_and_is_off_in_eval():
    torch.manual_seed(5)
    model = Transformer(_config(word_dropout=0.3)).train()
    tokens = torch.randint(4, VOCAB, (16, 40))
    assert not torch.equal(_words_kept(model, tokens), _words_kept(model, tokens))
    assert _words_kept(model.eval(), tokens).all()


def test_a_checkpoint_saved_before_the_dropout_sites_still_loads():
    """The fixture's config dict has none of the new fields: they take their defaults (the
    attention and activation rates follow ``dropout``, no word dropout), so the model
    gives the logits it gave when it was saved."""
    checkpoint = load_checkpoint(OLD_CHECKPOINT, load_tokenizers=False)
    config = checkpoint.config
    assert (config.attention_dropout, config.activation_dropout) == (None, None)
    assert config.word_dropout == 0.0
    saved = checkpoint.metadata
    with torch.no_grad():
        logits = checkpoint.model(torch.tensor(saved["source"]), torch.tensor(saved["target"]))
    torch.testing.assert_close(logits.logits, torch.tensor(saved["logits"]))
    block = checkpoint.model.encoder.layers[0]
    assert block.self_attention.dropout == block.feed_forward.dropout.p == config.dropout
