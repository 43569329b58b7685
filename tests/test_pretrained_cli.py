"""`qkv generate --pretrained DIR "prompt"` on GPT-2 and Llama-family folders: the text the
library generates, and transformers' greedy continuation; bad folders are one line."""

import os

import pytest
import torch

from qkv.cli.main import main
from qkv.tasks.lm import generate_text
from qkv.tasks.pretrained_lm import load_generator

from .test_lm_gpt2 import save_random_gpt2
from .test_pretrained_llama import save_random, save_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_generate_pretrained_prints_the_greedy_continuation(tmp_path, capsys, family):
    reference = save_random_gpt2(tmp_path) if family == "gpt2" else save_random(tmp_path, family)
    save_tokenizer(tmp_path)
    args = ["generate", "--pretrained", str(tmp_path), "the earth", "--max-new-tokens", "10"]
    # two samples print whole texts (a random model's bytes need not stream as UTF-8)
    assert main(args + ["--temperature", "0", "--num-samples", "2"]) == 0
    printed = capsys.readouterr().out
    lm = load_generator(pretrained=tmp_path)
    (expected,) = generate_text(lm, "the earth", max_new_tokens=10, temperature=0)
    text = "the earth" + expected
    assert printed == f"--- sample 1\n{text}\n--- sample 2\n{text}\n"
    ids = lm.tokenizer.encode("the earth")
    with torch.no_grad():
        theirs = reference.generate(
            torch.tensor([ids]), max_new_tokens=10, do_sample=False, pad_token_id=0
        )
    assert expected == lm.tokenizer.decode(theirs[0, len(ids) :])


def test_generate_refuses_what_cannot_generate_in_one_line(tmp_path, capsys):
    save_random(tmp_path, "llama")
    assert main(["generate", "--pretrained", str(tmp_path), "the earth"]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    save_tokenizer(tmp_path)
    assert main(["generate", "the earth"]) == 2
    err = capsys.readouterr().err
    assert "exactly one model" in err and "(set by --checkpoint, --pretrained)" in err
    assert len(err.splitlines()) == 1
    long_prompt = "the earth " * 40  # more tokens than the 64 positions
    assert main(["generate", "--pretrained", str(tmp_path), long_prompt]) == 2
    err = capsys.readouterr().err
    assert "64 positions (config.json)" in err and "at most 64 tokens" in err
    assert "--positions" not in err  # a folder's positions are what it was trained with
