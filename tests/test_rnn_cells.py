"""The Bahdanau decoder's cell-per-step recurrence: the same function as the nn.GRU/nn.LSTM it
replaced, checkpoints written before the change still load, gradients are right."""

from pathlib import Path

import pytest
import torch
from torch import nn

from qkv.layers.recurrent import EncoderStates
from qkv.models import build_model
from qkv.models.rnn_cells import cell_weights, step_cells
from qkv.models.rnn_decoders import BahdanauDecoder

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_stepping_the_cells_equals_running_the_stack(cell):
    torch.manual_seed(0)
    stack = {"gru": nn.GRU, "lstm": nn.LSTM}[cell](5, 4, num_layers=3, batch_first=True).eval()
    inputs = torch.randn(2, 6, 5)
    h0, c0 = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    expected, final = stack(inputs, (h0, c0) if cell == "lstm" else h0)
    hidden, memory = list(h0.unbind(0)), list(c0.unbind(0)) if cell == "lstm" else None
    weights = cell_weights(stack)
    outputs = []
    for t in range(inputs.shape[1]):
        hidden, memory = step_cells(stack, weights, inputs[:, t], hidden, memory)
        outputs.append(hidden[-1])
    torch.testing.assert_close(torch.stack(outputs, dim=1), expected)
    final_hidden = final[0] if cell == "lstm" else final
    torch.testing.assert_close(torch.stack(hidden), final_hidden)
    if cell == "lstm":
        torch.testing.assert_close(torch.stack(memory), final[1])


def test_dropout_between_layers_only_in_training():
    torch.manual_seed(0)
    stack = nn.GRU(3, 4, num_layers=2, dropout=0.5, batch_first=True)
    weights, inputs, hidden = cell_weights(stack), torch.randn(8, 3), [torch.zeros(8, 4)] * 2
    stack.eval()
    first, _ = step_cells(stack, weights, inputs, hidden, None)
    again, _ = step_cells(stack, weights, inputs, hidden, None)
    torch.testing.assert_close(first, again)
    stack.train()
    noisy = [step_cells(stack, weights, inputs, hidden, None)[0][1] for _ in range(2)]
    assert not torch.equal(noisy[0], noisy[1])  # the top layer reads dropped-out inputs
    torch.testing.assert_close(step_cells(stack, weights, inputs, hidden, None)[0][0], first[0])


@pytest.mark.parametrize("variant", ["gru2", "lstm1"])
def test_a_checkpoint_written_with_nn_gru_loads_and_gives_the_same_outputs(variant):
    """The fixture was saved by the previous implementation (one nn.GRU/nn.LSTM call per
    position) with its logits and alignments: same tensor names, same outputs."""
    saved = torch.load(FIXTURES / "rnn_additive_before_cells.pt")[variant]
    model = build_model("rnn-attention", saved["config"]).eval()
    assert list(model.state_dict()) == list(saved["state_dict"])
    model.load_state_dict(saved["state_dict"])  # strict
    with torch.no_grad():
        result = model(saved["source"], saved["target_input"], need_weights=True)
    torch.testing.assert_close(result.logits, saved["logits"])
    torch.testing.assert_close(result.attention["cross"][0], saved["weights"])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gradcheck_through_the_decoder_in_float64(cell):
    torch.manual_seed(0)
    decoder = BahdanauDecoder(
        embedding_dim=3, hidden_dim=4, context_dim=5, num_layers=2, cell=cell, dropout=0.0
    ).double()
    outputs = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    cell_state = torch.randn(2, 2, 4, dtype=torch.float64) if cell == "lstm" else None
    embedded = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[[True, True, True]], [[True, True, False]]])

    def run(outputs, hidden, embedded):
        encoded = EncoderStates(outputs, hidden, None)
        state = decoder.start(encoded, hidden, cell_state, mask)
        return decoder(embedded, state).features

    assert torch.autograd.gradcheck(run, (outputs, hidden, embedded))


def test_the_padding_of_the_source_gets_no_weight_and_no_gradient():
    torch.manual_seed(0)
    decoder = BahdanauDecoder(
        embedding_dim=3, hidden_dim=4, context_dim=5, num_layers=1, cell="gru", dropout=0.0
    )
    outputs = torch.randn(1, 4, 5, requires_grad=True)
    mask = torch.tensor([[[True, True, False, False]]])
    state = decoder.start(EncoderStates(outputs, None, None), torch.randn(1, 1, 4), None, mask)
    out = decoder(torch.randn(1, 3, 3), state)
    assert torch.equal(out.weights[..., 2:], torch.zeros(1, 3, 2))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, 3))
    out.features.sum().backward()
    assert torch.equal(outputs.grad[:, 2:], torch.zeros(1, 2, 5))
