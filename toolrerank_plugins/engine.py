"""The engine: one first stage plus a pipeline of stages over a tool catalog.

How the pieces fit (see ``docs/engine.md``, "Architecture"): :class:`Engine` owns the catalog, one
:class:`~toolrerank_plugins.retrieval.base.FirstStage` and a list of
:class:`~toolrerank_plugins.stages.Stage`; stages see it only through a
:class:`~toolrerank_plugins.stages.StageContext`; :mod:`~toolrerank_plugins.persistence` reads and writes
the parts and the engine assembles itself from them (:meth:`Engine.from_parts`).

The three live in one immutable snapshot (:class:`_Snapshot`) that every search reads once; ``add`` /
``update`` / ``remove`` / ``set_stages`` build the next snapshot aside and swap it in (see ``docs/engine.md``,
"Thread safety").
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from toolrerank_plugins import _validate
from toolrerank_plugins._call_llm import using_llm
from toolrerank_plugins._workers import spare_threads_allowed
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig, RetrieverName
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.errors import CatalogError, ConfigError, StaleStoreError, ToolRerankError
from toolrerank_plugins.persistence import read_engine, version_dir, write_engine
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber, replace_surrogates
from toolrerank_plugins.render import render_tool
from toolrerank_plugins.retrieval.base import (
    CatalogChange,
    DocTransform,
    FirstStage,
    Hit,
    StoreChanges,
    get_first_stage_type,
)
from toolrerank_plugins.retrieval.relevance import (
    RELEVANCE,
    RelevanceConfig,
    RelevanceModel,
    RelevanceScorer,
    check_min_relevance,
)
from toolrerank_plugins.stages import QueryParts, Stage, StageContext, as_stage, build_stage

if TYPE_CHECKING:
    import numpy as np

    from toolrerank_plugins.retrieval.bm25 import BM25Retriever
    from toolrerank_plugins.retrieval.dense import DenseRetriever

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["Engine", "EngineConfig", "RetrieverName", "SearchResult"]


@dataclass
class SearchResult:
    """One query's ranking plus what each stage did (``trace``) and how long it took (ms)."""

    query: str
    results: list[ScoredTool]
    trace: dict[str, Any] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "results": [r.to_dict() for r in self.results],
            "trace": self.trace,
            "timings_ms": self.timings_ms,
        }


def _checked_queries(queries: Sequence[str], top_k: int) -> list[str]:
    """``queries`` as checked strings (cut to ``MAX_QUERY_CHARS``); TypeError/ValueError name the argument."""
    _validate.check_top_k(top_k)
    return _validate.check_queries(queries)


def _finish(res: SearchResult, top_k: int, exclude: frozenset[str]) -> SearchResult:
    if exclude:
        res.results = renumber([r for r in res.results if r.id not in exclude])
    res.results = res.results[:top_k]
    res.timings_ms["total"] = sum(res.timings_ms.values())
    return res


def _replayable(items: Any) -> Any:
    """``items`` as something a retried change can read again: an iterator becomes a list; anything else (a
    list, a catalog, or a wrong type that the catalog's own checks name) is passed on as it is."""
    return list(items) if isinstance(items, Iterator) else items


def _compose(transforms: list[DocTransform]) -> DocTransform | None:
    if not transforms:
        return None
    if len(transforms) == 1:
        return transforms[0]

    def composed(ids: list[str], emb: np.ndarray) -> np.ndarray:
        for t in transforms:
            emb = t(ids, emb)
        return emb

    return composed


class _EngineContext(StageContext):
    """The engine as its stages see it (see :class:`~toolrerank_plugins.stages.StageContext`).

    Bound to one snapshot's catalog and first stage: a stage running during a search sees the catalog
    and index that search started with, whatever a concurrent ``add`` / ``update`` / ``remove`` does.
    """

    def __init__(self, engine: Engine, catalog: Catalog, first_stage: FirstStage) -> None:
        self._engine = engine
        self._catalog = catalog
        self._first_stage = first_stage
        self._names: frozenset[str] | None = None

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def embedder(self) -> Embedder:
        return self._engine._embedder_for(self._first_stage)

    @property
    def depth(self) -> int:
        return self._engine.config.depth

    @property
    def has_embeddings(self) -> bool:
        return self._first_stage.has_embeddings

    @property
    def encoder_path(self) -> str | None:
        return self._first_stage.encoder_path

    @property
    def llm(self) -> Any:
        return self._engine.llm

    def render(self, spec: ToolSpec) -> str:
        return self._engine.render(spec)

    def retrieve(self, queries: Sequence[str], depth: int) -> list[list[ScoredTool]]:
        # queries here are often LLM-made text: a lone surrogate (not valid text) becomes U+FFFD, not an error
        clean = [replace_surrogates(q) for q in queries]
        pre = _PREFETCHED.get()
        if pre is not None and pre.first_stage is self._first_stage and pre.depth >= depth and clean:
            if all(q in pre.hits for q in clean):  # searched with the query (Stage.query_parts)
                return [self._engine._to_scored(self._catalog, pre.hits[q][:depth]) for q in clean]
        return self._engine._retrieve(self._catalog, self._first_stage, clean, depth)

    def cached_embeddings(self, ids: Sequence[str]) -> np.ndarray | None:
        return self._first_stage.embeddings_for(ids)

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray:
        vectors = self._first_stage.query_vectors(queries)
        return vectors if vectors is not None else self.embedder.encode(list(queries))

    @property
    def top_k(self) -> int | None:
        return _TOP_K.get()

    def known_names(self) -> frozenset[str]:
        if self._names is None:  # the snapshot never changes, so neither do its names
            names: set[str] = set()
            for spec in self._catalog:
                names.add(spec.name.lower())
                if spec.tool:
                    names.add(spec.tool.lower())
            self._names = frozenset(names)
        return self._names


@dataclass(frozen=True)
class _Prefetched:
    """Hits of the sub-queries one search asked for (:meth:`Stage.query_parts`), from ``first_stage``."""

    first_stage: FirstStage
    depth: int
    hits: dict[str, list[Hit]]


#: The current search's prefetched sub-query hits (per thread / task; read by ``StageContext.retrieve``).
_PREFETCHED: ContextVar[_Prefetched | None] = ContextVar("toolrerank_prefetched", default=None)
#: The current search's ``top_k`` (per thread / task; read by ``StageContext.top_k``).
_TOP_K: ContextVar[int | None] = ContextVar("toolrerank_top_k", default=None)


@contextmanager
def _caller_top_k(top_k: int | None) -> Iterator[None]:
    """``StageContext.top_k`` is ``top_k`` inside the block (this thread or task only)."""
    token = _TOP_K.set(top_k)
    try:
        yield
    finally:
        _TOP_K.reset(token)


def _query_parts(stages: Sequence[Stage], query: str) -> QueryParts | None:
    """The sub-queries of the first stage in the pipeline that has any for ``query``."""
    for stage in stages:
        plan = stage.query_parts(query)
        if plan is not None and plan.parts:
            return plan
    return None


@dataclass(frozen=True)
class SyncReport:
    """What :meth:`Engine.sync` changed: the ids it added, updated and removed, each in catalog order.

    ``reencoded`` is the part of ``updated`` whose text (what the first stage indexes) changed; the other
    updated APIs changed only fields the text does not show (metadata, ``returns``) and kept their vectors.
    """

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    reencoded: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the sync changed anything."""
        return bool(self.added or self.updated or self.removed)


@dataclass(frozen=True, eq=False)
class _Snapshot:
    """One index state, never changed once an engine holds it: a search reads it once and uses only it.

    ``stages`` are the stages as they were after ``on_index`` on this catalog and first stage (TGR's
    graph, ToolRerank's tool index); ``context`` is bound to this catalog and first stage.
    """

    catalog: Catalog
    first_stage: FirstStage
    stages: tuple[Stage, ...]
    context: _EngineContext
    transform_installed: bool = False


class Engine:
    """Search a tool catalog: ``search(query, top_k)``, ``search_batch``, and async twins.

    Build with :meth:`build`, persist with :meth:`save` / :meth:`load`, update incrementally with
    :meth:`add`, :meth:`update` and :meth:`remove`. An engine is one first stage
    (:attr:`first_stage`, named by ``config.retriever``) plus :attr:`stages`.

    Thread safety: searches (every ``search*`` / ``asearch*`` / ``retrieve`` / ``rerank`` method) and
    :meth:`save` may run in any number of threads, also while one thread calls :meth:`add`,
    :meth:`update`, :meth:`remove` or :meth:`set_stages`. The engine holds one immutable snapshot (catalog,
    first stage, and the stages' index state such as TGR's graph); a search reads it once when it
    starts and sees the catalog either before or after a concurrent change, never a mix. A change
    builds the next snapshot aside (copy-on-write: only new or changed texts are encoded) and swaps it
    in; changes are serialised by a lock, and searches never wait for them. Each change is
    all-or-nothing: if it raises (a bad spec, an encoder error, a stage's ``on_index``), the engine is
    exactly as before. So :attr:`catalog`, :attr:`first_stage` and :attr:`stages` are new objects after
    a change: read them again rather than keeping a reference, and change the engine through its
    methods, never by changing those objects in place. ``config`` and ``llm`` are read at each use.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> hit = engine.search("what is the weather tomorrow", top_k=3)[0]
        >>> hit.tool.tool, hit.rank, sorted(hit.stage_scores)
        ('SkyCast', 1, ['bm25'])
    """

    def __init__(
        self, catalog: Catalog, config: EngineConfig, first_stage: FirstStage, *, embedder: Embedder | None = None
    ) -> None:
        self.config = config
        self._embedder = embedder
        #: An LLM for the LLM stages when none is registered under their ``llm`` name (set by the user).
        self.llm: Any = None
        self._write_lock = threading.Lock()
        self._polled = 0.0  # when the shared store was last polled (time.monotonic())
        #: the relevance scorer of the latest snapshot a ``min_relevance`` search used (its model carried over)
        self._relevance: tuple[_Snapshot, RelevanceScorer] | None = None
        #: how ``min_relevance``'s model is calibrated (read when it is fitted; set it before the first such search)
        self.relevance_config = RelevanceConfig()
        self._relevance_lock = threading.Lock()
        self._state = _Snapshot(catalog, first_stage, (), _EngineContext(self, catalog, first_stage))

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        catalog: Catalog,
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        embedding_cache: dict[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
    ) -> Engine:
        """Index ``catalog`` with the configured first stage and build the configured stages.

        ``config`` defaults to the recommended pipeline (``EngineConfig()``). ``resources`` are live objects a
        first-stage backend needs (a connection pool, a client: ``FirstStageType(resources=True)``), passed in
        rather than named in the config, which is saved and must never hold a password."""
        config = config or EngineConfig()
        if len(catalog) == 0:
            raise ConfigError("cannot build an engine over an empty catalog; load or add at least one API")
        if config.auto_tune:
            config, embedder, embedding_cache = cls._auto_tuned(catalog, config, embedder, embedding_cache)
        empty = get_first_stage_type(config.retriever).make(config, embedder, resources)
        ids = catalog.ids
        first_stage = empty.begin_change()  # a shared store indexes inside a transaction: all or nothing
        try:
            first_stage.index(ids, [render_tool(catalog[i], config.render) for i in ids], cache=embedding_cache)
            first_stage = empty.commit_change(first_stage, CatalogChange(catalog, added=tuple(ids)))
        except BaseException:
            empty.rollback_change(first_stage)
            raise
        return cls.from_parts(catalog, config, first_stage, embedder=embedder)

    @staticmethod
    def _auto_tuned(
        catalog: Catalog, config: EngineConfig, embedder: Embedder | None, cache: dict[str, Any] | None
    ) -> tuple[EngineConfig, Embedder | None, dict[str, Any] | None]:
        """``config.auto_tune``'s knobs chosen for ``catalog`` (:mod:`~toolrerank_plugins.retrieval.autotune`); the
        encoder and the vectors the choice made are handed on to the build."""
        from toolrerank_plugins.retrieval import autotune

        parts: dict[str, FirstStage] = {}

        def make(cfg: EngineConfig, name: str) -> FirstStage:
            part = autotune.make_part(cfg, name, catalog, embedder, cache)
            parts.setdefault(name, part)
            return part

        resolved, report = autotune.choose(config, catalog, make)
        dense = parts.get("dense")
        if dense is not None:
            embedder = embedder or dense.encoder
            cache = {**(cache or {}), **dense.embedding_cache()}
        logger.info("auto_tune: %s", report.chosen)
        return resolved, embedder, cache

    @classmethod
    def from_parts(
        cls,
        catalog: Catalog,
        config: EngineConfig,
        first_stage: FirstStage,
        *,
        stage_dirs: Sequence[Path | None] | None = None,
        embedder: Embedder | None = None,
    ) -> Engine:
        """Assemble an engine from an indexed first stage: build ``config.stages`` (from their saved folders
        when ``stage_dirs`` is given) and let them see the index.

        ``first_stage`` is not changed: when a stage installs a document transform (TGR), the engine
        installs it in a copy, so first stages shared between engines (``first_stage_from_parts``) stay
        as they are. An empty catalog is allowed here (an engine saved after removing every API loads).
        """
        self = cls(catalog, config, first_stage, embedder=embedder)
        dirs = list(stage_dirs) if stage_dirs is not None else [None] * len(config.stages)
        if len(dirs) != len(config.stages):
            raise ConfigError(f"{len(dirs)} stage folders for {len(config.stages)} configured stages")
        ctx = self._state.context
        stages = [build_stage(spec, ctx, d) for spec, d in zip(config.stages, dirs)]
        self._state = self._indexed(self._state, catalog, first_stage, stages, first_stage_is_new=False, ctx=ctx)
        return self

    # -- the snapshot ----------------------------------------------------------------------------
    @property
    def catalog(self) -> Catalog:
        """The catalog of the current snapshot (a new object after each change; do not change it in place)."""
        return self._state.catalog

    @property
    def first_stage(self) -> FirstStage:
        """The first stage of the current snapshot (a new object after each change)."""
        return self._state.first_stage

    @property
    def context(self) -> StageContext:
        """The stage context of the current snapshot (what :attr:`stages` see)."""
        return self._state.context

    @property
    def stages(self) -> list[Stage]:
        """The stages of the current snapshot, in order (a new list; set with :meth:`set_stages`)."""
        return list(self._state.stages)

    @stages.setter
    def stages(self, stages: Iterable[Any]) -> None:
        self.set_stages(stages)

    def set_stages(self, stages: Iterable[Any]) -> None:
        """Replace the stage pipeline with already-built stages (e.g. from a tuning script); each then sees
        the index (``on_index``). ``config.stages`` is not changed. All-or-nothing, like :meth:`add`."""
        new = [as_stage(s) for s in stages]
        with self._write_lock:
            state = self._state
            self._state = self._indexed(state, state.catalog, state.first_stage, new, first_stage_is_new=False)

    def score_scales(self) -> dict[str, str]:
        """What each key of a result's ``stage_scores`` means, in pipeline order: the first stage's scores (for
        hybrid, each retriever's and the fusion's) and each stage's. A result's ``score`` is on the scale of the
        last key in its ``stage_scores``. Scores of different keys are not comparable.

        Example:
            >>> from toolrerank_plugins.pipelines import pipeline_config
            >>> from toolrerank_plugins.testing import tiny_catalog
            >>> engine = Engine.build(tiny_catalog(), pipeline_config("bm25"))
            >>> list(engine.score_scales())
            ['bm25']
        """
        state = self._state
        scales = dict(state.first_stage.score_scales())
        for stage in state.stages:
            scales[stage.name] = stage.score_scale
        return scales

    def render(self, spec: ToolSpec) -> str:
        """The text models see for ``spec`` (see :func:`~toolrerank_plugins.render.render_tool`)."""
        return render_tool(spec, self.config.render)

    def _indexed(
        self,
        previous: _Snapshot,
        catalog: Catalog,
        first_stage: FirstStage,
        stages: list[Stage],
        *,
        first_stage_is_new: bool,
        ctx: _EngineContext | None = None,
    ) -> _Snapshot:
        """The snapshot of ``catalog`` + ``first_stage`` + ``stages``, after each stage saw the index
        (``on_index``) and the stages' document transforms are installed. Nothing that ``previous`` holds
        is changed: a first stage that searches may be using (``first_stage_is_new=False``) is copied
        before a transform is installed."""
        ctx = ctx or _EngineContext(self, catalog, first_stage)
        for stage in stages:
            stage.on_index(ctx)
        transform = _compose([t for s in stages if (t := s.document_transform()) is not None])
        if transform is not None or previous.transform_installed:
            if not first_stage_is_new:
                first_stage = first_stage.copy()
                ctx = _EngineContext(self, catalog, first_stage)
            first_stage.set_document_transform(transform)
        return _Snapshot(catalog, first_stage, tuple(stages), ctx, transform is not None)

    def _mutate(self, run: Callable[[], T]) -> T:
        """``run()`` under the write lock. A backend over a shared store raises :class:`StaleStoreError` when
        another process committed since this engine's snapshot: the engine then follows that change
        (:meth:`refresh`) and runs the change again on the new snapshot (at most three times)."""
        with self._write_lock:
            for attempt in range(3):
                try:
                    return run()
                except StaleStoreError:
                    if attempt == 2:
                        raise
                    self._refresh_locked()
        raise AssertionError("unreachable")  # pragma: no cover

    def _apply(
        self,
        catalog: Catalog,
        change: Callable[[FirstStage], None],
        *,
        added: Sequence[str] = (),
        updated: Sequence[str] = (),
        removed: Sequence[str] = (),
    ) -> None:
        """Apply ``change`` to the first stage and publish it with the changed ``catalog``, all or nothing:
        through the first stage's change contract (``begin_change``, then ``commit_change`` with what happened
        to the catalog once the stages saw the change, ``rollback_change`` on any error). Called with the write
        lock held."""
        current = self._state.first_stage
        first_stage = current.begin_change()
        delta = CatalogChange(catalog, tuple(added), tuple(updated), tuple(removed))
        try:
            change(first_stage)
            self._change(catalog, first_stage, delta)
        except BaseException:
            current.rollback_change(first_stage)
            raise

    def _change(self, catalog: Catalog, first_stage: FirstStage, delta: CatalogChange) -> None:
        """Publish the snapshot of a changed ``catalog`` and its changed ``first_stage`` (from
        ``begin_change``), committing the first stage's change last.

        Called with the write lock held. The stages are shallow copies that see the new index, so the
        current snapshot's stages keep their state for the searches still using them."""
        state = self._state
        first_stage = self._in_catalog_order(catalog, first_stage)
        stages = [copy.copy(s) for s in state.stages]
        new = self._indexed(state, catalog, first_stage, stages, first_stage_is_new=True)
        published = state.first_stage.commit_change(new.first_stage, delta)
        if published is not new.first_stage:  # the backend publishes another object (e.g. a reader, not a writer)
            ctx = _EngineContext(self, catalog, published)
            new = _Snapshot(catalog, published, new.stages, ctx, new.transform_installed)
        self._state = new

    def _in_catalog_order(self, catalog: Catalog, first_stage: FirstStage) -> FirstStage:
        """Make sure every part of ``first_stage`` lists the catalog's ids in catalog order (what a saved
        engine is checked against); a backend whose ``update`` does not keep positions is re-indexed."""
        ids = catalog.ids
        if all(part.ids == ids for part in first_stage.parts.values()):
            return first_stage
        logger.warning(
            "first stage %r does not list the catalog's ids in catalog order after a change (its update() "
            "does not keep positions); re-indexing it from its embedding cache",
            first_stage.name,
        )
        first_stage.index(ids, [self.render(catalog[i]) for i in ids], cache=first_stage.embedding_cache())
        wrong = [name for name, part in first_stage.parts.items() if sorted(part.ids) != sorted(ids)]
        if wrong:
            raise ConfigError(f"first stage part(s) {wrong} do not index the catalog's ids after re-indexing")
        return first_stage

    # -- following a shared store --------------------------------------------------------------------
    def refresh(self) -> bool:
        """Follow what other processes committed to this engine's shared store (a database-backed first
        stage): their added, updated and removed APIs become part of this engine's catalog and index, nothing is
        re-encoded. Returns whether anything changed. In-memory engines never change this way (False).

        Searches call it themselves at most every ``first_stage.poll_interval`` seconds; call it to see a
        change at once."""
        with self._write_lock:
            return self._refresh_locked()

    def _refresh_locked(self) -> bool:
        state = self._state
        changes = state.first_stage.poll_changes()
        if changes is None:
            return False
        catalog = self._followed_catalog(state.catalog, changes)
        texts = {s.id: self.render(s) for s in changes.upserted}
        first_stage = self._in_catalog_order(catalog, state.first_stage.follow(changes, texts))
        stages = [copy.copy(s) for s in state.stages]
        self._state = self._indexed(state, catalog, first_stage, stages, first_stage_is_new=True)
        return True

    @staticmethod
    def _followed_catalog(catalog: Catalog, changes: StoreChanges) -> Catalog:
        new = catalog.copy()
        if changes.removed:
            new.remove([i for i in changes.removed if i in new])
        known = set(new.ids)
        updated = [s for s in changes.upserted if s.id in known]
        added = [s for s in changes.upserted if s.id not in known]
        if updated:
            new.update(updated)
        if added:
            new.add(added)
        if changes.edges is not None or changes.seen_tools is not None:
            edges = list(changes.edges) if changes.edges is not None else new.edges
            seen = changes.seen_tools if changes.seen_tools is not None else sorted(new.seen_tools)
            new = Catalog(new, edges=edges, seen_tools=seen, source=new.source)
        return new

    def _poll(self) -> None:
        """Before a search: follow other processes' commits when the first stage asks to be polled and its
        interval has passed (one cheap query to the store)."""
        interval = self._state.first_stage.poll_interval
        if interval is None:
            return
        now = time.monotonic()
        if now - self._polled < interval:
            return
        self._polled = now
        if self._write_lock.acquire(blocking=False):  # a change in progress follows the store itself
            try:
                self._refresh_locked()
            finally:
                self._write_lock.release()

    @property
    def embedder(self) -> Embedder:
        """The bi-encoder (for stages that need embeddings: hierarchy similarity, TGR, ...)."""
        return self._embedder_for(self._state.first_stage)

    def _embedder_for(self, first_stage: FirstStage) -> Embedder:
        encoder = first_stage.encoder
        if encoder is not None:
            return encoder
        if self._embedder is None:  # a first stage without an encoder: stages needing one get the dense section's
            from toolrerank_plugins.retrieval.dense import make_encoder

            self._embedder = make_encoder(self.config.dense)
        return self._embedder

    @property
    def dense(self) -> DenseRetriever | None:
        """The dense retriever inside the first stage, if any (read-only convenience)."""
        return self.first_stage.parts.get("dense")  # type: ignore[return-value]

    @property
    def bm25(self) -> BM25Retriever | None:
        """The BM25 retriever inside the first stage, if any (read-only convenience)."""
        return self.first_stage.parts.get("bm25")  # type: ignore[return-value]

    # -- first stage -----------------------------------------------------------------------------
    def retrieve(self, queries: Sequence[str], top_k: int) -> list[list[ScoredTool]]:
        """First-stage retrieval only, one ranking per query (stages use this to re-retrieve for rewritten
        queries). Arguments are checked as :meth:`search_batch` checks them (a query is cut to
        :data:`~toolrerank_plugins._validate.MAX_QUERY_CHARS` characters).

        Raises:
            TypeError: ``queries`` is a single string (not a batch: wrap it in a list) or holds a non-string;
                ``top_k`` is not an int.
            ValueError: ``top_k`` < 1; a query holds a lone surrogate character.
        """
        top_k = _validate.check_top_k(top_k)  # a plain int (numpy integers too)
        checked = _checked_queries(queries, top_k)
        self._poll()
        state = self._state
        return self._retrieve(state.catalog, state.first_stage, checked, top_k)

    def _retrieve(
        self, catalog: Catalog, first_stage: FirstStage, queries: Sequence[str], top_k: int
    ) -> list[list[ScoredTool]]:
        hits = first_stage.search(list(queries), top_k) if queries else []
        return [self._to_scored(catalog, h) for h in hits]

    def _to_scored(self, catalog: Catalog, hits: Sequence[Hit]) -> list[ScoredTool]:
        stage = self.config.retriever
        out = []
        for rank, hit in enumerate(hits, start=1):
            spec = catalog.get(hit.id)
            if spec is None:  # index out of sync with catalog: never return a ghost API
                logger.warning("index returned unknown id %r; skipped", hit.id)
                continue
            out.append(ScoredTool(spec, float(hit.score), rank, {**hit.scores, stage: float(hit.score)}))
        return renumber(out) if len(out) != len(hits) else out

    # -- search ----------------------------------------------------------------------------------
    def _excluded(self, exclude: Iterable[str]) -> frozenset[str]:
        if isinstance(exclude, str):
            raise TypeError("exclude must be an iterable of API ids, not a single string")
        return frozenset(exclude)

    def _depth(self, state: _Snapshot, top_k: int, exclude: frozenset[str]) -> int:
        """First-stage depth: ``top_k`` (at least ``config.depth`` with stages), deeper by the excluded ids."""
        wanted = top_k + sum(1 for t in exclude if t in state.catalog)
        return max(wanted, self.config.depth) if state.stages else wanted

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[ScoredTool]:
        """The ``top_k`` best APIs for ``query``, best first; ids in ``exclude`` are never returned (the
        search goes that much deeper, so ``top_k`` results still come back when the catalog has them).

        Defined results for odd queries (the same in every search method and async twin): a blank query
        (empty or whitespace only) ranks nothing and returns ``[]`` without running any stage; a query
        longer than :data:`~toolrerank_plugins._validate.MAX_QUERY_CHARS` (8,192) characters is cut to
        that length before any stage sees it (``SearchResult.query`` holds the cut text).

        ``llm`` (every search method and async twin): an LLM port (``complete``/``acomplete``, e.g. the
        agent's own model wrapped by an adapter) that this call's LLM stages use instead of the registered
        or ``engine.llm`` one; budgets, timeouts and fallbacks are the stages' as usual. ``None``: unchanged.

        ``min_relevance`` (every search method and async twin; off by default): "no tool fits". Each result
        gets the probability that it fits the request (``stage_scores["relevance"]``, from
        :meth:`relevance_model`; a prerequisite a stage inserted counts as much as the result it serves), and
        results below ``min_relevance`` are dropped, so a search may return fewer results or none; the trace's
        ``"relevance"`` entry says what was dropped and why. ``0.0`` scores every result and drops none.

        Raises:
            ConfigError: ``llm`` is not an LLM port.
            TypeError: ``query`` is not a string; ``top_k`` is not an int (``None``, ``"3"``, ``2.5``,
                NaN and ``True`` included); ``exclude`` is a single string or holds a non-string.
                ``search_batch`` raises it for a single string: a string is not a batch.
            ValueError: ``top_k`` < 1; ``query`` holds a lone surrogate character (not valid text);
                ``min_relevance`` is not a number in [0, 1].
        """
        return self.search_detailed(query, top_k, exclude=exclude, llm=llm, min_relevance=min_relevance).results

    def search_batch(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[list[ScoredTool]]:
        return [
            r.results
            for r in self.search_batch_detailed(queries, top_k, exclude=exclude, llm=llm, min_relevance=min_relevance)
        ]

    def search_detailed(
        self,
        query: str,
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> SearchResult:
        _validate.check_query(query)
        return self.search_batch_detailed([query], top_k, exclude=exclude, llm=llm, min_relevance=min_relevance)[0]

    def search_batch_detailed(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[SearchResult]:
        """Rankings with per-stage traces and timings (first-stage encoding is batched)."""
        top_k = _validate.check_top_k(top_k)  # a plain int (numpy integers too)
        queries = _checked_queries(queries, top_k)
        exclude = _validate.check_exclude(exclude)
        min_relevance = check_min_relevance(min_relevance)
        with using_llm(llm):  # this thread's LLM stages (resolve_llm) see it until the call returns
            return self._search_checked(queries, top_k, exclude, min_relevance)

    def _search_checked(
        self, queries: list[str], top_k: int, exclude: Any, min_relevance: float | None
    ) -> list[SearchResult]:
        if any(map(_validate.is_blank, queries)):  # blank queries rank nothing (docs/engine.md, "Searching")
            nonblank = [q for q in queries if q.strip()]
            found = iter(self.search_batch_detailed(nonblank, top_k, exclude=exclude, min_relevance=min_relevance))
            return [next(found) if q.strip() else SearchResult(q, [], timings_ms={"total": 0.0}) for q in queries]
        skip = self._excluded(exclude)
        if not queries:
            return []
        self._poll()
        return self._search(self._state, queries, top_k, skip, min_relevance)

    def _search(
        self,
        state: _Snapshot,
        queries: list[str],
        top_k: int,
        skip: frozenset[str],
        min_relevance: float | None = None,
    ) -> list[SearchResult]:
        """The sync search over one snapshot (never ``self._state`` again: a change may swap it meanwhile)."""
        depth = self._depth(state, top_k, skip)
        t0 = time.perf_counter()
        first, prefetched = self._first_search(state, queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)
        results = []
        for q, hits, pre in zip(queries, first, prefetched):
            res = SearchResult(q, self._to_scored(state.catalog, hits), timings_ms={"first_stage": first_ms})
            token, k_token = _PREFETCHED.set(pre), _TOP_K.set(top_k)
            try:
                res = self._run_stages(state, res)
                if min_relevance is not None:
                    res = self._keep_relevant(state, res, min_relevance, top_k + len(skip))
                results.append(_finish(res, top_k, skip))
            finally:
                _TOP_K.reset(k_token)
                _PREFETCHED.reset(token)
        return results

    def _first_search(
        self, state: _Snapshot, queries: list[str], depth: int
    ) -> tuple[list[list[Hit]], list[_Prefetched | None]]:
        """The first stage over ``queries``, and over the sub-queries a stage asked for
        (:meth:`Stage.query_parts`) in the same call; their hits wait for the stage's ``ctx.retrieve``."""
        plans = [_query_parts(state.stages, q) for q in queries]
        if not any(plans):
            return state.first_stage.search(queries, depth), [None] * len(queries)
        parts = [p.parts if p is not None else () for p in plans]
        pooled = any(p.pooled for p in plans if p is not None)
        lexical = any(p.lexical for p in plans if p is not None)
        with spare_threads_allowed(self.config.parallel_requests):
            whole, by_part = state.first_stage.search_with_parts(queries, parts, depth, pooled=pooled, lexical=lexical)
        prefetched = [
            _Prefetched(state.first_stage, depth, dict(zip(ps, hits))) if ps else None
            for ps, hits in zip(parts, by_part)
        ]
        return whole, prefetched

    async def asearch(
        self,
        query: str,
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[ScoredTool]:
        """Async twin of :meth:`search` (same results)."""
        return (
            await self.asearch_detailed(query, top_k, exclude=exclude, llm=llm, min_relevance=min_relevance)
        ).results

    async def asearch_batch(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[list[ScoredTool]]:
        return [
            r.results
            for r in await self.asearch_batch_detailed(
                queries, top_k, exclude=exclude, llm=llm, min_relevance=min_relevance
            )
        ]

    async def asearch_detailed(
        self,
        query: str,
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> SearchResult:
        _validate.check_query(query)
        return (
            await self.asearch_batch_detailed([query], top_k, exclude=exclude, llm=llm, min_relevance=min_relevance)
        )[0]

    async def asearch_batch_detailed(
        self,
        queries: Sequence[str],
        top_k: int = 5,
        *,
        exclude: Iterable[str] = (),
        llm: Any = None,
        min_relevance: float | None = None,
    ) -> list[SearchResult]:
        """Async twin: natively async stages (LLM stages) are awaited, CPU work runs in a thread."""
        top_k = _validate.check_top_k(top_k)  # a plain int (numpy integers too)
        queries = _checked_queries(queries, top_k)
        exclude = _validate.check_exclude(exclude)
        min_relevance = check_min_relevance(min_relevance)
        # this task's LLM stages see ``llm`` (the worker threads and tasks started below inherit it)
        with using_llm(llm):
            return await self._asearch_checked(queries, top_k, exclude, min_relevance)

    async def _asearch_checked(
        self, queries: list[str], top_k: int, exclude: Any, min_relevance: float | None
    ) -> list[SearchResult]:
        if any(map(_validate.is_blank, queries)):  # blank queries rank nothing, as in the sync twin
            nonblank = [q for q in queries if q.strip()]
            found = iter(
                await self.asearch_batch_detailed(nonblank, top_k, exclude=exclude, min_relevance=min_relevance)
            )
            return [next(found) if q.strip() else SearchResult(q, [], timings_ms={"total": 0.0}) for q in queries]
        skip = self._excluded(exclude)
        if not queries:
            return []
        if self._state.first_stage.poll_interval is not None:
            await asyncio.to_thread(self._poll)  # a query to the store: not on the event loop
        state = self._state
        if not any(s.native_async for s in state.stages):
            return await asyncio.to_thread(self._search, state, queries, top_k, skip, min_relevance)
        depth = self._depth(state, top_k, skip)
        t0 = time.perf_counter()
        first, prefetched = await asyncio.to_thread(self._first_search, state, queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)

        async def one(q: str, hits: list[Hit], pre: _Prefetched | None) -> SearchResult:
            res = SearchResult(q, self._to_scored(state.catalog, hits), timings_ms={"first_stage": first_ms})
            _PREFETCHED.set(pre)  # this task's own context (gather runs each coroutine as a task)
            _TOP_K.set(top_k)
            res = await self._arun_stages(state, res)
            if min_relevance is not None:  # features and the model's first fit: CPU work, in a thread
                res = await asyncio.to_thread(self._keep_relevant, state, res, min_relevance, top_k + len(skip))
            return _finish(res, top_k, skip)

        return list(await asyncio.gather(*(one(q, h, p) for q, h, p in zip(queries, first, prefetched))))

    # -- "no tool fits" ---------------------------------------------------------------------------
    def relevance_model(self) -> RelevanceModel:
        """The model behind ``min_relevance`` for the current catalog (see
        :mod:`toolrerank_plugins.retrieval.relevance`): fitted without labels on pseudo-requests built from the
        catalog's own texts, on the first ``min_relevance`` search or this call (seconds for 50,000 APIs), and
        kept while later changes add, update or remove at most 5 % of the APIs since that fit; not saved (a
        loaded engine fits it again, the same model for the same catalog)."""
        return self._relevance_scorer(self._state).model

    def _relevance_scorer(self, state: _Snapshot) -> RelevanceScorer:
        with self._relevance_lock:  # one fit, however many threads ask at once
            held = self._relevance
            same_fit = held is not None and held[1].config.fits_like(self.relevance_config)
            if held is not None and held[0] is state and same_fit:
                return held[1]
            scorer = RelevanceScorer(
                state.catalog,
                state.first_stage,
                lambda: self._embedder_for(state.first_stage),
                self.render,
                self.relevance_config,
            )
            if held is not None and same_fit:
                before = held[1]
                changed = len(set(before.catalog.ids).symmetric_difference(state.catalog.ids))
                if before.fitted and changed <= max(1, len(state.catalog) // 20):
                    scorer.adopt(before)  # a few APIs changed: the same model, this catalog's features
            self._relevance = (state, scorer)
            return scorer

    def _keep_relevant(self, state: _Snapshot, res: SearchResult, min_relevance: float, n: int) -> SearchResult:
        """The first ``n`` results scored for relevance; those below ``min_relevance`` dropped (trace: why)."""
        scorer = self._relevance_scorer(state)
        head, candidates = res.results[:n], [r.id for r in res.results]
        plan = _query_parts(state.stages, res.query)
        texts = [res.query, *(plan.parts if plan is not None else ())]
        inherits: dict[str, str] = {}
        for trace in res.trace.values():  # a prerequisite a stage inserted counts as the result it serves
            for entry in trace.get("expanded", ()) if isinstance(trace, dict) else ():
                if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                    serves = entry.get("prerequisite_of") or entry.get("for")
                    if isinstance(serves, str):
                        inherits.setdefault(entry["id"], serves)
        t = time.perf_counter()
        probs = scorer.score(texts, head, candidates, inherits)
        scored = [r.with_stage(RELEVANCE, p, final=False) for r, p in zip(head, probs)]
        if self.relevance_config.scope == "query":  # all or nothing, by the best result
            fits = any(r.stage_scores[RELEVANCE] >= min_relevance for r in scored)
            kept = scored if fits else []
        else:
            kept = [r for r in scored if r.stage_scores[RELEVANCE] >= min_relevance]
        dropped = [{"id": r.id, "relevance": round(r.stage_scores[RELEVANCE], 4)} for r in scored if r not in kept]
        if not scored:
            reason = "nothing was ranked"
        elif not kept:
            best = max(scored, key=lambda r: r.stage_scores[RELEVANCE])
            top = best.stage_scores[RELEVANCE]
            reason = f"no tool fits: no result reached relevance {min_relevance:g} (best {top:.2f}: {best.id!r})"
        elif dropped:
            reason = f"{len(dropped)} of {len(scored)} results below relevance {min_relevance:g} dropped"
        else:
            reason = None
        res.trace[RELEVANCE] = {
            "min_relevance": min_relevance,
            "kept": len(kept),
            "dropped": dropped,
            "abstained": bool(scored) and not kept,
            "reason": reason,
            "model": scorer.model.to_dict(),
        }
        res.results = renumber(kept)
        res.timings_ms[RELEVANCE] = (time.perf_counter() - t) * 1000
        return res

    def _run_stages(self, state: _Snapshot, res: SearchResult) -> SearchResult:
        """Each stage in turn over ``res.results``, recording its trace and time in ``res``."""
        for stage in state.stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            res.results = renumber(stage.run(res.query, res.results, state.context, trace))
            res.trace[stage.name] = trace
            res.timings_ms[stage.name] = (time.perf_counter() - t) * 1000
        return res

    async def _arun_stages(self, state: _Snapshot, res: SearchResult) -> SearchResult:
        """Async twin of :meth:`_run_stages` (:meth:`Stage.arun` runs sync stages in a thread)."""
        for stage in state.stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            res.results = renumber(await stage.arun(res.query, res.results, state.context, trace))
            res.trace[stage.name] = trace
            res.timings_ms[stage.name] = (time.perf_counter() - t) * 1000
        return res

    # -- reranking candidates from elsewhere ------------------------------------------------------
    def rerank(
        self,
        query: str,
        candidates: Sequence[ToolSpec | ScoredTool],
        top_k: int | None = None,
        *,
        llm: Any = None,
    ) -> list[ScoredTool]:
        """Run the configured stages over ``candidates`` that came from any retriever (no first stage).
        ``llm``: this call's LLM stages use it (as in :meth:`search`).

        The entry point of document compressors and node postprocessors. A ``ToolSpec`` candidate has no
        upstream score, so the caller's order is kept as its score (``1/rank``, stage name ``"input"``);
        a ``ScoredTool`` keeps its score and stage scores. A repeated id keeps its first occurrence. With
        no stages configured the candidates come back in their given order.

        Example:
            >>> from toolrerank_plugins.testing import tiny_catalog
            >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
            >>> specs = [engine.catalog["Mail/PostBox/send_email"], engine.catalog["Weather/SkyCast/forecast"]]
            >>> [(r.tool.name, r.rank) for r in engine.rerank("send mail", specs, top_k=1)]
            [('send_email', 1)]
        """
        query = _validate.check_query(query)
        top_k = _validate.check_top_k(top_k, optional=True)
        candidates = _validate.check_candidates(candidates)
        if _validate.is_blank(query):  # a blank query ranks nothing: the candidates keep their given order
            return self._rerank_inputs(query, candidates, top_k)[:top_k]
        with using_llm(llm), _caller_top_k(top_k):
            res = self._run_stages(self._state, SearchResult(query, self._rerank_inputs(query, candidates, top_k)))
        return res.results if top_k is None else res.results[:top_k]

    async def arerank(
        self,
        query: str,
        candidates: Sequence[ToolSpec | ScoredTool],
        top_k: int | None = None,
        *,
        llm: Any = None,
    ) -> list[ScoredTool]:
        """Async twin of :meth:`rerank` (same results): ``arun`` stages run natively, others in a thread."""
        query = _validate.check_query(query)
        top_k = _validate.check_top_k(top_k, optional=True)
        candidates = _validate.check_candidates(candidates)
        if _validate.is_blank(query):  # as in rerank: the candidates keep their given order
            return self._rerank_inputs(query, candidates, top_k)[:top_k]
        state = self._state
        with using_llm(llm), _caller_top_k(top_k):  # the worker thread below inherits this task's context
            if not any(s.native_async for s in state.stages):
                res = await asyncio.to_thread(
                    self._run_stages, state, SearchResult(query, self._rerank_inputs(query, candidates, top_k))
                )
            else:
                res = await self._arun_stages(state, SearchResult(query, self._rerank_inputs(query, candidates, top_k)))
        return res.results if top_k is None else res.results[:top_k]

    @staticmethod
    def _rerank_inputs(query: str, candidates: Sequence[ToolSpec | ScoredTool], top_k: int | None) -> list[ScoredTool]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
        out: list[ScoredTool] = []
        seen: set[str] = set()
        for c in candidates:
            if isinstance(c, ScoredTool):
                spec, score, scores = c.tool, c.score, dict(c.stage_scores)
            elif isinstance(c, ToolSpec):
                score = 1.0 / (len(out) + 1)
                spec, scores = c, {"input": score}
            else:
                raise TypeError(f"candidates must be ToolSpec or ScoredTool, got {type(c).__name__}")
            if spec.id not in seen:
                seen.add(spec.id)
                out.append(ScoredTool(spec, score, len(out) + 1, scores))
        return out

    # -- incremental updates ---------------------------------------------------------------------
    # Each change copies the catalog and first stage (cheap: they share their arrays and specs), changes
    # the copies, lets copies of the stages see them and swaps the result in. Until the swap nothing the
    # engine holds has changed, so a change that raises leaves the engine exactly as it was.
    def add(self, specs: Iterable[ToolSpec]) -> None:
        """Add new APIs at the end of the catalog; only their texts are encoded.

        All-or-nothing: on any error (a duplicate or invalid spec: :class:`~toolrerank_plugins.errors.CatalogError`;
        an encoder or stage error) the engine is unchanged. Safe while other threads search.

        Example:
            >>> from toolrerank_plugins.testing import tiny_catalog
            >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
            >>> engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="Order a pizza")])
            >>> engine.search("order a pizza", top_k=1)[0].id
            'Food/Pizza/order'
        """
        specs = _replayable(specs)

        def run() -> None:
            catalog = self._state.catalog.copy()
            added = catalog.add(specs)
            if not added:
                return
            ids = [s.id for s in added]
            self._apply(catalog, lambda fs: fs.add(ids, [self.render(s) for s in added]), added=ids)

        self._mutate(run)

    def update(self, specs: Iterable[ToolSpec]) -> None:
        """Replace APIs by id, keeping their positions; only the changed texts are re-encoded.

        All-or-nothing, like :meth:`add` (an unknown id is a :class:`~toolrerank_plugins.errors.CatalogError`).
        """
        specs = _replayable(specs)

        def run() -> None:
            catalog = self._state.catalog.copy()
            updated = catalog.update(specs)
            if not updated:
                return
            ids = [s.id for s in updated]
            self._apply(catalog, lambda fs: fs.update(ids, [self.render(s) for s in updated]), updated=ids)

        self._mutate(run)

    def remove(self, tool_ids: Iterable[str]) -> None:
        """Remove APIs by id (nothing is re-encoded).

        All-or-nothing, like :meth:`add` (an unknown or repeated id is a
        :class:`~toolrerank_plugins.errors.CatalogError`). Removing every API is allowed: searches then
        return no results, the empty engine saves and loads, and :meth:`add` fills it again.
        """
        tool_ids = _replayable(tool_ids)

        def run() -> None:
            catalog = self._state.catalog.copy()
            ids = catalog.remove(tool_ids)
            if not ids:
                return
            self._apply(catalog, lambda fs: fs.remove(ids), removed=ids)
            if len(catalog) == 0:
                logger.warning("engine catalog is now empty; searches return no results")

        self._mutate(run)

    def sync(self, catalog: Catalog | Iterable[ToolSpec], *, tool: str | None = None) -> SyncReport:
        """Bring the engine in step with a fresh list of APIs: add the new ones, update the changed ones
        and remove the ones that are gone, in one all-or-nothing change; unchanged APIs are not touched.

        With ``tool="name"`` only the APIs whose :attr:`~toolrerank_plugins.records.ToolSpec.tool` is
        ``name`` are compared with ``catalog`` (every API in it must belong to that tool): the rest of the
        engine stays as it is. This keeps one MCP server in step with its ``tools/list`` (the server is the
        tool, see :func:`~toolrerank_plugins.loaders.from_mcp_tools`). Without ``tool`` the whole engine
        becomes ``catalog``.

        Ids are the APIs' own ids, so an API keeps its id and position across syncs; new APIs go to the
        end in ``catalog`` order. Only the texts of added APIs and of updated APIs whose rendered text
        changed are encoded. The engine's edges and seen marks stay (edges of removed APIs go with them);
        ``catalog``'s own edges and seen marks are not read. Safe while other threads search.

        Example:
            >>> from toolrerank_plugins.loaders import from_mcp_tools
            >>> engine = Engine.build(from_mcp_tools({"git": [{"name": "git_log"}, {"name": "git_push"}],
            ...     "time": [{"name": "get_current_time"}]}), EngineConfig(retriever="bm25"))
            >>> report = engine.sync(from_mcp_tools({"git": [{"name": "git_log", "description": "Show commits"},
            ...     {"name": "git_show"}]}), tool="git")
            >>> report.added, report.updated, report.removed
            (('git/git_show',), ('git/git_log',), ('git/git_push',))
            >>> engine.catalog.ids
            ['git/git_log', 'time/get_current_time', 'git/git_show']

        Raises:
            CatalogError: an API of ``catalog`` belongs to another tool than ``tool``, or its id is taken by
                an API outside the synced part (the engine is unchanged).
            TypeError: ``tool`` is not a string or ``None``; ``catalog`` is not a Catalog or an iterable of
                ToolSpec.
        """
        if tool is not None and not isinstance(tool, str):
            raise TypeError(f"sync(): 'tool' must be a tool name (a string) or None, got {type(tool).__name__}")
        new = catalog if isinstance(catalog, Catalog) else Catalog(catalog, source="sync()")
        where = "sync()" if tool is None else f"sync(tool={tool!r})"
        if tool is not None:
            for spec in new:
                if spec.tool != tool:
                    raise CatalogError(f"{where}: API {spec.id!r} belongs to tool {spec.tool!r}, not {tool!r}")
        with self._write_lock:
            state = self._state
            old = state.catalog
            scope = [s.id for s in old if tool is None or s.tool == tool]
            in_scope = set(scope)
            for spec in new:
                if spec.id in old and spec.id not in in_scope:
                    raise CatalogError(
                        f"{where}: API id {spec.id!r} is already taken by an API of tool {old[spec.id].tool!r}"
                    )
            removed = [i for i in scope if i not in new]
            updated = [new[i] for i in scope if i in new and new[i] != old[i]]
            added = [s for s in new if s.id not in in_scope]
            if not (removed or updated or added):
                return SyncReport()
            reencoded = [s for s in updated if self.render(s) != self.render(old[s.id])]
            changed = old.copy()
            if removed:
                changed.remove(removed)
            if updated:
                changed.update(updated)
            if added:
                changed.add(added)

            def change(first_stage: FirstStage) -> None:
                if removed:
                    first_stage.remove(removed)
                if reencoded:
                    first_stage.update([s.id for s in reencoded], [self.render(s) for s in reencoded])
                if added:
                    first_stage.add([s.id for s in added], [self.render(s) for s in added])

            self._apply(changed, change)
            if len(changed) == 0:
                logger.warning("engine catalog is now empty; searches return no results")
        return SyncReport(
            added=tuple(s.id for s in added),
            updated=tuple(s.id for s in updated),
            removed=tuple(removed),
            reencoded=tuple(s.id for s in reencoded),
        )

    # -- learning from usage ---------------------------------------------------------------------
    def learn(self, records: Iterable[Any], *, forget: Iterable[str] = ()) -> dict[str, Any]:
        """Learn from the agent's own usage: logged requests and the tools that served them.

        ``records`` are :class:`~toolrerank_plugins.usage.UsageRecord` s (a usage log, see
        :func:`~toolrerank_plugins.usage.read_usage_log`), benchmark ``LabelledQuery`` s or dicts. The
        pipeline's usage memory stage (``usage_memory``; appended to the pipeline and to ``config.stages`` when
        there is none) adds them to its memory, and the catalog learns from them: the tools that served a
        request are marked *seen* (ToolRerank's adaptive truncation) and tools used together, in order, for
        at least ``min_support`` requests become weighted ``co_usage`` edges (origin ``"usage"``; TGR reads
        catalog edges). ``forget`` removes records (by id) from the memory. Incremental: only the new
        requests are encoded; the catalog's index is not rebuilt. Unknown tool ids are skipped and counted.

        All-or-nothing and safe while other threads search, like :meth:`add`. Returns a report (counts:
        learned, skipped, unknown tool ids, memory size, seen tools and edges added, seconds).

        Raises:
            TypeError: ``records`` is a single record or string.
            UsageLogError: a dict is not a valid record.
        """
        t0 = time.perf_counter()
        if isinstance(records, (str, bytes, dict)):
            raise TypeError(f"learn() takes an iterable of usage records, not a single {type(records).__name__}")
        records = list(records)
        forget = [forget] if isinstance(forget, str) else list(forget)
        with self._write_lock:
            state = self._state
            stages = [copy.copy(s) for s in state.stages]
            result = None
            for stage in stages:
                result = stage.learn(records, state.context, forget=forget)
                if result is not None:
                    break
            spec = None
            if result is None:
                from toolrerank_plugins.stages import StageSpec

                spec = StageSpec(type="usage_memory")
                stage = build_stage(spec, state.context)
                result = stage.learn(records, state.context, forget=forget)
                if result is None:
                    raise ConfigError("stage type 'usage_memory' does not learn from usage records")
                stages.append(stage)
            catalog = self._learned_catalog(state.catalog, result.seen_tools, result.edges, result.edge_origin)
            new_state = self._indexed(state, catalog, state.first_stage, stages, first_stage_is_new=False)
            if spec is not None:
                self.config = self.config.model_copy(update={"stages": [*self.config.stages, spec]})
            self._state = new_state
        report = dict(result.report)
        report["seen_tools_added"] = len(catalog.seen_tools - state.catalog.seen_tools)
        report["seen_tools"] = len(catalog.seen_tools)
        report["co_usage_edges"] = len(result.edges)
        report["seconds"] = round(time.perf_counter() - t0, 3)
        return report

    @staticmethod
    def _learned_catalog(catalog: Catalog, seen: Iterable[str], edges: Sequence[Any], origin: str | None) -> Catalog:
        """``catalog`` with ``seen`` tools marked and its edges of ``origin`` replaced by ``edges``."""
        old = [e for e in catalog.edges if origin is not None and e.origin == origin]
        if origin is None or set(old) == set(edges):
            new = catalog.copy()
        elif not old:
            new = catalog.copy()
            for e in edges:
                new.add_edge(e)
        else:
            kept = [e for e in catalog.edges if e.origin != origin]
            new = Catalog(catalog, edges=[*kept, *edges], seen_tools=catalog.seen_tools, source=catalog.source)
        new.mark_seen(sorted(set(seen)))
        return new

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the engine to a directory of non-pickle files, atomically (see :mod:`.persistence`).

        Saves one snapshot: a change made by another thread meanwhile is either wholly in it or not."""
        state = self._state
        return write_engine(
            Path(path),
            catalog=state.catalog,
            config=self.config,
            first_stage=state.first_stage,
            stages=list(state.stages),
            overwrite=overwrite,
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        embedder: Embedder | None = None,
        verify: bool = True,
        resources: Mapping[str, Any] | None = None,
    ) -> Engine:
        """Load a saved engine; a corrupt, foreign or newer-format directory raises PersistenceError.

        ``verify=False`` skips the manifest's checksums (faster on large engines you trust). ``resources``:
        live objects for the first stage (e.g. ``{"pool": pool}`` for a database-backed backend), as in
        :meth:`build`; they are never saved."""
        path = Path(path)
        for attempt in range(3):
            parts = read_engine(path, embedder=embedder, verify=verify, resources=resources)
            try:
                return cls.from_parts(
                    parts.catalog, parts.config, parts.first_stage, stage_dirs=parts.stage_dirs, embedder=embedder
                )
            except (ToolRerankError, OSError):
                # a save that committed meanwhile may have removed a version read without a pin (an older
                # release's), whose stage folders were read
                if attempt < 2 and parts.stage_dirs and version_dir(path) != parts.root:
                    continue
                raise
            finally:
                parts.release()  # the stage folders are read: saves may remove the version now
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        state = self._state
        stages = ", ".join(s.name for s in state.stages) or "none"
        return f"Engine({len(state.catalog)} APIs, retriever={self.config.retriever}, stages=[{stages}])"
