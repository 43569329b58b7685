"""What a page shows for a kind of model is declared once, in Python, beside its adapters
(``qkv.explore.PageKind``), and travels in the page's data; script/kinds.js holds none."""

import json
from importlib import resources

import pytest

from qkv.explore import ExplorerAdapter, PageKind, explore, explorer_of_type, register_explorer
from qkv.explore.registry import _ADAPTERS
from qkv.models import llama

from .test_explore_lm import tiny_lm, tiny_tokenizer

#: the names script/*.js reads from model.page
SCRIPT_NAMES = {
    "info",
    "multiHead",
    "sourceRow",
    "targetRow",
    "classifier",
    "term",
    "gridTitle",
    "pickRegions",
    "metrics",
}


def test_every_adapter_with_views_declares_its_page():
    for model_type, adapter in _ADAPTERS.items():
        if adapter.views:
            assert isinstance(adapter.page, PageKind), model_type


def test_the_script_names_no_kind_of_model():
    script = resources.files("qkv.explore").joinpath("script/kinds.js").read_text("utf-8")
    kinds = {adapter.kind for adapter in _ADAPTERS.values() if adapter.views}
    assert kinds >= {"transformer", "lm", "encoder", "vision", "captioner", "frame-tagger"}
    assert not [kind for kind in kinds if f'"{kind}"' in script or f"{kind}:" in script]


def test_an_adapter_with_views_and_no_page_is_refused_when_registered():
    class Pageless(ExplorerAdapter):
        kind, views = "pageless", ("self",)

        def pages(self, model, inputs, request):
            return []

    with pytest.raises(TypeError, match="Pageless declares no page"):
        register_explorer("pageless", Pageless())
    assert "pageless" not in _ADAPTERS


def test_the_page_data_holds_what_is_set_by_the_scripts_names():
    page = PageKind(info=lambda facts: f"{facts['heads']} heads", multi_head=True, term="query")
    assert page.data({"heads": 3}) == {"info": "3 heads", "multiHead": True, "term": "query"}
    extra = PageKind(info=lambda facts: "", multi_head=False, metrics={"mine": "my measure"})
    assert extra.data({}) == {"info": "", "metrics": {"mine": "my measure"}}


def test_the_header_line_is_computed_from_the_facts_the_page_holds():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, layers=2, heads=4, num_kv_heads=2, positions="rope")
    data = explore(model, ["and god"], tokenizer=tokenizer)
    page = data["model"]["page"]
    assert set(page) <= SCRIPT_NAMES
    assert page["info"] == "language model: 2 layers, 4 heads (2 key/value heads), rope positions"
    assert page["info"] == explorer_of_type("lm").page.info(data["model"])
    assert "induction" in page["metrics"]  # the kind's own summary, beside every page's
    named = explore(model, ["and god"], tokenizer=tokenizer, architecture="Llama")
    assert named["model"]["architecture"] == "Llama"
    # a model built by one of qkv's builders says which (the model above mixes gpt and rope)
    built = llama(tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=2, max_len=16)
    info = explore(built, ["and god"], tokenizer=tokenizer)["model"]["page"]["info"]
    assert info == "language model (llama layout): 2 layers, 2 heads, rope positions"
    named_built = explore(built, ["and god"], tokenizer=tokenizer, architecture="Llama")
    assert named_built["model"]["page"]["info"] == "Llama: 2 layers, 2 heads, rope positions"
    assert named["model"]["page"]["info"].startswith("Llama: 2 layers, 4 heads")
    json.dumps(named)  # the page's data is all JSON
