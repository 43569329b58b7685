"""attn_implementation="qkv": every architecture equals transformers' own "eager".

Random-weight models from transformers' config classes (1-2 layers, width 32), one copy
under "eager" and one under "qkv" with the same weights: outputs at the real (unpadded)
positions to 1e-5, every parameter's gradient to 1e-4 relative, and output_attentions
weights at the real query rows.  (A padded query that may see no key gets zeros from qkv;
eager averages every value there: those rows are nobody's output.)  Block masks use tiles
of 4 so that windows and packed documents of 24 tokens run on the block-skipping kernel.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from qkv.errors import InputError, MissingDependencyError  # noqa: E402
from qkv.integrations.transformers import attention as qkv_attention  # noqa: E402
from qkv.integrations.transformers import check_model, enable, register  # noqa: E402
from qkv.integrations.transformers.masks import PatternMask  # noqa: E402

VOCAB, T, TILE = 64, 24, 4


@pytest.fixture(autouse=True, scope="module")
def registered():
    transformers.logging.set_verbosity_error()
    register(block_size=TILE)
    yield
    register()


def ids(batch: int = 2, length: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def padding(batch: int = 2, length: int = T, real: tuple[int, ...] = (T, 15)) -> torch.Tensor:
    """Right padding: row r has real[r] real tokens."""
    return (torch.arange(length) < torch.tensor(real)[:, None]).long()


def pixels(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def packed_positions(documents: int = 3) -> torch.Tensor:
    return torch.arange(T // documents).repeat(documents)[None]


DECODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, intermediate_size=64)
GQA = dict(num_attention_heads=4, num_key_value_heads=2)
VISION = dict(
    hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
    image_size=16, patch_size=4,
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One architecture: its config, model class, inputs and the outputs compared (with the
    input whose padding marks their real rows)."""

    config: Any
    model: str
    inputs: dict[str, Any]
    outputs: tuple[tuple[str, str | None], ...] = (("logits", "attention_mask"),)
    extra: dict[str, Any] = field(default_factory=dict)


def cases() -> dict[str, Case]:
    t = transformers
    seq2seq = (
        ("logits", None),
        ("encoder_last_hidden_state", "attention_mask"),
    )
    return {
        "bert": Case(
            t.BertConfig(
                vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64,
            ),
            "BertModel",
            dict(input_ids=ids(), attention_mask=padding()),
            (("last_hidden_state", "attention_mask"),),
        ),
        "modernbert": Case(
            t.ModernBertConfig(
                vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, global_attn_every_n_layers=2, local_attention=6,
                pad_token_id=0,
            ),
            "ModernBertModel",
            dict(input_ids=ids(), attention_mask=padding()),
            (("last_hidden_state", "attention_mask"),),
        ),
        "gpt2": Case(
            t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64),
            "GPT2LMHeadModel",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "llama": Case(
            t.LlamaConfig(**DECODER, **GQA), "LlamaForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "mistral": Case(
            t.MistralConfig(**DECODER, **GQA, sliding_window=5), "MistralForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "qwen2": Case(
            t.Qwen2Config(
                **DECODER, **GQA, use_sliding_window=True, sliding_window=5, max_window_layers=1,
            ),
            "Qwen2ForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "gemma2": Case(
            t.Gemma2Config(
                **DECODER, **GQA, head_dim=8, sliding_window=5, attn_logit_softcapping=1.5,
                query_pre_attn_scalar=2,
            ),
            "Gemma2ForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "gemma3": Case(
            t.Gemma3TextConfig(**DECODER, **GQA, head_dim=8, sliding_window=5),
            "Gemma3ForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "gpt_oss": Case(
            t.GptOssConfig(
                **{**DECODER, "intermediate_size": 32}, **GQA, head_dim=8, sliding_window=5,
                num_local_experts=2, num_experts_per_tok=1,
            ),
            "GptOssForCausalLM",
            dict(input_ids=ids(), attention_mask=padding()),
        ),
        "t5gemma": Case(
            t.T5GemmaConfig(
                encoder=dict(**DECODER, **GQA, head_dim=8, sliding_window=5),
                decoder=dict(**DECODER, **GQA, head_dim=8, sliding_window=5),
                attn_logit_softcapping=1.5,
            ),
            "T5GemmaForConditionalGeneration",
            dict(input_ids=ids(), attention_mask=padding(), decoder_input_ids=ids(2, 20, 3)),
            seq2seq,
        ),
        "t5": Case(
            t.T5Config(
                vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                relative_attention_num_buckets=8,
            ),
            "T5ForConditionalGeneration",
            dict(input_ids=ids(), attention_mask=padding(), decoder_input_ids=ids(2, 20, 3)),
            seq2seq,
        ),
        "bart": Case(
            t.BartConfig(
                vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                decoder_ffn_dim=64, max_position_embeddings=64,
            ),
            "BartForConditionalGeneration",
            dict(input_ids=ids(), attention_mask=padding(), decoder_input_ids=ids(2, 20, 3)),
            seq2seq,
        ),
        "vit": Case(
            t.ViTConfig(**VISION), "ViTModel", dict(pixel_values=pixels()),
            (("last_hidden_state", None),),
        ),
        "clip": Case(
            t.CLIPConfig(
                text_config=dict(
                    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32,
                ),
                vision_config=VISION,
                projection_dim=16,
            ),
            "CLIPModel",
            dict(input_ids=ids(), attention_mask=padding(), pixel_values=pixels()),
            (("text_embeds", None), ("image_embeds", None)),
        ),
    }  # fmt: skip


CASES = cases()


def pair(case: Case):
    """The same random model under "eager" and under "qkv", in eval mode (no dropout)."""
    torch.manual_seed(0)
    cls = getattr(transformers, case.model)
    eager = cls._from_config(copy.deepcopy(case.config), attn_implementation="eager").eval()
    ours = cls._from_config(copy.deepcopy(case.config), attn_implementation="qkv").eval()
    ours.load_state_dict(eager.state_dict())
    assert ours.config._attn_implementation == "qkv"
    return eager, ours


def compared(case: Case, out, inputs) -> list[torch.Tensor]:
    """The compared outputs, each at its real rows only."""
    tensors = []
    for name, rows in case.outputs:
        value = getattr(out, name)
        if rows is not None and rows in inputs:
            value = value[inputs[rows].bool()]
        tensors.append(value)
    return tensors


def run(case: Case, model, inputs, **kwargs):
    """(compared outputs, every parameter's gradient of a fixed random projection of them)."""
    model.zero_grad()
    out = model(**inputs, **kwargs)
    tensors = compared(case, out, inputs)
    generator = torch.Generator().manual_seed(2)
    loss = sum((t * torch.randn(t.shape, generator=generator)).sum() for t in tensors)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return tensors, grads, out


def assert_same(case: Case, eager, ours, inputs, **kwargs):
    expected, expected_grads, _ = run(case, eager, inputs, **kwargs)
    got, got_grads, _ = run(case, ours, inputs, **kwargs)
    for e, g in zip(expected, got):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    assert_gradients_close(got_grads, expected_grads)


def assert_gradients_close(got: dict, expected: dict) -> None:
    """Each parameter's gradient within 1e-4 of its largest entry.  A gradient that is zero
    in exact arithmetic (a key bias: softmax ignores a shift of every score) is rounding
    noise in both implementations, so 1e-6 of the model's largest gradient is allowed too."""
    assert expected.keys() == got.keys()
    scale = max(float(e.abs().max()) for e in expected.values())
    for name, e in expected.items():
        error = float((got[name] - e).abs().max())
        bound = 1e-4 * float(e.abs().max()) + 1e-6 * scale
        assert error <= bound, f"{name}: gradient off by {error:.2e} (bound {bound:.2e})"


@pytest.mark.parametrize("name", list(CASES))
def test_outputs_and_gradients_equal_eager(name):
    case = CASES[name]
    eager, ours = pair(case)
    assert_same(case, eager, ours, case.inputs)


@pytest.mark.parametrize("name", [n for n in CASES if n not in ("vit", "clip")])
def test_output_attentions_equal_eager(name):
    case = CASES[name]
    eager, ours = pair(case)
    with torch.no_grad():
        expected = eager(**case.inputs, output_attentions=True)
        got = ours(**case.inputs, output_attentions=True)
    groups = [k for k in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions") if getattr(expected, k, None)]  # fmt: skip
    assert groups
    mask = case.inputs.get("attention_mask")
    for group in groups:
        for e, g in zip(getattr(expected, group), getattr(got, group), strict=True):
            assert g is not None and g.shape == e.shape
            if mask is not None and group in ("attentions", "encoder_attentions"):
                rows = mask.bool()  # (B, Tq): the real query rows
                e, g = e.transpose(1, 2)[rows], g.transpose(1, 2)[rows]
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_vision_attentions_equal_eager():
    for name in ("vit", "clip"):
        case = CASES[name]
        eager, ours = pair(case)
        with torch.no_grad():
            expected = eager(**case.inputs, output_attentions=True)
            got = ours(**case.inputs, output_attentions=True)
        if name == "clip":
            expected, got = expected.vision_model_output, got.vision_model_output
        for e, g in zip(expected.attentions, got.attentions, strict=True):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gemma3"])
def test_packed_documents_equal_eager_on_the_flex_kernel(name, monkeypatch):
    case = CASES[name]
    eager, ours = pair(case)
    routes = spy_routes(monkeypatch)
    inputs = dict(input_ids=ids(1), position_ids=packed_positions())
    assert_same(case, eager, ours, inputs, use_cache=False)
    assert set(routes) == {"_flex"}


@pytest.mark.parametrize("name", ["mistral", "qwen2", "gemma2", "gemma3", "gpt_oss", "modernbert"])
def test_windows_softcapping_and_sinks_run_on_the_flex_kernel(name, monkeypatch):
    case = CASES[name]
    _, ours = pair(case)
    routes = spy_routes(monkeypatch)
    with torch.no_grad():
        ours(**case.inputs)
    assert "_flex" in routes and "_explicit" not in routes


def test_plain_causal_and_padded_batches_run_on_the_fused_kernel(monkeypatch):
    for name in ("llama", "gpt2", "bert"):
        _, ours = pair(CASES[name])
        routes = spy_routes(monkeypatch)
        with torch.no_grad():
            ours(input_ids=ids(), attention_mask=padding())
            ours(input_ids=ids())
        assert set(routes) == {"_dense"}, name


def spy_routes(monkeypatch) -> list[str]:
    """The routes (qkv_attention._dense/_flex/_explicit) taken from now on, in order."""
    taken: list[str] = []
    for route in ("_dense", "_flex", "_explicit"):
        original = getattr(qkv_attention, route)

        def spy(*args, _original=original, _route=route, **kwargs):
            taken.append(_route)
            return _original(*args, **kwargs)

        monkeypatch.setattr(qkv_attention, route, spy)
    return taken


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_a_saved_folder_loads_with_attn_implementation_qkv(name, tmp_path, monkeypatch):
    """T5 and BART do not declare _supports_attention_backend; transformers 5 lets any
    registered implementation through from_pretrained all the same."""
    case = CASES[name]
    eager, _ = pair(case)
    eager.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="qkv")
    assert loaded.config._attn_implementation == "qkv"
    routes = spy_routes(monkeypatch)
    assert_same(case, eager, loaded.eval(), case.inputs)
    assert len(routes) == 2 * 3  # encoder self-, decoder self- and cross-attention, 2 layers


def test_causal_and_padding_masks_arrive(monkeypatch):
    """Without a mask function transformers would build none: a padded key or a future
    token would then change the outputs of the real, earlier tokens."""
    _, ours = pair(CASES["llama"])
    seen = []
    original = qkv_attention.attention_forward

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append(attention_mask)
        return original(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(transformers.AttentionInterface._global_mapping, "qkv", spy)
    tokens, mask = ids(), padding()
    with torch.no_grad():
        base = ours(input_ids=tokens, attention_mask=mask).logits
        changed = tokens.clone()
        changed[1, 20] = (changed[1, 20] % (VOCAB - 1)) + 1  # a padded position of row 1
        changed[0, 20] = (changed[0, 20] % (VOCAB - 1)) + 1  # a future token of row 0
        after = ours(input_ids=changed, attention_mask=mask).logits
    assert all(isinstance(m, PatternMask) and m.key_padding is not None for m in seen)
    torch.testing.assert_close(after[1, :15], base[1, :15])
    torch.testing.assert_close(after[0, :20], base[0, :20])
    assert not torch.allclose(after[0, 20], base[0, 20])


def test_float_additive_mask_equals_eager():
    """A 4D float mask (a relative bias, as T5 used to pass it) is added to the scores."""
    case = Case(CASES["llama"].config, "LlamaForCausalLM", {}, (("logits", None),))
    eager, ours = pair(case)
    generator = torch.Generator().manual_seed(5)
    bias = torch.randn(2, 1, T, T, generator=generator)
    bias = bias.masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
    )
    inputs = dict(input_ids=ids(), attention_mask=bias)
    expected, expected_grads, _ = run(case, eager, inputs)
    got, got_grads, _ = run(case, ours, inputs)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    assert_gradients_close(got_grads, expected_grads)


def test_fully_masked_rows_are_zero_not_nan():
    """Left padding: the first padded queries of a causal model may see no key at all."""
    case = CASES["gemma2"]
    _, ours = pair(case)
    mask = padding().flip(-1)  # row 1 is left-padded: 9 pads, then 15 tokens
    for output_attentions in (False, True):
        out = ours(input_ids=ids(), attention_mask=mask, output_attentions=output_attentions)
        assert torch.isfinite(out.logits).all()
        out.logits[mask.bool()].sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in ours.parameters() if p.grad is not None)


def test_training_with_dropout_stays_finite():
    """Dropout on the weights (BERT's default 0.1) in training mode, on every route."""
    for name in ("bert", "gemma2"):
        case = CASES[name]
        _, ours = pair(case)
        config = ours.config
        if name == "gemma2":
            config.attention_dropout = 0.1
        ours.train()
        out = ours(**case.inputs)
        value = out.last_hidden_state if name == "bert" else out.logits
        value.sum().backward()
        assert torch.isfinite(value).all()


# -- bad input ---------------------------------------------------------------------------


def test_register_without_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[hf\]"'):
        register()


def test_a_model_that_bypasses_the_interface_is_named():
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=2)
    model = transformers.BloomForCausalLM(config)
    with pytest.raises(
        InputError, match=r"BloomForCausalLM .*BloomAttention.*'eager'/'sdpa' .*remain"
    ):
        enable(model)
    for name in ("llama", "t5", "bart", "bert", "clip", "vit", "gpt_oss", "t5gemma"):
        check_model(pair(CASES[name])[1])


def test_a_model_that_bypasses_the_interface_in_part_is_warned_about():
    """GIT's text layers compute attention themselves; its vision tower uses the interface."""
    config = transformers.GitConfig(
        vision_config=dict(VISION, num_hidden_layers=1), vocab_size=VOCAB, hidden_size=32,
        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
    )  # fmt: skip
    with pytest.warns(UserWarning, match=r"GitSelfAttention .*GitVisionAttention\) run on qkv"):
        check_model(transformers.GitForCausalLM(config))


def test_enable_switches_a_loaded_model():
    case = CASES["llama"]
    cls = getattr(transformers, case.model)
    torch.manual_seed(0)
    model = cls._from_config(copy.deepcopy(case.config), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = model(**case.inputs).logits
        enable(model)
        assert model.config._attn_implementation == "qkv"
        got = model(**case.inputs).logits
    rows = case.inputs["attention_mask"].bool()
    torch.testing.assert_close(got[rows], expected[rows], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(attention_mask=torch.ones(1, T, dtype=torch.long), use_cache=False),
        dict(use_cache=True),
    ],
    ids=["with-attention-mask", "with-cache"],
)
def test_packed_position_ids_that_the_mask_ignores_are_refused(kwargs):
    _, ours = pair(CASES["mistral"])
    with pytest.raises(InputError, match="position_ids restart inside row 0 at token 8"):
        ours(input_ids=ids(1), position_ids=packed_positions(), **kwargs)


def test_packed_rows_of_a_model_that_builds_no_document_mask_are_refused():
    """GPT-OSS does not pass position ids to its mask: eager lets packed documents see each
    other in silence; qkv refuses."""
    _, ours = pair(CASES["gpt_oss"])
    with pytest.raises(InputError, match="only for models that pass position ids"):
        ours(input_ids=ids(1), position_ids=packed_positions(), use_cache=False)


def test_import_qkv_does_not_import_transformers():
    code = (
        "import sys, qkv, qkv.integrations, qkv.integrations.transformers; "
        "assert 'transformers' not in sys.modules, 'transformers imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(_root()))


def _root():
    import pathlib

    return pathlib.Path(__file__).resolve().parent.parent


def test_half_precision_weights_take_the_explicit_route():
    """attention_with_weights is float32/float64 only: bfloat16 weights are written out,
    their softmax in float32 as eager's."""
    case = CASES["llama"]
    _, ours = pair(case)
    with torch.no_grad():
        expected = ours(**case.inputs, output_attentions=True).attentions
        got = ours.to(torch.bfloat16)(**case.inputs, output_attentions=True).attentions
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), e, atol=2e-2, rtol=0)


@pytest.mark.parametrize("block_size", [0, -4, 2.5, True])
def test_register_refuses_a_bad_block_size(block_size):
    with pytest.raises(InputError, match="block_size"):
        register(block_size=block_size)


def test_enable_refuses_what_is_not_a_transformers_model():
    with pytest.raises(InputError, match="PreTrainedModel"):
        enable(torch.nn.Linear(2, 2))


def reference_attention(q, k, v, keep, scale, cap=None, bias=None, sinks=None):
    """softmax over [capped scores + bias (masked), sink] of float64 tensors, with autograd;
    grouped key/value heads repeated as transformers' eager does."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-2, -1) * scale
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    if bias is not None:
        scores = scores + bias
    # a large finite fill, as eager's: rows with nothing to see (padding, compared nowhere)
    # stay finite, and so do the gradients through them
    scores = scores.masked_fill(~keep, -1e30)
    if sinks is not None:
        sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        scores = torch.cat([scores, sink], -1)
    weights = torch.softmax(scores, -1)[..., : k.shape[2]]
    return (weights @ v).transpose(1, 2)


@pytest.mark.parametrize(
    "cap, with_bias, with_sinks",
    [(None, True, False), (2.0, False, True), (2.0, True, True), (None, False, True)],
)
def test_every_score_modification_on_a_window_equals_the_formula(cap, with_bias, with_sinks):
    """The flex route with soft-capping, an additive bias that learns and sinks, on a padded
    sliding window that leaves most tiles empty, against the formula in float64: outputs and
    the gradients of q, k, v, the bias and the sinks."""
    from transformers.masking_utils import sliding_window_causal_mask_function

    from qkv.integrations.transformers import attention_forward, pattern_mask

    generator = torch.Generator().manual_seed(3)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    q, k, v = tensor(2, 4, T, 8), tensor(2, 2, T, 8), tensor(2, 2, T, 8)
    bias = tensor(1, 4, T, T) if with_bias else None
    sinks = tensor(4) if with_sinks else None
    real = padding()
    mask = pattern_mask(
        2, T, T, mask_function=sliding_window_causal_mask_function(5), attention_mask=real,
        local_size=5, block_size=TILE,
    )  # fmt: skip
    assert mask.sparse
    module = torch.nn.Module()
    got, _ = attention_forward(
        module, q, k, v, mask, scaling=0.3, softcap=cap, s_aux=sinks, position_bias=bias
    )
    keep = mask.dense
    expected = reference_attention(q, k, v, keep, 0.3, cap, bias, sinks)
    rows = real.bool()
    torch.testing.assert_close(got[rows], expected[rows])
    leaves = [t for t in (q, k, v, bias, sinks) if t is not None]
    weights = torch.randn(got[rows].shape, generator=generator, dtype=torch.float64)
    got_grads = torch.autograd.grad((got[rows] * weights).sum(), leaves)
    expected_grads = torch.autograd.grad((expected[rows] * weights).sum(), leaves)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


def test_padded_grouped_heads_are_never_repeated_in_memory():
    """A padded batch of a GQA model (4 query heads, 2 key/value heads), forward and
    backward: no op turns tensors of 2 key/value heads alone into a materialised tensor of
    4 (transformers' repeat_kv, expand + reshape, repeat_interleave), and the result still
    equals eager's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    case = CASES["llama"]
    eager, ours = pair(case)
    heads, kv_heads = case.config.num_attention_heads, case.config.num_key_value_heads
    head_dim = case.config.hidden_size // heads
    repeats: list[str] = []

    def grouped(t: Any) -> bool:  # (B, Hkv, T, Dh), or (B, Hkv, G, T, Dh) on its way
        return isinstance(t, torch.Tensor) and t.dim() in (4, 5) and t.shape[1] == kv_heads

    def repeated(t: Any) -> bool:  # written out: a tensor that owns (B, H, T, Dh) elements
        if not isinstance(t, torch.Tensor) or t.dim() not in (4, 5) or t.shape[-1] != head_dim:
            return False
        by_head = t.dim() == 4 and t.shape[1] == heads
        by_group = t.dim() == 5 and t.shape[1] * t.shape[2] == heads and t.shape[2] > 1
        owned = t.untyped_storage().nbytes() >= t.numel() * t.element_size()
        return (by_head or by_group) and owned

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = torch.utils._pytree.tree_leaves((args, kwargs))
            outputs = torch.utils._pytree.tree_leaves(out)
            per_query_head = any(  # e.g. attention itself: queries in, per-query-head out
                isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[1] == heads for t in inputs
            )
            if any(map(grouped, inputs)) and not per_query_head and any(map(repeated, outputs)):
                repeats.append(str(func))
            return out

    inputs = dict(input_ids=ids(), attention_mask=padding())
    expected, expected_grads, _ = run(case, eager, inputs)
    with Spy():
        got, got_grads, _ = run(case, ours, inputs)
    assert not repeats, f"grouped key/value heads repeated by {sorted(set(repeats))}"
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    assert_gradients_close(got_grads, expected_grads)
    # the spy sees a repeat where there is one: transformers' own eager repeats them
    with Spy():
        run(case, eager, inputs)
    assert repeats
