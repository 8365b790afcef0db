"""The first-stage interface: every first stage (dense, BM25, hybrid, a new backend) is a :class:`FirstStage`.

The engine holds exactly one first stage, built by name from the registry (``EngineConfig.retriever``).
Adding a backend means subclassing :class:`FirstStage` and calling :func:`register_first_stage`; no engine
code changes. A backend reads its settings from its own section of the engine config (``config.dense``,
``config.bm25``, ...).

Saved engines keep one folder per retriever under the engine directory (``dense/``, ``bm25/``): a first
stage's :meth:`FirstStage.save` and :meth:`FirstStage.load` receive that directory and use their own folder.
"""

from __future__ import annotations

import copy as _copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from toolrerank_plugins._extras import Registry
from toolrerank_plugins._workers import side_by_side

if TYPE_CHECKING:
    import numpy as np
    from pydantic import BaseModel

    from toolrerank_plugins.catalog import Catalog
    from toolrerank_plugins.encoders import Embedder
    from toolrerank_plugins.records import Edge, ToolSpec

_T = TypeVar("_T")

#: ids, raw embeddings -> embeddings actually indexed (e.g. TGR's graph convolution).
DocTransform = Callable[[list[str], "np.ndarray"], "np.ndarray"]

_NO_SCORES: Mapping[str, float] = MappingProxyType({})


class Hit(NamedTuple):
    """One first-stage result: API id, the first stage's score, and each underlying retriever's score.

    A tuple, so ``tool_id, score = hit[:2]`` works; ``scores`` is empty for a single retriever and holds
    e.g. ``{"dense": .., "bm25": ..}`` for a fusion.
    """

    id: str
    score: float
    scores: Mapping[str, float] = _NO_SCORES


@dataclass(frozen=True)
class CatalogChange:
    """What one engine change did to the catalog, handed to :meth:`FirstStage.commit_change` so that a backend
    over a shared store can write the API records (and the catalog's edges and seen marks) in the same
    transaction as its index. ``catalog`` is the catalog after the change; the ids are in catalog order."""

    catalog: Catalog
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreChanges:
    """Changes another process committed to a shared store since this first stage's version (see
    :meth:`FirstStage.poll_changes`): the APIs added or updated (their records, in catalog order), the ids
    removed, and the catalog's edges and seen tools at ``version`` (None: unchanged)."""

    version: int
    upserted: tuple[ToolSpec, ...] = ()
    removed: tuple[str, ...] = ()
    edges: tuple[Edge, ...] | None = None
    seen_tools: tuple[str, ...] | None = None


def split_by_counts(items: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    """``items`` cut into consecutive runs of ``counts[i]`` items."""
    out, start = [], 0
    for n in counts:
        out.append(list(items[start : start + n]))
        start += n
    return out


class FirstStage(ABC):
    """Indexes API texts by id and answers queries with the best ids.

    ``add`` / ``update`` / ``remove`` must not re-encode what is already indexed, and :attr:`ids` stays in
    the order the ids were indexed and added (``update`` keeps each id's position): the engine keeps it
    equal to its catalog's order. Optional capabilities have defaults: a first stage without document
    vectors returns None from :meth:`embeddings_for` and ignores :meth:`set_document_transform`.

    Changes go through a small contract, :meth:`begin_change` / :meth:`commit_change` /
    :meth:`rollback_change`: the engine never changes a first stage that searches may be using. By default
    (in-memory backends) ``begin_change`` returns a :meth:`copy`, the engine changes the copy and swaps it in
    (copy-on-write), so ``copy`` must return an object whose changes leave the original as it was (see
    ``docs/engine.md``, "Thread safety"). A backend over a shared store (a database table) returns a view bound
    to an open transaction instead, and commits or rolls it back when the engine says so.
    """

    name: str = "first_stage"

    def score_scales(self) -> Mapping[str, str]:
        """What each score this first stage puts into ``stage_scores`` means, by key (shown by ``--explain``).

        Override it to describe your backend's scale; the default only says higher is better.
        """
        return {self.name: f"{self.name} score: higher is better (the backend's own scale)"}

    @abstractmethod
    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, Any] | None = None) -> None:
        """(Re)build from scratch; ``cache`` maps text keys to embeddings already computed (dense only)."""

    @abstractmethod
    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None: ...

    @abstractmethod
    def remove(self, ids: Sequence[str]) -> None: ...

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Replace the texts of already indexed ``ids``; each id keeps its position in :attr:`ids`.

        The default removes and re-adds them, which moves them to the end of :attr:`ids`; the engine
        notices and re-indexes the whole copy (:meth:`index` with :meth:`embedding_cache`). Backends
        override it to re-encode only ``texts`` in place, as the built-in ones do.
        """
        self.remove(ids)
        self.add(ids, texts)

    # -- the change contract ------------------------------------------------------------------------
    def begin_change(self) -> FirstStage:
        """A first stage the engine may change (``add`` / ``update`` / ``remove`` / ``index`` /
        ``set_document_transform``) while searches keep using ``self``. Default: :meth:`copy`."""
        return self.copy()

    def commit_change(self, changed: FirstStage, change: CatalogChange | None = None) -> FirstStage:
        """Make ``changed`` (from :meth:`begin_change`) durable and return the first stage to publish; called
        once the rest of the change (the catalog, the stages) succeeded. ``change`` says what happened to the
        catalog (a shared store writes those records in the same transaction). An error here undoes the whole
        change: the engine then calls :meth:`rollback_change`. Default: nothing to commit, ``changed`` is
        published."""
        return changed

    def rollback_change(self, changed: FirstStage) -> None:
        """Forget ``changed`` (from :meth:`begin_change`) after a change failed. Default: nothing (the copy is
        dropped)."""
        return None

    def close(self) -> None:
        """Release what this first stage holds open (connections, files). Default: nothing."""
        return None

    # -- following a shared store ------------------------------------------------------------------
    @property
    def poll_interval(self) -> float | None:
        """Seconds between the engine's checks for changes other processes made (:meth:`poll_changes`) before
        a search; None (the default, in-memory backends): never."""
        return None

    def poll_changes(self) -> StoreChanges | None:
        """What other processes committed to this first stage's shared store since its version, or None when
        nothing changed (always, for in-memory backends). Must not change ``self``."""
        return None

    def follow(self, changes: StoreChanges, texts: Mapping[str, str]) -> FirstStage:
        """A first stage at ``changes.version``: ``self`` with another process's committed change applied
        locally, nothing written to the store. ``texts`` are the rendered texts of ``changes.upserted``.
        Default (a local part of a hybrid over a store): :meth:`copy`, then remove, update and add."""
        new = self.copy()
        if changes.removed:
            new.remove(list(changes.removed))
        known = set(new.ids)
        updated = [s.id for s in changes.upserted if s.id in known]
        added = [s.id for s in changes.upserted if s.id not in known]
        if updated:
            new.update(updated, [texts[i] for i in updated])
        if added:
            new.add(added, [texts[i] for i in added])
        return new

    def copy(self) -> FirstStage:
        """An independent copy: :meth:`index`, :meth:`add`, :meth:`update`, :meth:`remove` and
        :meth:`set_document_transform` on it leave ``self`` unchanged (searches on ``self`` keep running).

        The default is :func:`copy.deepcopy`; the built-in first stages return a shallow copy because
        their updates replace arrays, lists and indexes instead of changing them in place.
        """
        return _copy.deepcopy(self)

    @abstractmethod
    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        """The best ``depth`` hits per query, best first."""

    def search_with_parts(
        self,
        queries: Sequence[str],
        parts: Sequence[Sequence[str]],
        depth: int,
        *,
        pooled: bool = False,
        lexical: bool = False,
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]]:
        """:meth:`search` of ``queries`` and, for each query, of its ``parts`` (sub-queries a stage asked
        for, ``parts[i]`` for ``queries[i]``), in one call: ``(hits per query, hits per part per query)``.

        ``pooled``: a query with parts may be searched with a vector pooled from its parts' vectors
        instead of its own (first stages with a dense part do); ``lexical``: the parts are matched by the
        lexical part alone (hybrid does); see ``QueryParts``. The default is one batched :meth:`search` of
        the queries and all parts, ignoring both.
        """
        flat = [*queries, *(p for ps in parts for p in ps)]
        hits = self.search(flat, depth)
        return hits[: len(queries)], split_by_counts(hits[len(queries) :], [len(ps) for ps in parts])

    def search_side_by_side(
        self, queries: Sequence[str], parts: Sequence[Sequence[str]], depth: int
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]] | None:
        """:meth:`search` of the parts on a spare thread while this thread searches the queries, or None when
        there are no parts, the engine does not allow it (``EngineConfig.parallel_requests``) or no spare thread
        is free (``toolrerank_plugins._workers``). A first stage whose search is mostly native work that leaves
        Python's lock (an encoder, faiss) calls it first in :meth:`search_with_parts` (dense does; hybrid sends only
        its vector part's search there): a multi-request message then takes about the longer of the two searches
        instead of both; each side's encoder and faiss take the threads one search would where the process has cores
        for both, else half of them (see ``_workers.threads_beside``)."""
        side = self.search_side_by_side_then(queries, parts, depth, lambda: None)
        return None if side is None else (side[0], side[1])

    def search_side_by_side_then(
        self, queries: Sequence[str], parts: Sequence[Sequence[str]], depth: int, then: Callable[[], _T]
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]], _T] | None:
        """:meth:`search_side_by_side`, and ``then()`` run on this thread after its own search (hybrid's lexical
        parts, which hold Python's lock): ``(hits per query, hits per part per query, then())``. None when there are
        no parts or no spare thread may be used or is free; then neither the searches nor ``then`` ran. Dense
        overrides it to encode on both threads and search every vector in one call after."""
        flat = [p for ps in parts for p in ps]
        if not flat:
            return None
        side = side_by_side(lambda: (self.search(queries, depth), then()), lambda: self.search(flat, depth))
        if side is None:
            return None
        (whole, after), flat_hits = side
        return whole, split_by_counts(flat_hits, [len(ps) for ps in parts]), after

    @abstractmethod
    def save(self, root: Path) -> None:
        """Write this first stage's files under the engine directory ``root``."""

    @classmethod
    @abstractmethod
    def load(cls, root: Path, config: Any, *, embedder: Embedder | None = None) -> FirstStage:
        """Read what :meth:`save` wrote under ``root``; ``config`` is the engine config."""

    @property
    @abstractmethod
    def ids(self) -> list[str]: ...

    def __len__(self) -> int:
        return len(self.ids)

    # -- optional capabilities -------------------------------------------------------------------
    @property
    def parts(self) -> Mapping[str, FirstStage]:
        """The retrievers this first stage is made of, by name (itself for a single retriever)."""
        return {self.name: self}

    @property
    def encoder(self) -> Embedder | None:
        """The bi-encoder this first stage uses, if any."""
        return None

    @property
    def encoder_path(self) -> str | None:
        """The configured model (name or folder) of :attr:`encoder`, if any (stages read it to find files
        saved beside a model, e.g. the feedback-trained marker)."""
        return None

    @property
    def has_embeddings(self) -> bool:
        return False

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        """Raw document embeddings of ``ids`` (None when not every id has one here)."""
        return None

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray | None:
        """The vectors this first stage searches ``queries`` with (reusing those of its latest searches), or
        None without a dense part. Stages read it through ``StageContext.query_vectors``."""
        return None

    def embedding_cache(self) -> dict[str, np.ndarray]:
        """Text key -> raw embedding, reusable by :meth:`index` of a new engine."""
        return {}

    def set_document_transform(self, transform: DocTransform | None) -> None:
        """Install ``transform`` on document vectors and re-index from cached raw vectors (no-op here)."""
        return None


@dataclass(frozen=True)
class FirstStageType:
    """How to make a first stage: ``build(config, embedder)`` for a new index, ``load(root, config, embedder)``
    for a saved one, and the files (relative to the engine directory) a saved one cannot do without: a
    saved engine's manifest must list them, so a manifest that lost them is refused.

    Args:
        build: ``build(config, embedder)`` (``config`` is the whole :class:`EngineConfig`; a backend reads its
            own section with ``config.section(name)``).
        load: ``load(root, config, embedder)``.
        required_files: a tuple, or ``f(config) -> files`` when they depend on the config (hybrid's parts).
        config_model: the pydantic model of this backend's section of the engine config, e.g.
            ``EngineConfig(retriever="pgvector", pgvector={"table": "tools"})`` validates ``pgvector`` with it.
            The built-in ``dense`` / ``bm25`` / ``hybrid`` sections are fixed fields of the config instead.
        resources: ``build`` and ``load`` also take ``resources=``, the live objects the caller passed to
            ``Engine.build`` / ``Engine.load`` (a connection pool, a client), never stored in ``config.json``.
        attach: for a backend over a shared store, ``attach(config, embedder, resources, version)`` opens what
            the store holds at ``version`` (None: its latest) without a saved folder (a worker that starts later).
    """

    build: Callable[..., FirstStage]
    load: Callable[..., FirstStage]
    required_files: tuple[str, ...] | Callable[[Any], Sequence[str]] = ()
    config_model: type[BaseModel] | None = None
    resources: bool = False
    attach: Callable[..., FirstStage] | None = None

    def files(self, config: Any) -> list[str]:
        """The files a saved engine with ``config`` cannot do without."""
        files = self.required_files
        return list(files(config) if callable(files) else files)

    def make(self, config: Any, embedder: Embedder | None, resources: Mapping[str, Any] | None = None) -> FirstStage:
        """A new, empty first stage (``build``), handing ``resources`` to a backend that takes them."""
        if self.resources:
            return self.build(config, embedder, resources=resources or {})
        return self.build(config, embedder)

    def open(
        self, root: Path, config: Any, embedder: Embedder | None, resources: Mapping[str, Any] | None = None
    ) -> FirstStage:
        """The first stage saved under ``root`` (``load``), handing ``resources`` to a backend that takes them."""
        if self.resources:
            return self.load(root, config, embedder, resources=resources or {})
        return self.load(root, config, embedder)


#: Entry-point group through which installed distributions add first stages: in a plug-in's pyproject.toml,
#: ``[project.entry-points."toolrerank_plugins.first_stages"]`` ``pgvector = "my_pkg.store:FIRST_STAGE_TYPE"``.
FIRST_STAGE_ENTRY_POINTS = "toolrerank_plugins.first_stages"

_FIRST_STAGES: Registry[FirstStageType] = Registry(
    "retriever",
    FirstStageType,
    {
        "dense": "toolrerank_plugins.retrieval.dense:FIRST_STAGE_TYPE",
        "bm25": "toolrerank_plugins.retrieval.bm25:FIRST_STAGE_TYPE",
        "hybrid": "toolrerank_plugins.retrieval.hybrid:FIRST_STAGE_TYPE",
        "pgvector": "toolrerank_plugins.retrieval.postgres:PGVECTOR_TYPE",
        "pg_bm25": "toolrerank_plugins.retrieval.postgres:PG_BM25_TYPE",
    },
    group=FIRST_STAGE_ENTRY_POINTS,
)


def register_first_stage(name: str, first_stage_type: FirstStageType | str, *, replace: bool = False) -> None:
    """Register a first-stage backend under an exact name (``"module:attr"`` strings import lazily)."""
    _FIRST_STAGES.register(name, first_stage_type, replace=replace)


def known_first_stages() -> list[str]:
    return _FIRST_STAGES.names()


def get_first_stage_type(name: str) -> FirstStageType:
    return _FIRST_STAGES.get(name)


#: Deprecated name of the interface (a Protocol before); kept so old imports keep working.
FirstStageRetriever = FirstStage
