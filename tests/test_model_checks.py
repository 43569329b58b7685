"""The checks every model shares (qkv.models.checks): one set of token-id dtypes for all
three translators' and the captioner's inputs, and the config validation helpers."""

import pytest
import torch

from qkv.errors import InputError
from qkv.models import build_model
from qkv.models.captioner_config import CaptionerConfig
from qkv.models.checks import TOKEN_ID_DTYPES, TokenDtypeError, check_token_ids
from qkv.models.rnn_config import RNNConfig
from qkv.models.transformer_config import TransformerConfig


def _models():
    torch.manual_seed(0)
    tiny_transformer = TransformerConfig(
        11, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=8
    )
    images = torch.rand(2, 3, 16, 16)
    source = torch.tensor([[4, 5, 6], [7, 8, 9]])
    captioner = CaptionerConfig(11, image_size=16, grid=4, feature_dim=8, hidden_dim=6)
    return [
        ("transformer", build_model("transformer", tiny_transformer), source),
        (
            "rnn-attention",
            build_model("rnn-attention", RNNConfig(11, embedding_dim=6, hidden_dim=5)),
            source,
        ),
        ("rnn", build_model("rnn", RNNConfig(11, embedding_dim=6, hidden_dim=5)), source),
        ("captioner", build_model("captioner", captioner), images),
    ]


@pytest.mark.parametrize(
    "name, model, source", _models(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_model_accepts_the_same_token_dtypes_and_refuses_the_rest(name, model, source):
    target = torch.tensor([[1, 4, 5], [1, 6, 0]])
    logits = {dtype: model.eval()(source, target.to(dtype)).logits for dtype in TOKEN_ID_DTYPES}
    torch.testing.assert_close(logits[torch.int32], logits[torch.int64])
    for dtype in (torch.int16, torch.uint8, torch.float32, torch.bool):
        with pytest.raises(TokenDtypeError, match="torch.int64 or torch.int32"):
            model(source, target.to(dtype))
    with pytest.raises(InputError, match=r"shape \(B, T\)"):
        model(source, target[0])
    with pytest.raises(InputError, match="empty"):
        model(source, target[:, :0])


def test_a_wrong_dtype_is_both_qkvs_error_and_a_type_error():
    with pytest.raises(InputError) as raised:
        check_token_ids(torch.zeros(1, 2), "tokens")
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)
    check_token_ids(torch.zeros(1, 2, dtype=torch.int32), "tokens")  # accepted, no error


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RNNConfig(0), "source_vocab_size=0 must be a positive integer"),
        (lambda: TransformerConfig(0), "source_vocab_size=0 must be a positive integer"),
        (lambda: RNNConfig(10, hidden_dim=True), "hidden_dim=True must be a positive integer"),
        (lambda: RNNConfig(10, attention_dim=0), "attention_dim=0 must be a positive integer"),
        (lambda: TransformerConfig(10, num_encoder_layers=-1), "must be a non-negative integer"),
        (lambda: RNNConfig(10, dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (lambda: TransformerConfig(10, dropout=-0.1), r"dropout=-0.1 must be in \[0, 1\)"),
        (lambda: RNNConfig(10, 12, share_embeddings=True), "needs one vocabulary"),
        (lambda: TransformerConfig(10, 12, share_embeddings=True), "needs one vocabulary"),
        (lambda: RNNConfig(10, pad_id=10), "pad_id=10 must be a token id of both"),
        (lambda: TransformerConfig(10, 8, pad_id=9), "pad_id=9 must be a token id of both"),
    ],
)
def test_both_translator_configs_validate_alike(make, message):
    with pytest.raises(InputError, match=message):
        make()


def test_an_encoder_free_transformer_is_allowed_but_not_a_decoder_free_one():
    TransformerConfig(10, num_encoder_layers=0)
    with pytest.raises(ValueError, match="needs a decoder"):
        TransformerConfig(10, num_decoder_layers=0)
