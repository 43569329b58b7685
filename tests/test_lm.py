"""The decoder-only language model: causality, cached == uncached, GQA cache, bad input."""

import pytest
import torch
import torch.nn.functional as F

from qkv.decoding import filter_logits, greedy_search, sample
from qkv.errors import InputError
from qkv.models import DecoderLM, LMConfig, build_model, select_state
from qkv.models.lm_config import LM_POSITION_KINDS

VOCAB = 40


def tiny_lm(positions="learned", *, num_kv_heads=None, max_len=64, seed=0, **fields):
    torch.manual_seed(seed)
    config = LMConfig(
        VOCAB,
        d_model=32,
        num_heads=4,
        num_kv_heads=num_kv_heads,
        num_layers=2,
        d_ff=64,
        max_len=max_len,
        dropout=0.0,
        positions=positions,
        **fields,
    )
    return DecoderLM(config).eval()


def random_ids(batch, length, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (batch, length), generator=generator)


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_changing_a_later_token_never_changes_an_earlier_logit(positions):
    model = tiny_lm(positions)
    ids = random_ids(2, 12)
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 5) % (VOCAB - 4) + 4
    before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, :7], after[:, :7], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, 7:], after[:, 7:])  # the later ones do change


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_cached_steps_equal_the_full_forward_pass(positions, num_kv_heads):
    model = tiny_lm(positions, num_kv_heads=num_kv_heads)
    ids = random_ids(3, 15)
    full = F.log_softmax(model(ids).logits, dim=-1)  # (B, T, V)
    state = model.start(ids[:, :5])  # a prefix read in one pass, then one token per step
    for t in range(5, 15):
        output = model.step(ids[:, t], state)
        torch.testing.assert_close(output.log_probs, full[:, t], rtol=1e-5, atol=1e-5)
        state = output.state
    # the cache holds only the key/value heads: (B, Hkv, T, Dh)
    key = state.caches[0].key
    assert key.shape == (3, num_kv_heads, 15, 8)


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
@pytest.mark.parametrize("num_kv_heads", [4, 1])
def test_sampling_with_the_cache_gives_the_same_tokens_as_without(positions, num_kv_heads):
    model = tiny_lm(positions, num_kv_heads=num_kv_heads)
    prompt = random_ids(2, 4)
    greedy = sample(model, prompt, max_new_tokens=20, temperature=0)
    assert torch.equal(
        greedy, sample(model, prompt, max_new_tokens=20, temperature=0, use_cache=False)
    )
    drawn = sample(model, prompt, max_new_tokens=20, seed=7, top_k=8)
    assert torch.equal(
        drawn, sample(model, prompt, max_new_tokens=20, seed=7, top_k=8, use_cache=False)
    )
    assert torch.equal(drawn[:, :4], prompt)


def test_greedy_sampling_is_the_argmax_of_the_full_pass_at_every_step():
    model = tiny_lm()
    prompt = random_ids(1, 3)
    out = sample(model, prompt, max_new_tokens=6, temperature=0)
    for t in range(3, 9):
        assert out[0, t] == model(out[:, :t]).logits[0, -1].argmax()


def test_sampling_stops_once_every_sequence_has_drawn_an_end_token():
    model = tiny_lm()
    prompt = random_ids(2, 3)
    free = sample(model, prompt, max_new_tokens=12, temperature=0)
    end = int(free[0, 6])  # the first row's fourth new token ends it
    stops = [[int(t) for t in row[3:]].index(end) if end in row[3:] else None for row in free]
    ended = sample(model, prompt, max_new_tokens=12, temperature=0, eos_ids=[end])
    last = 12 if None in stops else max(stops) + 1  # new tokens drawn
    assert ended.shape == (2, 3 + last)
    expected = free[:, : 3 + last].clone()
    for row, stop in enumerate(stops):
        if stop is not None:  # an ended sequence is continued with its end token
            expected[row, 3 + stop :] = end
    assert torch.equal(ended, expected)


def test_seeded_sampling_is_reproducible_and_seeds_differ():
    model = tiny_lm()
    prompt = random_ids(4, 3)
    first = sample(model, prompt, max_new_tokens=30, seed=1)
    assert torch.equal(first, sample(model, prompt, max_new_tokens=30, seed=1))
    assert not torch.equal(first, sample(model, prompt, max_new_tokens=30, seed=2))


def test_lm_decodes_with_the_shared_greedy_search_and_state_reordering():
    # start(prefix) + step(BOS...) is the same Decodable protocol the translators use
    model = tiny_lm()
    source = random_ids(2, 3)
    hypotheses = greedy_search(model, source, max_len=5, bos_id=1, eos_id=2, pad_id=0)
    for row, (tokens, score) in enumerate(zip(hypotheses.tokens, hypotheses.scores, strict=True)):
        # the same search by hand: the full pass over prefix + BOS + what came so far
        ids, want = torch.cat([source[row], torch.tensor([1])])[None], 0.0
        for _ in range(5):
            with torch.no_grad():
                log_probs = model(ids).logits[0, -1].float().log_softmax(-1)
            best = int(log_probs.argmax())
            want += float(log_probs[best])
            if best == 2:
                break
            ids = torch.cat([ids, torch.tensor([[best]])], dim=1)
        assert tokens == ids[0, len(source[row]) + 1 :].tolist(), row
        assert score == pytest.approx(want, abs=1e-4), row
    state = model.start(source)
    swapped = select_state(state, torch.tensor([1, 0]))
    torch.testing.assert_close(swapped.caches[0].key[0], state.caches[0].key[1])
    torch.testing.assert_close(swapped.caches[0].key[1], state.caches[0].key[0])


def test_filter_logits_keeps_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[True, True, False, False, False]]
    # 0.5 < 0.8, 0.5 + 0.2 < 0.8, 0.85 >= 0.8: the nucleus is the first three
    kept = filter_logits(logits, top_p=0.8).isfinite()
    assert kept.tolist() == [[True, True, True, False, False]]
    kept = filter_logits(logits, top_p=0.3).isfinite()  # the top token always stays
    assert kept.tolist() == [[True, False, False, False, False]]
    shuffled = logits[:, [3, 0, 4, 2, 1]]  # the order of the vocabulary does not matter
    assert filter_logits(shuffled, top_p=0.8).isfinite().tolist() == [
        [False, True, False, True, True]
    ]


def test_sampled_tokens_follow_the_filtered_distribution():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]])).expand(20000, 3)
    generator = torch.Generator().manual_seed(0)
    probs = filter_logits(logits, top_k=2).softmax(-1)
    draws = torch.multinomial(probs, 1, generator=generator).flatten()
    counts = torch.bincount(draws, minlength=3).float() / len(draws)
    torch.testing.assert_close(counts, torch.tensor([2 / 3, 1 / 3, 0.0]), atol=0.015, rtol=0)


def test_loss_helper_is_the_mean_next_token_cross_entropy():
    model = tiny_lm()
    ids = random_ids(2, 10)
    logits = model(ids[:, :-1]).logits
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(model.loss(ids), expected)


def test_trainer_call_with_an_empty_source_equals_the_plain_forward():
    model = tiny_lm()
    ids = random_ids(2, 9)
    empty = ids[:, :0]
    torch.testing.assert_close(model(empty, ids).logits, model(ids).logits)
    # a non-empty prefix is read first; the logits are those of the continuation
    torch.testing.assert_close(model(ids[:, :4], ids[:, 4:]).logits, model(ids).logits[:, 4:])


def test_tied_embeddings_and_checkpoint_rebuild_by_name():
    model = tiny_lm()
    assert model.output.weight is model.token_embedding.weight
    rebuilt = build_model("lm", {"vocab_size": VOCAB, "d_model": 32, "num_heads": 4})
    assert isinstance(rebuilt, DecoderLM)
    untied = tiny_lm(tie_embeddings=False)
    assert untied.output.weight is not untied.token_embedding.weight


def test_prompt_longer_than_learned_positions_names_the_fix():
    model = tiny_lm("learned", max_len=16)
    with pytest.raises(
        InputError, match=r"prompt has 17 tokens.*only 16 positions.*positions 'sinusoidal'"
    ):
        sample(model, random_ids(1, 17), max_new_tokens=1)
    with pytest.raises(InputError, match=r"max_len=16.*positions 'sinusoidal'"):
        model(random_ids(1, 17))


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_generation_past_max_len_reads_the_last_max_len_tokens(positions):
    model = tiny_lm(positions, max_len=16)
    prompt = random_ids(2, 10)
    out = sample(model, prompt, max_new_tokens=20, temperature=0)
    assert torch.equal(
        out, sample(model, prompt, max_new_tokens=20, temperature=0, use_cache=False)
    )
    if positions == "learned":  # a sliding window of the last 16 tokens
        for t in (16, 20, 29):
            assert out[0, t] == model(out[:, t - 16 : t]).logits[0, -1].argmax()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: sample(m, random_ids(1, 0), max_new_tokens=3), "prompt is empty"),
        (lambda m: sample(m, random_ids(1, 2), max_new_tokens=3, temperature=-1), "temperature"),
        (lambda m: sample(m, random_ids(1, 2), max_new_tokens=3, top_p=0), "top_p"),
        (lambda m: sample(m, random_ids(1, 2), max_new_tokens=3, top_k=0), "top_k"),
        (lambda m: m(torch.full((1, 3), VOCAB)), "outside the vocabulary"),
        (lambda m: m(torch.zeros(1, 3)), "integer token ids"),
        (lambda m: m(torch.zeros(3, dtype=torch.long)), r"shape \(B, T\)"),
    ],
)
def test_bad_input_is_one_clear_input_error(call, message):
    with pytest.raises(InputError, match=message):
        call(tiny_lm())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(positions="nope"), "unknown positions .nope."),
        (dict(num_heads=3), "not divisible by num_heads"),
        (dict(num_kv_heads=3), "not divisible by num_kv_heads"),
        (dict(dropout=1.0), "dropout"),
        (dict(activation="tanh"), "activation"),
    ],
)
def test_config_refuses_bad_values(fields, message):
    with pytest.raises(InputError, match=message):
        LMConfig(VOCAB, **{"d_model": 32, "num_heads": 4, **fields})


def test_a_language_model_saved_before_the_one_lm_config_loads(tmp_path):
    """Checkpoints written with TransformerLMConfig's field names (layer_norm_eps) load into
    DecoderLM with the same weights and the same logits."""
    from qkv.models.saved_configs import upgrade_saved_config

    old = dict(vocab_size=20, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8)
    old.update(layer_norm_eps=1e-3, activation="gelu", norm_first=True, positions="learned")
    config = upgrade_saved_config("lm", old, {})
    assert config["norm_eps"] == 1e-3 and "layer_norm_eps" not in config
    model = build_model("lm", config)
    assert model.blocks[0].self_attention_norm.eps == 1e-3


def test_a_window_pattern_gives_short_windows_and_keeps_the_last_layer_full():
    from qkv.models import window_layers_of

    assert window_layers_of("SSSL", 8) == (0, 1, 2, 4, 5, 6)
    assert window_layers_of("sl", 5) == (0, 2)  # the last layer (4) is always full
    assert window_layers_of("S", 3) == (0, 1)
    with pytest.raises(InputError, match="letters S"):
        window_layers_of("SXL", 4)


@pytest.mark.parametrize("arch", ["gpt", "llama", "nanochat"])
def test_every_architecture_decodes_with_its_cache_as_without(arch):
    """Cached decoding equals full forward passes for each builder, with a window on some
    layers (rolling caches beside growing ones) and grouped KV heads."""
    from qkv.models import architecture_config

    torch.manual_seed(0)
    config = architecture_config(
        arch,
        40,
        d_model=32,
        num_heads=4,
        num_kv_heads=2,
        num_layers=3,
        max_len=64,
        dropout=0.0,
        window=4,
        window_layers=(0, 2),
    )
    model = DecoderLM(config).eval()
    prompt = torch.randint(0, 40, (2, 5))
    cached = sample(model, prompt, max_new_tokens=10, temperature=0)
    assert torch.equal(
        cached, sample(model, prompt, max_new_tokens=10, temperature=0, use_cache=False)
    )
    ids = cached[:, :-1]
    state = model.start(ids[:, :7])
    steps = [model.step(ids[:, t], state).log_probs for t in range(7, ids.shape[1])]
    full = F.log_softmax(model(ids).logits[:, 7:].float(), dim=-1)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=1e-5)


def test_soft_capped_logits_stay_inside_the_cap_and_keep_their_order():
    from qkv.models import gpt

    torch.manual_seed(0)
    capped = gpt(30, d_model=16, num_heads=2, num_layers=1, max_len=16, logit_softcap=2.0).eval()
    plain = gpt(30, d_model=16, num_heads=2, num_layers=1, max_len=16).eval()
    plain.load_state_dict(capped.state_dict())
    with torch.no_grad():
        plain.output.weight.mul_(8)  # large logits, so the cap bites
    capped.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 30, (1, 8))
    with torch.no_grad():
        raw, soft = plain(ids).logits, capped(ids).logits
    assert soft.abs().max() <= 2.0 < raw.abs().max()
    torch.testing.assert_close(soft, 2.0 * torch.tanh(raw / 2.0))
    assert torch.equal(soft.argmax(-1), raw.argmax(-1))


def test_the_llama_architecture_learns_a_short_text():
    from qkv.models import llama

    torch.manual_seed(0)
    ids = torch.tensor([[i % 7 + 4 for i in range(60)]])
    model = llama(
        12, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, max_len=64, dropout=0.0
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model.loss(ids).item()
    for _ in range(60):
        loss = model.loss(ids)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert first > 2.0 and loss.item() < 0.1
