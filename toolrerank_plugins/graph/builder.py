"""Building the dependency graph at catalog scale: candidate pruning, dependency sources, incremental updates.

The paper scores all N^2 pairs. Here only *candidate pairs* are scored by a model (discriminator or LLM):

- pairs inside one scope (same tool, same category, or the whole catalog when it is small, see
  :class:`PruningConfig`), and within a scope
- all pairs when the scope has at most ``all_pairs_max`` APIs, else each API's ``knn`` nearest neighbours
  (faiss inner product on the engine's embeddings), plus
- schema-compatible pairs (an output name of one is an input name of the other).

Each API contributes at most ``knn`` + its schema matches, so the number of pairs, and the build time,
grows linearly with the catalog. Zero-training sources (declared edges, the schema detector) need no
candidates at all.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import require
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.schema_deps import SchemaConfig, SchemaDependencyDetector, Scope, resolve_scope, scope_key
from toolrerank_plugins.graph.tool_graph import CATALOG_ORIGIN, ToolGraph, api_hash
from toolrerank_plugins.records import Edge

logger = logging.getLogger(__name__)

Source = Literal["declared", "schema", "discriminator", "llm", "file"]
DEFAULT_SOURCES: tuple[Source, ...] = ("declared", "schema")


class PruningConfig(ConfigModel):
    """Which API pairs a model scores.

    Attributes:
        scope: ``tool`` / ``category`` / ``all``; ``auto`` = ``all`` up to ``all_scope_max`` APIs, else
            ``tool`` (catalogs with a hierarchy) or ``category`` (flat catalogs).
        all_scope_max: catalog size up to which ``auto`` means the whole catalog is one scope.
        all_pairs_max: a scope this small gets every pair.
        knn: nearest neighbours per API inside a larger scope.
        schema_pairs: add schema-compatible pairs (output name of one = input name of the other).
        max_pairs: hard cap on candidate pairs (the closest are kept); ``None`` for no cap.
    """

    model_config = ConfigDict(extra="forbid")

    scope: Scope = "auto"
    all_scope_max: int = Field(2000, ge=1)
    all_pairs_max: int = Field(16, ge=1)
    knn: int = Field(5, ge=0)
    schema_pairs: bool = True
    max_pairs: int | None = Field(None, ge=1)


class DependencyJudge(Protocol):
    """Anything that turns candidate pairs into edges (the trained discriminator, an LLM judge)."""

    def edges(self, catalog: Catalog, pairs: Sequence[tuple[str, str]]) -> list[Edge]: ...


class DiscriminatorJudge:
    """Adapter: :class:`~toolrerank_plugins.graph.discriminator.DependencyDiscriminator` as a judge."""

    def __init__(self, model: Any, threshold: float = 0.0) -> None:
        self.model = model
        self.threshold = threshold

    def edges(self, catalog: Catalog, pairs: Sequence[tuple[str, str]]) -> list[Edge]:
        from toolrerank_plugins.graph.discriminator import discriminator_edges

        return discriminator_edges(self.model, catalog, pairs, threshold=self.threshold)


def candidate_pairs(
    catalog: Catalog,
    embeddings: np.ndarray | None,
    ids: Sequence[str] | None,
    config: PruningConfig,
    *,
    only: Iterable[str] | None = None,
    schema: SchemaConfig | None = None,
) -> list[tuple[str, str]]:
    """Unordered candidate pairs ``(a, b)`` with ``a < b``; with ``only``, just pairs touching those ids.

    ``embeddings[i]`` must belong to ``ids[i]`` (unit rows); without embeddings only small scopes and
    schema pairs are used.
    """
    scope = resolve_scope(catalog, config.scope, config.all_scope_max)
    focus = None if only is None else set(only)
    groups: dict[str, list[str]] = defaultdict(list)
    for spec in catalog:
        groups[scope_key(spec, scope)].append(spec.id)
    row = {tid: i for i, tid in enumerate(ids)} if ids is not None else {}
    pairs: dict[tuple[str, str], float] = {}

    def keep(a: str, b: str, score: float) -> None:
        if a == b or (focus is not None and a not in focus and b not in focus):
            return
        key = (a, b) if a < b else (b, a)
        if pairs.get(key, -np.inf) < score:
            pairs[key] = score

    faiss = require("faiss") if embeddings is not None and config.knn > 0 else None
    for members in groups.values():
        if len(members) < 2:
            continue
        if len(members) <= config.all_pairs_max:
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    keep(a, b, 1.0)
            continue
        if faiss is None or embeddings is None:
            continue
        rows = [row[m] for m in members if m in row]
        if len(rows) < 2:
            continue
        mat = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
        index = faiss.IndexFlatIP(mat.shape[1])
        index.add(mat)
        queries = range(len(rows))
        if focus is not None:
            queries = [i for i, r in enumerate(rows) if ids is not None and ids[r] in focus]  # type: ignore[assignment]
            if not queries:
                # New APIs are only neighbours of old ones, found from the new side below.
                continue
        qmat = mat[list(queries)]
        k = min(config.knn + 1, len(rows))
        scores, nbrs = index.search(qmat, k)
        members_in = [ids[r] for r in rows] if ids is not None else []
        for qi, (srow, nrow) in zip(queries, zip(scores, nbrs)):
            for s, j in zip(srow, nrow):
                if j >= 0 and j != qi:
                    keep(members_in[qi], members_in[j], float(s))
    if config.schema_pairs:
        for a, b in SchemaDependencyDetector(schema).compatible_pairs(catalog):
            keep(a, b, 1.0)
    ordered = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
    if config.max_pairs is not None and len(ordered) > config.max_pairs:
        logger.warning("candidate pairs capped at %d of %d (raise pruning.max_pairs)", config.max_pairs, len(ordered))
        ordered = ordered[: config.max_pairs]
    return [p for p, _ in ordered]


class GraphBuildConfig(ConfigModel):
    """What goes into a dependency graph."""

    model_config = ConfigDict(extra="forbid")

    sources: list[Source] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    pruning: PruningConfig = Field(default_factory=PruningConfig)
    schema_detector: SchemaConfig = Field(default_factory=SchemaConfig)
    on_unknown: Literal["error", "drop"] = "error"


def build_graph(
    catalog: Catalog,
    config: GraphBuildConfig | None = None,
    *,
    embeddings: np.ndarray | None = None,
    ids: Sequence[str] | None = None,
    judges: dict[str, DependencyJudge] | None = None,
    base: ToolGraph | None = None,
    timings: dict[str, float] | None = None,
) -> ToolGraph:
    """Build the dependency graph of ``catalog`` from the configured sources.

    Args:
        catalog: the APIs (and their declared ``edges``).
        config: sources, pruning and schema settings.
        embeddings, ids: unit embeddings of the APIs (row ``i`` is ``ids[i]``) for nearest-neighbour pruning.
        judges: ``{"discriminator": ..., "llm": ...}`` for the model sources named in ``config.sources``.
        base: edges to start from (source ``file``: a graph built earlier, checked against the catalog).
        timings: filled with seconds per step when given.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> g = build_graph(tiny_catalog())
        >>> g.stats()["edges_by_origin"]
        {'declared': 2}
    """
    cfg = config or GraphBuildConfig()
    judges = judges or {}
    timings = timings if timings is not None else {}
    t = time.perf_counter()
    hashes = {s.id: api_hash(s) for s in catalog}
    graph = ToolGraph.empty(catalog, hashes)
    timings["hash"] = time.perf_counter() - t
    if "file" in cfg.sources:
        if base is None:
            raise ValueError("graph source 'file' needs a graph (the 'base' argument / graph_file setting)")
        base.check_catalog(catalog)
        graph.add_edges(base.edges(), on_unknown=cfg.on_unknown)
    _add_sources(graph, catalog, cfg, embeddings=embeddings, ids=ids, judges=judges, only=None, timings=timings)
    logger.info("dependency graph: %s", graph.stats())
    return graph


def _add_sources(
    graph: ToolGraph,
    catalog: Catalog,
    cfg: GraphBuildConfig,
    *,
    embeddings: np.ndarray | None,
    ids: Sequence[str] | None,
    judges: dict[str, DependencyJudge],
    only: set[str] | None,
    timings: dict[str, float],
) -> None:
    if "declared" in cfg.sources:
        t = time.perf_counter()
        graph.remove_origin("declared")
        # the catalog's own origin (labelled, derived, usage ...) is kept: the declared chains follow only some
        graph.add_edges(catalog.edges, origin="declared", on_unknown=cfg.on_unknown, keep_origin_as=CATALOG_ORIGIN)
        timings["declared"] = time.perf_counter() - t
    if "schema" in cfg.sources:
        t = time.perf_counter()
        graph.add_edges(SchemaDependencyDetector(cfg.schema_detector).detect(catalog, only=only), origin="schema")
        timings["schema"] = time.perf_counter() - t
    model_sources = [s for s in ("discriminator", "llm") if s in cfg.sources]
    if not model_sources:
        return
    for s in model_sources:
        if s not in judges:
            raise ValueError(
                f"graph source {s!r} needs a judge: pass judges={{{s!r}: ...}} (for the stage: set "
                "discriminator_path, or build the graph with an LLM judge and use source 'file')"
            )
    t = time.perf_counter()
    pairs = candidate_pairs(catalog, embeddings, ids, cfg.pruning, only=only, schema=cfg.schema_detector)
    timings["candidates"] = time.perf_counter() - t
    timings["n_candidate_pairs"] = float(len(pairs))
    for s in model_sources:
        t = time.perf_counter()
        graph.add_edges(judges[s].edges(catalog, pairs), origin=s, on_unknown=cfg.on_unknown)
        timings[s] = time.perf_counter() - t


def update_graph(
    graph: ToolGraph,
    catalog: Catalog,
    config: GraphBuildConfig,
    *,
    embeddings: np.ndarray | None = None,
    ids: Sequence[str] | None = None,
    judges: dict[str, DependencyJudge] | None = None,
) -> dict[str, int]:
    """Bring ``graph`` in line with ``catalog`` after APIs were added, edited or removed.

    Removed and edited APIs leave the graph with their edges; added and edited ones are scored against
    the catalog (only pairs touching them). Returns counts of what changed.
    """
    new_hashes = {s.id: api_hash(s) for s in catalog}
    old_hashes = graph.node_hashes()
    gone = [tid for tid, h in old_hashes.items() if new_hashes.get(tid) != h]
    fresh = {tid: h for tid, h in new_hashes.items() if old_hashes.get(tid) != h}
    graph.remove_apis(gone)
    graph.add_apis(fresh)
    from toolrerank_plugins.graph.tool_graph import catalog_fingerprint

    graph.fingerprint = catalog_fingerprint(catalog, new_hashes)
    if fresh or "declared" in config.sources:
        _add_sources(
            graph,
            catalog,
            config,
            embeddings=embeddings,
            ids=ids,
            judges=judges or {},
            only=set(fresh) if fresh else set(),
            timings={},
        )
    return {
        "removed": len(gone) - len(set(gone) & set(fresh)),
        "added": len(fresh) - len(set(gone) & set(fresh)),
        "changed": len(set(gone) & set(fresh)),
    }
