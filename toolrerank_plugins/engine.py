"""The engine: a first-stage retriever plus a pipeline of stages over a tool catalog."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.records import ScoredTool, ToolSpec, rerank
from toolrerank_plugins.render import RenderConfig, render_tool
from toolrerank_plugins.retrieval.base import Hit
from toolrerank_plugins.retrieval.bm25 import BM25Config, BM25Retriever
from toolrerank_plugins.retrieval.dense import DenseConfig, DenseRetriever
from toolrerank_plugins.retrieval.hybrid import HybridConfig, rrf_fuse
from toolrerank_plugins.stages import Stage, StageSpec, build_stage

logger = logging.getLogger(__name__)

RetrieverName = Literal["dense", "bm25", "hybrid"]


class EngineConfig(BaseModel):
    """Everything that defines an engine; saved as ``config.json``.

    Example:
        >>> EngineConfig(retriever="bm25", candidate_k=30).retriever
        'bm25'
    """

    model_config = ConfigDict(extra="forbid")

    retriever: RetrieverName = "dense"
    candidate_k: int = Field(50, ge=1, description="first-stage depth handed to the stages")
    render: RenderConfig = Field(default_factory=RenderConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    bm25: BM25Config = Field(default_factory=BM25Config)
    hybrid: HybridConfig = Field(default_factory=HybridConfig)
    stages: list[StageSpec] = Field(default_factory=list)


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


def _finish(res: SearchResult, top_k: int) -> SearchResult:
    res.results = res.results[:top_k]
    res.timings_ms["total"] = sum(res.timings_ms.values())
    return res


class Engine:
    """Search a tool catalog: ``search(query, top_k)``, ``search_batch``, and async twins.

    Build with :meth:`build`, persist with :meth:`save` / :meth:`load`, update incrementally with
    :meth:`add`, :meth:`update` and :meth:`remove`.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> hit = engine.search("what is the weather tomorrow", top_k=3)[0]
        >>> hit.tool.tool, hit.rank, sorted(hit.stage_scores)
        ('SkyCast', 1, ['bm25'])
    """

    def __init__(self, catalog: Catalog, config: EngineConfig, *, embedder: Embedder | None = None) -> None:
        if len(catalog) == 0:
            raise ConfigError("cannot build an engine over an empty catalog; load or add at least one API")
        self.catalog = catalog
        self.config = config
        self._embedder = embedder
        self.dense: DenseRetriever | None = None
        self.bm25: BM25Retriever | None = None
        self.stages: list[Stage] = []

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
        self = cls(catalog, config or EngineConfig(), embedder=embedder)
        ids = catalog.ids
        texts = [self.render(catalog[i]) for i in ids]
        if self.config.retriever in ("dense", "hybrid"):
            self.dense = DenseRetriever(self.config.dense, embedder=embedder)
            self.dense.index(ids, texts, cache=embedding_cache)
        if self.config.retriever in ("bm25", "hybrid"):
            self.bm25 = BM25Retriever(self.config.bm25)
            self.bm25.index(ids, texts)
        self.stages = [build_stage(spec, self) for spec in self.config.stages]
        self._notify_index()
        return self

    def render(self, spec: ToolSpec) -> str:
        """The text models see for ``spec`` (see :func:`~toolrerank_plugins.render.render_tool`)."""
        return render_tool(spec, self.config.render)

    def _notify_index(self) -> None:
        for stage in self.stages:
            hook = getattr(stage, "on_index", None)
            if hook is not None:
                hook(self)

    @property
    def embedder(self) -> Embedder:
        """The bi-encoder (for stages that need embeddings: hierarchy similarity, TGR, ...)."""
        if self.dense is not None:
            return self.dense.embedder
        if self._embedder is None:
            from toolrerank_plugins.encoders import SentenceTransformerEmbedder

            c = self.config.dense
            self._embedder = SentenceTransformerEmbedder(
                c.model_name_or_path, device=c.device, batch_size=c.batch_size, max_length=c.max_length
            )
        return self._embedder

    # -- first stage -----------------------------------------------------------------------------
    def retrieve(self, queries: Sequence[str], top_k: int) -> list[list[ScoredTool]]:
        """First-stage retrieval only (stages use this to re-retrieve for rewritten queries)."""
        hits = self._first_stage(list(queries), top_k)
        return [self._to_scored(h, self.config.retriever) for h in hits]

    def _first_stage(self, queries: list[str], depth: int) -> list[list[Hit] | list[tuple[str, float, dict]]]:
        kind = self.config.retriever
        if kind == "dense":
            assert self.dense is not None
            return list(self.dense.search(queries, depth))
        if kind == "bm25":
            assert self.bm25 is not None
            return list(self.bm25.search(queries, depth))
        assert self.dense is not None and self.bm25 is not None
        hc = self.config.hybrid
        deep = max(depth, hc.candidates)
        dense_hits = self.dense.search(queries, deep)
        bm25_hits = self.bm25.search(queries, deep)
        out: list[Any] = []
        for dh, bh in zip(dense_hits, bm25_hits):
            fused = rrf_fuse([(dh, hc.dense_weight), (bh, hc.bm25_weight)], rrf_k=hc.rrf_k, top_k=depth)
            dmap, bmap = dict(dh), dict(bh)
            out.append(
                [
                    (
                        tid,
                        score,
                        {
                            **({"dense": dmap[tid]} if tid in dmap else {}),
                            **({"bm25": bmap[tid]} if tid in bmap else {}),
                        },
                    )
                    for tid, score in fused
                ]
            )
        return out

    def _to_scored(self, hits: Sequence[Any], stage: str) -> list[ScoredTool]:
        out = []
        for rank, hit in enumerate(hits, start=1):
            tid, score = hit[0], hit[1]
            extra = hit[2] if len(hit) > 2 else {}
            spec = self.catalog.get(tid)
            if spec is None:  # index out of sync with catalog: never return a ghost API
                logger.warning("index returned unknown id %r; skipped", tid)
                continue
            out.append(ScoredTool(spec, float(score), rank, {**extra, stage: float(score)}))
        return rerank(out) if len(out) != len(hits) else out

    # -- search ----------------------------------------------------------------------------------
    def search(self, query: str, top_k: int = 5) -> list[ScoredTool]:
        """The ``top_k`` best APIs for ``query``, best first."""
        return self.search_detailed(query, top_k).results

    def search_batch(self, queries: Sequence[str], top_k: int = 5) -> list[list[ScoredTool]]:
        return [r.results for r in self.search_batch_detailed(queries, top_k)]

    def search_detailed(self, query: str, top_k: int = 5) -> SearchResult:
        return self.search_batch_detailed([query], top_k)[0]

    def search_batch_detailed(self, queries: Sequence[str], top_k: int = 5) -> list[SearchResult]:
        """Rankings with per-stage traces and timings (first-stage encoding is batched)."""
        queries = _checked_queries(queries, top_k)
        if not queries:
            return []
        depth = max(top_k, self.config.candidate_k) if self.stages else top_k
        t0 = time.perf_counter()
        first = self._first_stage(queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)
        results = []
        for q, hits in zip(queries, first):
            res = SearchResult(q, self._to_scored(hits, self.config.retriever), timings_ms={"first_stage": first_ms})
            results.append(_finish(self._run_stages(res), top_k))
        return results

    async def asearch(self, query: str, top_k: int = 5) -> list[ScoredTool]:
        """Async twin of :meth:`search` (same results)."""
        return (await self.asearch_detailed(query, top_k)).results

    async def asearch_batch(self, queries: Sequence[str], top_k: int = 5) -> list[list[ScoredTool]]:
        return [r.results for r in await self.asearch_batch_detailed(queries, top_k)]

    async def asearch_detailed(self, query: str, top_k: int = 5) -> SearchResult:
        return (await self.asearch_batch_detailed([query], top_k))[0]

    async def asearch_batch_detailed(self, queries: Sequence[str], top_k: int = 5) -> list[SearchResult]:
        """Async twin: stages with an ``arun`` (LLM stages) run natively async, CPU work in a thread."""
        if not any(hasattr(s, "arun") for s in self.stages):
            return await asyncio.to_thread(self.search_batch_detailed, queries, top_k)
        queries = _checked_queries(queries, top_k)
        if not queries:
            return []
        depth = max(top_k, self.config.candidate_k)
        t0 = time.perf_counter()
        first = await asyncio.to_thread(self._first_stage, queries, depth)
        first_ms = (time.perf_counter() - t0) * 1000 / len(queries)

        async def one(q: str, hits: Any) -> SearchResult:
            res = SearchResult(q, self._to_scored(hits, self.config.retriever), timings_ms={"first_stage": first_ms})
            return _finish(await self._arun_stages(res), top_k)

        return list(await asyncio.gather(*(one(q, h) for q, h in zip(queries, first))))

    def _run_stages(self, res: SearchResult) -> SearchResult:
        """Each stage in turn over ``res.results``, recording its trace and time in ``res``."""
        for stage in self.stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            res.results = rerank(stage.run(res.query, res.results, self, trace))
            res.trace[stage.name] = trace
            res.timings_ms[stage.name] = (time.perf_counter() - t) * 1000
        return res

    async def _arun_stages(self, res: SearchResult) -> SearchResult:
        """Async twin of :meth:`_run_stages`: ``arun`` stages are awaited, the others run in a thread."""
        for stage in self.stages:
            t = time.perf_counter()
            trace: dict[str, Any] = {}
            arun = getattr(stage, "arun", None)
            if arun is not None:
                out = await arun(res.query, res.results, self, trace)
            else:
                out = await asyncio.to_thread(stage.run, res.query, res.results, self, trace)
            res.results = rerank(out)
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
        if not any(hasattr(s, "arun") for s in self.stages):
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
        ids = [s.id for s in added]
        texts = [self.render(s) for s in added]
        if self.dense is not None:
            self.dense.add(ids, texts)
        if self.bm25 is not None:
            self.bm25.add(ids, texts)
        self._notify_index()

    def update(self, specs: Iterable[ToolSpec]) -> None:
        """Replace APIs by id; only the changed texts are re-encoded."""
        updated = self.catalog.update(specs)
        ids = [s.id for s in updated]
        for r in (self.dense, self.bm25):
            if r is not None:
                r.remove(ids)
                r.add(ids, [self.render(s) for s in updated])
        self._notify_index()

    def remove(self, tool_ids: Iterable[str]) -> None:
        """Remove APIs by id (nothing is re-encoded)."""
        ids = self.catalog.remove(tool_ids)
        if len(self.catalog) == 0:
            logger.warning("engine catalog is now empty; searches return no results")
        for r in (self.dense, self.bm25):
            if r is not None:
                r.remove(ids)
        self._notify_index()

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the engine to a directory of non-pickle files, atomically (see :mod:`.persistence`)."""
        from toolrerank_plugins.persistence import save_engine

        return save_engine(self, Path(path), overwrite=overwrite)

    @classmethod
    def load(cls, path: str | Path, *, embedder: Embedder | None = None) -> Engine:
        """Load a saved engine; a corrupt, foreign or newer-format directory raises PersistenceError."""
        from toolrerank_plugins.persistence import load_engine

        return load_engine(Path(path), embedder=embedder)

    def __repr__(self) -> str:
        stages = ", ".join(s.name for s in self.stages) or "none"
        return f"Engine({len(self.catalog)} APIs, retriever={self.config.retriever}, stages=[{stages}])"
