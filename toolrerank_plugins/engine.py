"""The engine: one first stage plus a pipeline of stages over a tool catalog.

How the pieces fit (see ``docs/engine.md``, "Architecture"): :class:`Engine` owns the catalog, one
:class:`~toolrerank_plugins.retrieval.base.FirstStage` and a list of
:class:`~toolrerank_plugins.stages.Stage`; stages see it only through a
:class:`~toolrerank_plugins.stages.StageContext`; :mod:`~toolrerank_plugins.persistence` reads and writes
the parts and the engine assembles itself from them (:meth:`Engine.from_parts`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig, RetrieverName
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.persistence import read_engine, write_engine
from toolrerank_plugins.records import ScoredTool, ToolSpec, renumber
from toolrerank_plugins.render import render_tool
from toolrerank_plugins.retrieval.base import DocTransform, FirstStage, Hit, get_first_stage_type
from toolrerank_plugins.stages import Stage, StageContext, as_stage, build_stage

if TYPE_CHECKING:
    import numpy as np

    from toolrerank_plugins.retrieval.bm25 import BM25Retriever
    from toolrerank_plugins.retrieval.dense import DenseRetriever

logger = logging.getLogger(__name__)

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
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    out = list(queries)
    for q in out:
        if not isinstance(q, str):
            raise TypeError(f"queries must be strings, got {type(q).__name__}")
    return out


def _finish(res: SearchResult, top_k: int, exclude: frozenset[str]) -> SearchResult:
    if exclude:
        res.results = renumber([r for r in res.results if r.id not in exclude])
    res.results = res.results[:top_k]
    res.timings_ms["total"] = sum(res.timings_ms.values())
    return res


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
    """The engine as its stages see it (see :class:`~toolrerank_plugins.stages.StageContext`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._names: frozenset[str] | None = None

    @property
    def catalog(self) -> Catalog:
        return self._engine.catalog

    @property
    def embedder(self) -> Embedder:
        return self._engine.embedder

    @property
    def depth(self) -> int:
        return self._engine.config.depth

    @property
    def has_embeddings(self) -> bool:
        return self._engine.first_stage.has_embeddings

    @property
    def encoder_path(self) -> str | None:
        return self._engine.config.dense.model_name_or_path if self.has_embeddings else None

    @property
    def llm(self) -> Any:
        return self._engine.llm

    def render(self, spec: ToolSpec) -> str:
        return self._engine.render(spec)

    def retrieve(self, queries: Sequence[str], depth: int) -> list[list[ScoredTool]]:
        return self._engine.retrieve(queries, depth)

    def cached_embeddings(self, ids: Sequence[str]) -> np.ndarray | None:
        return self._engine.first_stage.embeddings_for(ids)

    def known_names(self) -> frozenset[str]:
        if self._names is None:
            names: set[str] = set()
            for spec in self.catalog:
                names.add(spec.name.lower())
                if spec.tool:
                    names.add(spec.tool.lower())
            self._names = frozenset(names)
        return self._names

    def index_changed(self) -> None:
        self._names = None


class Engine:
    """Search a tool catalog: ``search(query, top_k)``, ``search_batch``, and async twins.

    Build with :meth:`build`, persist with :meth:`save` / :meth:`load`, update incrementally with
    :meth:`add`, :meth:`update` and :meth:`remove`. An engine is one first stage
    (:attr:`first_stage`, named by ``config.retriever``) plus :attr:`stages`.

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
        if len(catalog) == 0:
            raise ConfigError("cannot build an engine over an empty catalog; load or add at least one API")
        self.catalog = catalog
        self.config = config
        self.first_stage = first_stage
        self._embedder = embedder
        self._stages: list[Stage] = []
        self._transform_installed = False
        #: An LLM for the LLM stages when none is registered under their ``llm`` name (set by the user).
        self.llm: Any = None
        self.context: StageContext = _EngineContext(self)

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        catalog: Catalog,
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        embedding_cache: dict[str, Any] | None = None,
    ) -> Engine:
        """Index ``catalog`` with the configured first stage and build the configured stages."""
        config = config or EngineConfig()
        if len(catalog) == 0:
            raise ConfigError("cannot build an engine over an empty catalog; load or add at least one API")
        first_stage = get_first_stage_type(config.retriever).build(config, embedder)
        ids = catalog.ids
        first_stage.index(ids, [render_tool(catalog[i], config.render) for i in ids], cache=embedding_cache)
        return cls.from_parts(catalog, config, first_stage, embedder=embedder)

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
        when ``stage_dirs`` is given) and let them see the index."""
        self = cls(catalog, config, first_stage, embedder=embedder)
        dirs = list(stage_dirs) if stage_dirs is not None else [None] * len(config.stages)
        if len(dirs) != len(config.stages):
            raise ConfigError(f"{len(dirs)} stage folders for {len(config.stages)} configured stages")
        self._stages = [build_stage(spec, self.context, d) for spec, d in zip(config.stages, dirs)]
        self._index_changed()
        return self

    @property
    def stages(self) -> list[Stage]:
        return self._stages

    @stages.setter
    def stages(self, stages: Iterable[Any]) -> None:
        self.set_stages(stages)

    def set_stages(self, stages: Iterable[Any]) -> None:
        """Replace the stage pipeline with already-built stages (e.g. from a tuning script); each then sees
        the index (``on_index``). ``config.stages`` is not changed."""
        self._stages = [as_stage(s) for s in stages]
        self._index_changed()

    def render(self, spec: ToolSpec) -> str:
        """The text models see for ``spec`` (see :func:`~toolrerank_plugins.render.render_tool`)."""
        return render_tool(spec, self.config.render)

    def _index_changed(self) -> None:
        """After the index is built, loaded or changed: stages see it, then document transforms apply."""
        ctx = self.context
        if isinstance(ctx, _EngineContext):
            ctx.index_changed()
        for stage in self._stages:
            stage.on_index(ctx)
        transform = _compose([t for s in self._stages if (t := s.document_transform()) is not None])
        if transform is not None or self._transform_installed:
            self.first_stage.set_document_transform(transform)
            self._transform_installed = transform is not None

    @property
    def embedder(self) -> Embedder:
        """The bi-encoder (for stages that need embeddings: hierarchy similarity, TGR, ...)."""
        encoder = self.first_stage.encoder
        if encoder is not None:
            return encoder
        if self._embedder is None:
            from toolrerank_plugins.encoders import SentenceTransformerEmbedder

            c = self.config.dense
            self._embedder = SentenceTransformerEmbedder(
                c.model_name_or_path, device=c.device, batch_size=c.batch_size, max_length=c.max_length
            )
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
        """First-stage retrieval only (stages use this to re-retrieve for rewritten queries)."""
        hits = self.first_stage.search(list(queries), top_k) if queries else []
        return [self._to_scored(h) for h in hits]

    def _to_scored(self, hits: Sequence[Hit]) -> list[ScoredTool]:
        stage = self.config.retriever
        out = []
        for rank, hit in enumerate(hits, start=1):
            spec = self.catalog.get(hit.id)
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

    def _depth(self, top_k: int, exclude: frozenset[str]) -> int:
        """First-stage depth: ``top_k`` (at least ``config.depth`` with stages), deeper by the excluded ids."""
        wanted = top_k + sum(1 for t in exclude if t in self.catalog)
        return max(wanted, self.config.depth) if self._stages else wanted

    def search(self, query: str, top_k: int = 5, *, exclude: Iterable[str] = ()) -> list[ScoredTool]:
        """The ``top_k`` best APIs for ``query``, best first; ids in ``exclude`` are never returned (the
        search goes that much deeper, so ``top_k`` results still come back when the catalog has them)."""
        return self.search_detailed(query, top_k, exclude=exclude).results

    def search_batch(
        self, queries: Sequence[str], top_k: int = 5, *, exclude: Iterable[str] = ()
    ) -> list[list[ScoredTool]]:
        return [r.results for r in self.search_batch_detailed(queries, top_k, exclude=exclude)]

    def search_detailed(self, query: str, top_k: int = 5, *, exclude: Iterable[str] = ()) -> SearchResult:
        return self.search_batch_detailed([query], top_k, exclude=exclude)[0]

    def search_batch_detailed(
        self, queries: Sequence[str], top_k: int = 5, *, exclude: Iterable[str] = ()
    ) -> list[SearchResult]:
        """Rankings with per-stage traces and timings (first-stage encoding is batched)."""
        queries = _checked_queries(queries, top_k)
        skip = self._excluded(exclude)
        if not queries:
            return []
        depth = self._depth(top_k, skip)
        t0 = time.perf_counter()
        first = self.first_stage.search(queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)
        results = []
        for q, hits in zip(queries, first):
            res = SearchResult(q, self._to_scored(hits), timings_ms={"first_stage": first_ms})
            results.append(_finish(self._run_stages(res), top_k, skip))
        return results

    async def asearch(self, query: str, top_k: int = 5, *, exclude: Iterable[str] = ()) -> list[ScoredTool]:
        """Async twin of :meth:`search` (same results)."""
        return (await self.asearch_detailed(query, top_k, exclude=exclude)).results

    async def asearch_batch(
        self, queries: Sequence[str], top_k: int = 5, *, exclude: Iterable[str] = ()
    ) -> list[list[ScoredTool]]:
        return [r.results for r in await self.asearch_batch_detailed(queries, top_k, exclude=exclude)]

    async def asearch_detailed(self, query: str, top_k: int = 5, *, exclude: Iterable[str] = ()) -> SearchResult:
        return (await self.asearch_batch_detailed([query], top_k, exclude=exclude))[0]

    async def asearch_batch_detailed(
        self, queries: Sequence[str], top_k: int = 5, *, exclude: Iterable[str] = ()
    ) -> list[SearchResult]:
        """Async twin: natively async stages (LLM stages) are awaited, CPU work runs in a thread."""
        if not any(s.native_async for s in self._stages):
            return await asyncio.to_thread(self.search_batch_detailed, queries, top_k, exclude=exclude)
        queries = _checked_queries(queries, top_k)
        skip = self._excluded(exclude)
        if not queries:
            return []
        depth = self._depth(top_k, skip)
        t0 = time.perf_counter()
        first = await asyncio.to_thread(self.first_stage.search, queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)

        async def one(q: str, hits: list[Hit]) -> SearchResult:
            res = SearchResult(q, self._to_scored(hits), timings_ms={"first_stage": first_ms})
            return _finish(await self._arun_stages(res), top_k, skip)

        return list(await asyncio.gather(*(one(q, h) for q, h in zip(queries, first))))

    def _run_stages(self, res: SearchResult) -> SearchResult:
        """Each stage in turn over ``res.results``, recording its trace and time in ``res``."""
        for stage in self._stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            res.results = renumber(stage.run(res.query, res.results, self.context, trace))
            res.trace[stage.name] = trace
            res.timings_ms[stage.name] = (time.perf_counter() - t) * 1000
        return res

    async def _arun_stages(self, res: SearchResult) -> SearchResult:
        """Async twin of :meth:`_run_stages` (:meth:`Stage.arun` runs sync stages in a thread)."""
        for stage in self._stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            res.results = renumber(await stage.arun(res.query, res.results, self.context, trace))
            res.trace[stage.name] = trace
            res.timings_ms[stage.name] = (time.perf_counter() - t) * 1000
        return res

    # -- reranking candidates from elsewhere ------------------------------------------------------
    def rerank(
        self, query: str, candidates: Sequence[ToolSpec | ScoredTool], top_k: int | None = None
    ) -> list[ScoredTool]:
        """Run the configured stages over ``candidates`` that came from any retriever (no first stage).

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
        res = self._run_stages(SearchResult(query, self._rerank_inputs(query, candidates, top_k)))
        return res.results if top_k is None else res.results[:top_k]

    async def arerank(
        self, query: str, candidates: Sequence[ToolSpec | ScoredTool], top_k: int | None = None
    ) -> list[ScoredTool]:
        """Async twin of :meth:`rerank` (same results): ``arun`` stages run natively, others in a thread."""
        if not any(s.native_async for s in self._stages):
            return await asyncio.to_thread(self.rerank, query, candidates, top_k)
        res = await self._arun_stages(SearchResult(query, self._rerank_inputs(query, candidates, top_k)))
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
    def add(self, specs: Iterable[ToolSpec]) -> None:
        """Add new APIs; only their texts are encoded."""
        added = self.catalog.add(specs)
        self.first_stage.add([s.id for s in added], [self.render(s) for s in added])
        self._index_changed()

    def update(self, specs: Iterable[ToolSpec]) -> None:
        """Replace APIs by id; only the changed texts are re-encoded."""
        updated = self.catalog.update(specs)
        ids = [s.id for s in updated]
        for part in self.first_stage.parts.values():
            part.remove(ids)
            part.add(ids, [self.render(s) for s in updated])
        self._index_changed()

    def remove(self, tool_ids: Iterable[str]) -> None:
        """Remove APIs by id (nothing is re-encoded)."""
        ids = self.catalog.remove(tool_ids)
        if len(self.catalog) == 0:
            logger.warning("engine catalog is now empty; searches return no results")
        self.first_stage.remove(ids)
        self._index_changed()

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the engine to a directory of non-pickle files, atomically (see :mod:`.persistence`)."""
        return write_engine(
            Path(path),
            catalog=self.catalog,
            config=self.config,
            first_stage=self.first_stage,
            stages=self._stages,
            overwrite=overwrite,
        )

    @classmethod
    def load(cls, path: str | Path, *, embedder: Embedder | None = None, verify: bool = True) -> Engine:
        """Load a saved engine; a corrupt, foreign or newer-format directory raises PersistenceError.

        ``verify=False`` skips the manifest's checksums (faster on large engines you trust)."""
        parts = read_engine(Path(path), embedder=embedder, verify=verify)
        return cls.from_parts(
            parts.catalog, parts.config, parts.first_stage, stage_dirs=parts.stage_dirs, embedder=embedder
        )

    def __repr__(self) -> str:
        stages = ", ".join(s.name for s in self._stages) or "none"
        return f"Engine({len(self.catalog)} APIs, retriever={self.config.retriever}, stages=[{stages}])"
