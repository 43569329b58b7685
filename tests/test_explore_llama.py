"""Llama-family folders on the explorer: small random-weight Llama and Mistral (sliding window
shorter than the text) built with transformers.  The page is the language model's, and its
weights equal transformers' output_attentions=True (eager attention) to the page's rounding."""

import pytest

from qkv.explore import explore, load_folder

from .test_explore_pretrained import assert_page_matches, reference_attention
from .test_pretrained_llama import save_random, save_tokenizer

transformers = pytest.importorskip("transformers")

TEXT = "the heaven and the earth, the waters"


@pytest.mark.parametrize(
    ("family", "architecture", "model_class"),
    [("llama", "Llama", "LlamaForCausalLM"), ("mistral", "Mistral", "MistralForCausalLM")],
)
def test_llama_family_pages_hold_the_attention_transformers_computes(
    tmp_path, family, architecture, model_class
):
    save_random(tmp_path, family)
    save_tokenizer(tmp_path)
    loaded = load_folder(tmp_path)
    assert loaded.name == architecture
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer)
    assert data["model"]["kind"] == "lm"
    [page] = data["inputs"]
    ids = loaded.tokenizer.encode(TEXT)
    assert len(ids) > 5  # longer than Mistral's window of 5: the window shows in the weights
    reference = reference_attention(getattr(transformers, model_class), tmp_path, ids)
    assert_page_matches(page["views"][0], reference)
