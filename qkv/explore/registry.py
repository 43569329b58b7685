"""Explorer adapters by model type: how the explorer reads one model family.

Every model type that ``qkv.models.register_model`` knows and that has attention to show has
an adapter registered here under the same name (the registry lives in ``explore`` because an
adapter decodes, and the models' package comes before decoding in the import direction).
An adapter says which kind of page it fills (``kind``, and ``page``: what that kind of page
shows, a :class:`PageKind` declared next to the adapters that fill it), which attention views
it has (``views``), why a model of its type may have nothing to show (``refusal``), the facts
the page's header prints (``facts``) and the page's entry for each input (``pages``).  Adding
a model family to the explorer is one adapter, registered with :func:`register_explorer` (a
family's record does it); the page's script (script/kinds.js) is generic over the
:class:`PageKind` it declares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from qkv.errors import InputError
from qkv.models import model_type_of

__all__ = [
    "ExploreRequest",
    "ExplorerAdapter",
    "PageKind",
    "register_explorer",
    "explorer_for",
    "explorer_of_type",
    "explorable_kind",
    "explorable_types",
]


@dataclass(frozen=True)
class ExploreRequest:
    """What :func:`qkv.explore.explore` was asked, beyond the model and its inputs; each
    adapter reads the fields that apply to its family (docs: ``explore``)."""

    tokenizer: Any = None
    classes: Sequence[str] | None = None
    beam: int = 1
    length_penalty: float = 1.0
    max_len: int | None = None
    labels: Sequence[Any] | None = None
    generate: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    eos_ids: Sequence[int] = ()
    vectors: str | Sequence[int] | None = None
    targets: Sequence[str] | None = None


@dataclass(frozen=True)
class PageKind:
    """What the page shows for one kind of model; the page's script reads it from the data's
    ``model.page`` (:meth:`data`), so a kind of page is declared once, in Python, next to
    the adapters that fill it.

    info: the header's line, from the page's model facts (``data["model"]``: ``kind``,
        ``class``, the adapter's :meth:`~ExplorerAdapter.facts`, ``architecture`` where
        given).
    multi_head: whether the views have layers and heads (their menus, the grid of every
        layer and head, the neuron view); False: one map per view, the views side by side.
    source_row: the label of the row of the input's tokens (None: no such row).
    target_row: the label of the row of the output's tokens (None: no such row).
    classifier: whether rows of the predicted (and the true) class follow.
    term: what one query of a picture or a clip is called ("word", "query").
    grid_title: the title of the views side by side (where there are no layers and heads).
    pick_regions: whether the pointer picks a picture's region as the query (classifiers'
        pictures always do).
    metrics: the per-head summaries offered besides those of every page (entropy and the
        weights on the diagonal, the previous and the first token): key -> label.
    """

    info: Callable[[Mapping[str, Any]], str]
    multi_head: bool
    source_row: str | None = None
    target_row: str | None = None
    classifier: bool = False
    term: str | None = None
    grid_title: str | None = None
    pick_regions: bool = False
    metrics: Mapping[str, str] = field(default_factory=dict)

    def data(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The data's ``model.page`` for a model with these ``facts``: the header's line and
        what is set of the rest (the script reads an absent entry as unset), by the
        script's names."""
        entries = {
            "multiHead": self.multi_head,
            "sourceRow": self.source_row,
            "targetRow": self.target_row,
            "classifier": self.classifier,
            "term": self.term,
            "gridTitle": self.grid_title,
            "pickRegions": self.pick_regions,
            "metrics": dict(self.metrics),
        }
        return {"info": self.info(facts), **{key: value for key, value in entries.items() if value}}


class ExplorerAdapter(ABC):
    """The explorer's reading of one model family (subclass it, then register an instance).

    kind: the page's kind of model (its name: the page's title).
    views: the ids of the attention views its pages hold, in the page's order (one per
        hypothesis for families that show several hypotheses side by side: then the id
        names the search).
    config_facts: the facts of the page's header that are fields of ``model.config``, as
        fact -> field (what :meth:`facts` returns unless a family adds to it).
    takes_labels: whether ``labels=`` (true classes) applies.
    generates: whether ``generate=`` (tokens sampled after each prompt) applies.
    vectors: whether ``vectors=`` (q, k, v of some layers, for the neuron view) applies.
    takes_targets: whether ``targets=`` (a decoder text per input instead of its output)
        applies.
    live: the family's forward pass in the page (``script/live/<live>.js``), which a live
        page runs on what the learner types (``qkv.explore.live``); None: no live page.
    page: what the page shows for the ``kind`` (:class:`PageKind`, shared by the adapters
        that fill the same kind); an adapter with views must declare one.
    """

    kind: str
    views: tuple[str, ...]
    config_facts: Mapping[str, str] = {}
    takes_labels: bool = False
    generates: bool = False
    vectors: bool = False
    takes_targets: bool = False
    live: str | None = None
    page: PageKind | None = None

    def refusal(self, model: nn.Module) -> str | None:
        """Why this model has no attention weights to show (with the fix), or None."""
        return None

    def facts(self, model: nn.Module) -> dict[str, Any]:
        """The page's ``model`` entry beyond ``kind`` and ``class``: the ``config_facts``."""
        return {fact: getattr(model.config, name) for fact, name in self.config_facts.items()}

    def live_config(self, model: nn.Module) -> dict[str, Any]:
        """What the family's live script reads beside the weights (sizes, ids, options), as
        JSON-able data; families with ``live`` set override it."""
        raise InputError(
            f"{type(self).__name__} has no live forward pass: write a static page (no --live)"
        )

    @abstractmethod
    def pages(
        self, model: nn.Module, inputs: list[Any], request: ExploreRequest
    ) -> list[dict[str, Any]]:
        """The page's ``inputs`` entries (docs/explorer.md's schema), one per input."""


_ADAPTERS: dict[str, ExplorerAdapter] = {}


def register_explorer(model_type: str, adapter: ExplorerAdapter) -> None:
    """Show models of the registered ``model_type`` (``qkv.models.register_model``'s name)
    through ``adapter``; one with views must declare its ``page``."""
    if adapter.views and adapter.page is None:
        raise TypeError(
            f"{type(adapter).__name__} declares no page: set its page to the PageKind of "
            f"its kind {adapter.kind!r} (what the explorer page shows for it)"
        )
    _ADAPTERS[model_type] = adapter


def explorable_types() -> list[str]:
    """The model types the explorer shows (those whose adapter refuses every model left out)."""
    return sorted(name for name, adapter in _ADAPTERS.items() if adapter.views)


def explorer_of_type(model_type: str) -> ExplorerAdapter:
    """The adapter registered for ``model_type``, or one clear error naming those known."""
    if model_type not in _ADAPTERS:
        raise InputError(
            f"the explorer shows {', '.join(explorable_types())} models, not {model_type!r}; "
            "plot other attention with qkv.plotting"
        )
    return _ADAPTERS[model_type]


def explorable_kind(model: nn.Module) -> str:
    """The registered type of ``model`` if the explorer can show its attention; else a
    clear error (the no-attention baselines have none to show)."""
    return explorer_for(model)[0]


def explorer_for(model: nn.Module) -> tuple[str, ExplorerAdapter]:
    """The registered type of ``model`` and its adapter, or one clear error: a type without
    an adapter, or a model of a known type that computes no attention weights."""
    try:
        model_type = model_type_of(model)
    except ValueError:
        model_type = type(model).__name__
    adapter = explorer_of_type(model_type)
    reason = adapter.refusal(model)
    if reason is not None:
        raise InputError(f"this {model_type!r} model {reason}")
    return model_type, adapter
