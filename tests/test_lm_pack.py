"""Packed documents: `qkv train lm --pack`, LMConfig(document_start=...)."""

import pytest
import torch
import torch.nn.functional as F

from qkv.cli.main import main
from qkv.data.batch import BOS_ID
from qkv.data.text import TextCorpus, TextDataset, split_documents
from qkv.data.text_tokenizers import train_text_tokenizer
from qkv.errors import InputError
from qkv.models import LMConfig
from qkv.models.lm_config import LM_POSITION_KINDS
from qkv.models.lm_masks import find_documents
from qkv.tasks.lm import LMSetup, encode_documents, generate_text, lm_config, load_lm

from .test_lm import VOCAB, random_ids, tiny_lm

LENGTHS = (5, 9, 1, 7)


def documents(lengths=LENGTHS):
    """Documents opened by <s>: (n + 1,) each."""
    opener = torch.tensor([BOS_ID])
    return [torch.cat([opener, random_ids(1, n, seed=n)[0]]) for n in lengths]


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_a_packed_window_equals_its_documents_run_one_by_one(positions, window):
    model = tiny_lm(positions, document_start=BOS_ID, window=window)
    docs = documents()
    packed = torch.cat(docs)[None]  # (1, 26): no padding
    alone = torch.cat([model(doc[None]).logits for doc in docs], dim=1)
    torch.testing.assert_close(model(packed).logits, alone, rtol=1e-5, atol=1e-5)  # flex
    dense = model(packed, need_weights=True).logits  # the same pattern as a boolean mask
    torch.testing.assert_close(dense, alone, rtol=1e-5, atol=1e-5)


def test_the_packed_loss_is_the_documents_loss():
    model = tiny_lm("learned", document_start=BOS_ID)
    docs = documents()
    packed = torch.cat(docs)[None]
    # one by one, each document predicts the <s> that follows it (its end), as when packed
    total = sum(
        model.loss(torch.cat([doc, torch.tensor([BOS_ID])])[None]) * doc.numel()
        for doc in docs[:-1]
    ) + model.loss(docs[-1][None]) * (docs[-1].numel() - 1)
    torch.testing.assert_close(model.loss(packed) * (packed.shape[1] - 1), total)


def test_positions_restart_at_each_document_and_a_cut_document_starts_at_zero():
    ids = torch.tensor([[7, 8, BOS_ID, 9, 9, BOS_ID, BOS_ID, 5]])
    found = find_documents(ids, BOS_ID, offset=0, origin=torch.zeros(1, dtype=torch.long))
    assert found.positions.tolist() == [[0, 1, 0, 1, 2, 0, 0, 1]]
    assert found.starts.tolist() == [[0, 0, 2, 2, 2, 5, 6, 6]]
    later = find_documents(ids[:, 3:], BOS_ID, offset=3, origin=torch.tensor([2]))
    assert later.positions.tolist() == [[1, 2, 0, 0, 1]]


def test_no_token_of_another_document_changes_a_logit():
    model = tiny_lm("learned", document_start=BOS_ID)
    docs = documents()
    packed = torch.cat(docs)[None]
    changed = packed.clone()
    changed[0, 1:6] = (changed[0, 1:6] + 3) % (VOCAB - 4) + 4  # the first document's text
    before, after = model(packed).logits, model(changed).logits
    torch.testing.assert_close(before[:, 6:], after[:, 6:], rtol=0, atol=0)
    assert not torch.allclose(before[:, 1:6], after[:, 1:6])


@pytest.mark.parametrize("window", [None, 4])
def test_cached_generation_follows_the_documents(window):
    model = tiny_lm("sinusoidal", document_start=BOS_ID, window=window)
    packed = torch.cat(documents())[None].repeat(2, 1)
    full = F.log_softmax(model(packed).logits, dim=-1)
    state = model.start(packed[:, :4])
    for t in range(4, packed.shape[1]):
        output = model.step(packed[:, t], state)
        torch.testing.assert_close(output.log_probs, full[:, t], rtol=1e-5, atol=1e-5)
        state = output.state


def test_documents_are_kjv_verses_and_blank_line_paragraphs():
    kjv = TextCorpus("kjv", "", "")
    assert split_documents(kjv, "In the beginning.\nAnd the earth.\n") == [
        "In the beginning.\n",
        "And the earth.\n",
    ]
    file = TextCorpus("notes.txt", "", "")
    text = "one\ntwo\n\n \nthree\n\nfour"
    assert split_documents(file, text) == ["one\ntwo\n", "three\n", "four"]
    assert split_documents(file, "no\nblank\nline\n") == ["no\nblank\nline\n"]


def test_encoded_documents_are_opened_by_bos_and_windows_carry_no_padding():
    tokenizer = train_text_tokenizer("char", "ab\ncd\n")
    stream = encode_documents(tokenizer, ["ab\n", "c\n"])
    assert stream.tolist() == [BOS_ID, *tokenizer.encode("ab\n"), BOS_ID, *tokenizer.encode("c\n")]
    windows = TextDataset(stream, context=3)
    assert windows.target_lengths == [4, 4]  # 7 tokens: two full windows sharing one token


def test_a_setup_with_pack_builds_a_document_model_and_the_config_checks_the_id():
    assert lm_config(LMSetup(pack=True), VOCAB).document_start == BOS_ID
    assert lm_config(LMSetup(), VOCAB).document_start is None
    for bad in (-1, VOCAB, True, 1.0):
        with pytest.raises(InputError, match="document_start"):
            LMConfig(VOCAB, document_start=bad)


def test_pack_on_a_file_without_a_blank_line_is_one_clear_error(tmp_path, capsys):
    data = tmp_path / "flat.txt"
    data.write_text("".join(f"line {i}\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "run"
    code = main(["train", "lm", "--data", str(data), "--out", str(out), "--pack"])
    error = capsys.readouterr().err
    assert code == 2 and "--pack" in error and "blank line" in error
    assert "Traceback" not in error and not out.exists()


def test_cli_trains_packed_paragraphs_and_generates(tmp_path, capsys):
    paragraphs = [f"{'abcab'[i % 5]} paragraph {i}.\nIts second line.\n" for i in range(30)]
    data = tmp_path / "text.txt"
    data.write_text("\n".join(paragraphs), encoding="utf-8")
    out = tmp_path / "run"
    code = main(
        ["train", "lm", "--data", str(data), "--out", str(out), "--context", "32", "--pack"]
        + ["--max-steps", "2", "--batch-size", "4", "--threads", "1", "--device", "cpu"]
    )
    assert code == 0, capsys.readouterr().err
    lm = load_lm(out)
    assert lm.setup.pack and lm.model.config.document_start == BOS_ID
    (text,) = generate_text(lm, "a para", max_new_tokens=10, seed=1)
    assert len(text) > 0


def test_context_parallelism_refuses_packed_documents_it_would_ignore():
    from qkv.models import DecoderLM

    with pytest.raises(InputError, match=r"pack=True"):
        DecoderLM(LMConfig(VOCAB, dropout=0.0, document_start=BOS_ID)).context_parallel()
