"""The Show, Attend and Tell captioner: encoder and decoder shapes, attention properties, the
doubly stochastic regulariser against a hand computation, teacher forcing against step-by-step
decoding, overfitting generated scenes, the no-attention baseline, grounding helpers, errors."""

import importlib.machinery
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv.data.captions import CaptionDataset, WordVocab, collate_captions
from qkv.data.scenes import scene_dataset
from qkv.decoding import beam_search, greedy_search
from qkv.layers.cnn import SmallResNet, feature_map_to_regions
from qkv.models import build_model, captioner_config, model_type_of, select_state
from qkv.models.captioner import (
    Captioner,
    CaptionerConfig,
    CaptionerState,
    doubly_stochastic_penalty,
)
from qkv.models.captioner_grounding import (
    attention_mass_in_box,
    box_area_fraction,
    cell_boxes,
)


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: one thread is fastest, and never waits on a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SMALL = dict(feature_dim=16, embedding_dim=12, hidden_dim=20, attention_dim=10)


def tiny(**changes) -> Captioner:
    torch.manual_seed(0)
    fields = dict(vocab_size=11, image_size=32, grid=4, **SMALL)
    fields.update(changes)
    return Captioner(CaptionerConfig(**fields))


def captions(batch_size: int = 3, length: int = 6, vocab_size: int = 11) -> torch.Tensor:
    """target_input rows <s> w .. w [</s> pad ..] of different lengths."""
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, vocab_size, (batch_size, length), generator=generator)
    tokens[:, 0] = 1
    for row in range(1, batch_size):  # shorter rows: </s> then padding
        end = length - 2 * row
        tokens[row, end] = 2
        tokens[row, end + 1 :] = 0
    return tokens


# -- shapes ------------------------------------------------------------------------------------


def test_encoder_gives_grid_regions_for_any_image_size():
    model = tiny(image_size=64, grid=8).eval()
    assert SmallResNet.downsamples_for(64, 8) == 3
    for size in (64, 48, 100):
        regions = model.encode(torch.rand(2, 3, size, size))
        assert regions.shape == (2, 64, 16), size
    assert model.encode(torch.rand(1, 3, 40, 56)).shape == (1, 64, 16)  # not even square
    # region p = row * grid + column, batch-first
    feature_map = torch.arange(2 * 3 * 2 * 2.0).view(2, 3, 2, 2)  # (B, D, g, g)
    regions = feature_map_to_regions(feature_map)
    assert regions.shape == (2, 4, 3)
    assert torch.equal(regions[1, 2], feature_map[1, :, 1, 0])


def test_forward_and_step_shapes_and_weights_sum_to_one():
    model = tiny().eval()
    images, target_input = torch.rand(3, 3, 32, 32), captions()
    output = model(images, target_input, need_weights=True)
    assert output.logits.shape == (3, 6, 11)
    (weights,) = output.attention["cross"]
    assert weights.shape == (3, 6, 16)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    assert model(images, target_input).attention is None

    state = model.start(images)
    assert isinstance(state, CaptionerState)
    assert state.hidden.shape == state.cell.shape == (3, 20)
    step = model.step(torch.tensor([1, 1, 1]), state)
    assert step.log_probs.shape == (3, 11) and step.attention.shape == (3, 16)
    torch.testing.assert_close(step.log_probs.exp().sum(-1), torch.ones(3))
    torch.testing.assert_close(step.attention.sum(-1), torch.ones(3))


# -- the doubly stochastic regulariser ------------------------------------------------------------


def test_penalty_matches_a_hand_computation():
    weights = torch.tensor(
        [[[0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [1.0, 0.0, 0.0]]]
    )  # (B=1, T=3, P=3); the third step reads padding and does not count
    steps = torch.tensor([[True, True, False]])
    # sum_t alpha = (0.7, 0.45, 0.85) -> 0.3^2 + 0.55^2 + 0.15^2
    expected = 0.09 + 0.3025 + 0.0225
    torch.testing.assert_close(doubly_stochastic_penalty(weights, steps), torch.tensor([expected]))


def test_aux_loss_is_lambda_times_penalty_per_predicted_token():
    lam = 0.7
    model = tiny(doubly_stochastic=lam).eval()
    images, target_input = torch.rand(3, 3, 32, 32), captions()
    output = model(images, target_input, need_weights=True)
    weights = output.attention["cross"][0].detach()
    total, tokens = 0.0, 0
    for row in range(3):  # written out: count the steps whose input is neither </s> nor pad
        real = [t for t in range(6) if int(target_input[row, t]) not in (0, 2)]
        tokens += len(real)
        looked = [sum(float(weights[row, t, p]) for t in real) for p in range(16)]
        total += sum((1 - s) ** 2 for s in looked)
    assert tokens == 6 + 4 + 2
    assert output.aux_loss.item() == pytest.approx(lam * total / tokens, rel=1e-5)
    assert tiny(doubly_stochastic=0.0)(images, target_input).aux_loss is None


def test_aux_loss_gradient_reaches_the_attention():
    model = tiny()
    model(torch.rand(2, 3, 32, 32), captions(2)).aux_loss.backward()
    assert model.attention.score.query_proj.weight.grad.abs().sum() > 0


# -- decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["additive", "general", "dot", "scaled_dot"])
def test_teacher_forcing_equals_step_by_step(score):
    model = tiny(score=score, dropout=0.3).eval()
    images, target_input = torch.rand(3, 3, 32, 32), captions()
    with torch.no_grad():
        output = model(images, target_input, need_weights=True)
        state = model.start(images)
        for t in range(target_input.shape[1]):
            step = model.step(target_input[:, t], state)
            state = step.state
            torch.testing.assert_close(step.log_probs, F.log_softmax(output.logits[:, t], -1))
            torch.testing.assert_close(step.attention, output.attention["cross"][0][:, t])


def test_state_reorders_for_beam_search():
    model = tiny().eval()
    images = torch.rand(3, 3, 32, 32)
    tokens = torch.tensor([1, 5, 7])
    order = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        state = model.step(tokens, model.start(images)).state
        reordered = model.step(tokens[order], select_state(state, order))
        plain = model.step(tokens, state)
    torch.testing.assert_close(reordered.log_probs, plain.log_probs[order])
    torch.testing.assert_close(reordered.attention, plain.attention[order])


def test_gate_is_a_scalar_in_zero_one():
    images, target_input = torch.rand(3, 3, 32, 32), captions()
    gates = tiny().decode_teacher_forced(images, target_input).gates
    assert gates.shape == (3, 6)
    assert ((gates > 0) & (gates < 1)).all()
    ungated = tiny(gate=False).decode_teacher_forced(images, target_input).gates
    assert torch.equal(ungated, torch.ones(3, 6))


@pytest.mark.slow
def test_tiny_captioner_overfits_scenes_to_exact_captions():
    examples = scene_dataset("train", size=8, image_size=32)
    vocab = WordVocab.build(caption for e in examples for caption in e.captions)
    data = CaptionDataset(examples, vocab, per_caption=False)  # the first caption of each
    batch = collate_captions([data[i] for i in range(len(data))])
    torch.manual_seed(0)
    config = CaptionerConfig(
        vocab_size=len(vocab),
        image_size=32,
        grid=4,
        feature_dim=32,
        embedding_dim=32,
        hidden_dim=64,
        attention_dim=64,
        dropout=0.0,
    )
    model = build_model("captioner", config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    decoded = []
    for step in range(1, 301):
        model.train()
        output = model(batch.source, batch.target_input)
        loss = F.cross_entropy(
            output.logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=0
        )
        optimizer.zero_grad()
        (loss + output.aux_loss).backward()
        optimizer.step()
        if step % 20 == 0:
            model.eval()
            found = greedy_search(model, batch.source, max_len=config.max_len)
            decoded = [vocab.decode(tokens) for tokens in found.tokens]
            if decoded == [e.captions[0] for e in examples]:
                break
    assert decoded == [e.captions[0] for e in examples], (step, decoded)


def test_baseline_without_attention_trains_and_decodes():
    model = tiny(attention=False)
    assert not [name for name, _ in model.named_parameters() if "attention" in name]
    images, target_input = torch.rand(3, 3, 32, 32), captions()
    target_output = torch.cat([target_input[:, 1:], torch.full((3, 1), 2)], dim=1)
    target_output[target_input == 2] = 0
    target_output[target_input == 0] = 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        output = model(images, target_input, need_weights=True)
        assert output.attention is None and output.aux_loss is None
        loss = F.cross_entropy(output.logits.flatten(0, 1), target_output.flatten(), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    step = model.step(torch.tensor([1, 1, 1]), model.start(images))
    assert step.log_probs.shape == (3, 11) and step.attention is None
    found = greedy_search(model, images, max_len=8)
    assert len(found.tokens) == 3 and all(1 <= len(tokens) <= 8 for tokens in found.tokens)


def test_registered_and_rebuilt_from_a_dict():
    model = build_model("captioner", dict(vocab_size=9, image_size=32, grid=4, **SMALL))
    assert isinstance(model, Captioner) and model_type_of(model) == "captioner"
    assert model.config.num_regions == 16


# -- grounding ---------------------------------------------------------------------------------


def test_attention_mass_in_box_by_hand():
    # image 4 x 4, grid 2: cells of 2 x 2 pixels; the box covers half of cells 0 and 1
    assert cell_boxes(4, 2) == [(0, 0, 2, 2), (2, 0, 4, 2), (0, 2, 2, 4), (2, 2, 4, 4)]
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert attention_mass_in_box(weights, (1, 0, 3, 2), 4, 2) == pytest.approx(
        0.5 * 0.1 + 0.5 * 0.2
    )
    assert attention_mass_in_box(weights, (0, 0, 4, 4), 4, 2) == pytest.approx(1.0)
    assert attention_mass_in_box([0, 0, 0, 1.0], (2, 2, 4, 4), 4, 2) == pytest.approx(1.0)


def test_uniform_attention_gives_the_box_area_fraction():
    boxes = cell_boxes(64, 8)
    assert len(boxes) == 64 and boxes[0] == (0, 0, 8, 8) and boxes[-1] == (56, 56, 64, 64)
    uniform = torch.full((64,), 1 / 64)
    scene_boxes = [obj.box for e in scene_dataset("train", size=6) for obj in e.objects]
    for box in [(3, 5, 17, 30), (0, 0, 64, 64), *scene_boxes]:
        fraction = box_area_fraction(box, 64)
        assert fraction == pytest.approx((box[2] - box[0]) * (box[3] - box[1]) / 64**2)
        assert attention_mass_in_box(uniform, box, 64, 8) == pytest.approx(fraction, abs=1e-12)
    assert box_area_fraction((60, 60, 70, 70), 64) == pytest.approx(16 / 64**2)  # clipped


# -- errors and the optional torchvision encoder -------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(score="cosine"), "unknown|not a known score"),
        (dict(encoder="vgg"), "encoder='vgg' is unknown"),
        (dict(grid=40), "cannot exceed image_size"),
        (dict(dropout=1.0), "dropout"),
        (dict(doubly_stochastic=-1.0), "doubly_stochastic"),
        (dict(pad_id=11), "pad_id"),
        (dict(pretrained_encoder=True), "torchvision encoder"),
        (dict(hidden_dim=0), "hidden_dim"),
    ],
)
def test_bad_configs_raise_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        CaptionerConfig(**{"vocab_size": 11, "image_size": 32, **changes})


def test_torchvision_encoder_without_torchvision_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(captioner_config, "torchvision_available", lambda: False)
    with pytest.raises(ValueError, match="needs the optional torchvision package"):
        CaptionerConfig(vocab_size=11, encoder="torchvision:resnet18")


def test_bad_inputs_raise_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match="RGB"):
        model.start(torch.rand(2, 1, 32, 32))
    with pytest.raises(TypeError, match="floats"):
        model.start(torch.zeros(2, 3, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="share B"):
        model(torch.rand(2, 3, 32, 32), captions(3))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        model.step(torch.tensor([[1]]), model.start(torch.rand(1, 3, 32, 32)))


class _FakeResNet(nn.Module):
    """The attribute layout of a torchvision ResNet, in miniature (stride 32, 24 channels)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1, self.relu, self.maxpool = nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
        self.layer1 = nn.Conv2d(8, 8, 3, padding=1)
        self.layer2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.layer3 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.layer4 = nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(24, 10)


def test_torchvision_adapter_takes_the_trunk(monkeypatch):
    fake = types.ModuleType("torchvision")
    fake.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)
    fake.models = types.ModuleType("torchvision.models")
    asked = []
    fake.models.resnet18 = lambda weights: asked.append(weights) or _FakeResNet()
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    monkeypatch.setitem(sys.modules, "torchvision.models", fake.models)
    model = tiny(encoder="torchvision:resnet18", image_size=64, grid=2).eval()
    assert model.encode(torch.rand(2, 3, 64, 64)).shape == (2, 4, 16)  # 24 -> 16 by a 1x1 conv
    assert not any(
        isinstance(m, nn.Linear) and m.out_features == 10 for m in model.encoder.modules()
    )
    tiny(encoder="torchvision:resnet18", pretrained_encoder=True)
    assert asked == [None, "DEFAULT"]  # random init, then torchvision's ImageNet weights
    with pytest.raises(ValueError, match="has no network 'resnet999'"):
        tiny(encoder="torchvision:resnet999")


@pytest.mark.parametrize(
    "variant", ["attention_gate", "attention_no_gate", "mean_gate", "mean_no_gate"]
)
def test_a_checkpoint_written_before_the_components_loads_and_decodes_the_same(variant):
    """The fixture was saved when ``attention`` and ``gate`` were ``if``s in the recurrence:
    its weights load strictly (same keys) and give the same logits, alignments and beams."""
    saved = torch.load(Path(__file__).parent / "fixtures" / "captioner_before_components.pt")
    saved = saved[variant]
    model = build_model("captioner", saved["config"]).eval()
    model.load_state_dict(saved["state_dict"])  # strict
    with torch.no_grad():
        result = model(saved["images"], saved["target_input"], need_weights=True)
    torch.testing.assert_close(result.logits, saved["logits"])
    if saved["weights"] is None:
        assert result.attention is None
    else:
        torch.testing.assert_close(result.attention["cross"][0], saved["weights"])
    found = beam_search(model, saved["images"], beam_size=2, max_len=5)
    assert found.tokens == saved["beam_tokens"]
    assert found.scores == pytest.approx(saved["beam_scores"], abs=1e-5)
