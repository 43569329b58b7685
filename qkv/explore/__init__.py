"""The attention explorer: a model's attention on some inputs as data (:func:`explore`), as
one self-contained HTML page (:func:`render_html`), served locally (:func:`serve`).

    import qkv
    from qkv.explore import iframe_html, render_html
    data = qkv.explore(model, ["the 3rd of March 1998"], tokenizer=tokenizer)
    html = render_html(data)                    # one page: write it, open it from disk
    IPython.display.HTML(iframe_html(data))     # in a notebook, no extension needed

docs/explorer.md is the page's manual and the data's schema.
"""

import sys
import types

from .arrays import input_attention, plot_attention, text_attention, write_weights
from .build import explore
from .extract import classifier_attention, decode_hypotheses, teacher_forced_attention
from .language import causal_attention, induction_scores
from .live import LIVE_MAX_MB, add_live, live_entry
from .page import check_page_path, iframe_html, render_html, write_html
from .pretrained import FolderTokenizer, load_folder
from .registry import (
    ExplorerAdapter,
    ExploreRequest,
    PageKind,
    explorable_kind,
    explorable_types,
    explorer_for,
    explorer_of_type,
    register_explorer,
)
from .serve import PageServer, serve
from .summaries import WEIGHT_SCALE, attention_rollout, head_summary, quantize
from .views import png_data_uri

__all__ = [
    "explore",
    "render_html",
    "iframe_html",
    "write_html",
    "check_page_path",
    "serve",
    "PageServer",
    "png_data_uri",
    "teacher_forced_attention",
    "classifier_attention",
    "decode_hypotheses",
    "explorable_kind",
    "explorable_types",
    "ExplorerAdapter",
    "ExploreRequest",
    "PageKind",
    "register_explorer",
    "explorer_for",
    "explorer_of_type",
    "attention_rollout",
    "head_summary",
    "quantize",
    "WEIGHT_SCALE",
    "text_attention",
    "input_attention",
    "load_folder",
    "FolderTokenizer",
    "plot_attention",
    "write_weights",
    "causal_attention",
    "induction_scores",
    "add_live",
    "live_entry",
    "LIVE_MAX_MB",
]


class _CallableModule(types.ModuleType):
    """``qkv.explore(model, inputs, ...)`` is :func:`explore`, as the issue asks for, while
    ``qkv.explore.render_html`` and the rest stay reachable as module attributes."""

    def __call__(self, *args, **kwargs):
        return explore(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
