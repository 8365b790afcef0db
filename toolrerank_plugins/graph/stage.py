"""The ``tgr`` stage: Tool Graph Retriever as an engine stage.

At index time (build, load, add, update, remove) the stage builds or updates the dependency graph and
declares the graph convolution as its :meth:`~TGRStage.document_transform`, which the engine installs in
the dense index (re-indexed from cached raw vectors), so query latency does not change. At query time it
only runs the optional prerequisite expansion.

Saved inside the engine directory (``stages/NN-tgr/``): ``graph.json`` (networkx node-link, stamped with
the catalog fingerprint) and, when one is used, ``discriminator/`` (a ``save_pretrained`` folder).

Example:
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.stages import StageSpec
    >>> from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
    >>> cfg = EngineConfig(stages=[StageSpec(type="tgr", params={"expansion": {"enabled": True}})])
    >>> engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    >>> [r.tool.name for r in engine.search("change the email address of my account", top_k=2)]
    ['update_email', 'login']
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.graph.builder import (
    DEFAULT_SOURCES,
    DependencyJudge,
    DiscriminatorJudge,
    GraphBuildConfig,
    PruningConfig,
    Source,
    build_graph,
    update_graph,
)
from toolrerank_plugins.graph.expansion import ExpansionConfig, chain_budget, expand_prerequisites
from toolrerank_plugins.graph.propagation import Direction, propagate
from toolrerank_plugins.graph.schema_deps import SchemaConfig
from toolrerank_plugins.graph.tool_graph import GraphError, ToolGraph
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.retrieval.base import DocTransform
from toolrerank_plugins.stages import Stage, StageContext, StageType

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.json"
DISCRIMINATOR_DIR = "discriminator"


class TGRConfig(ConfigModel):
    """Parameters of the ``tgr`` stage.

    Attributes:
        sources: where edges come from: ``declared`` (catalog edges), ``schema`` (returns -> parameter),
            ``discriminator`` (needs ``discriminator_path``), ``file`` (needs ``graph_file``: a graph from
            ``toolrerank graph build``, e.g. one judged by an LLM), ``llm`` is not available here (an LLM is
            not part of a config): build such a graph with the Python API and load it as ``file``.
        graph_file: node-link JSON written by ``toolrerank graph build`` (must match the catalog).
        discriminator_path: folder saved by ``toolrerank train discriminator``.
        discriminator_threshold: a discriminator edge needs its class to be the argmax and at least this probability.
        direction: how embeddings flow along edges (see :mod:`toolrerank_plugins.graph.propagation`).
        alpha: blend of propagated (1.0) and original (0.0) embeddings.
        weighted: use edge weights (discriminator probabilities) in the adjacency.
        propagate: apply the graph convolution at index time (needs a dense or hybrid retriever).
        expansion: prerequisite expansion after retrieval.
        pruning: candidate pairs for the discriminator.
        schema_detector: schema detector settings.
        on_unknown: edges naming unknown APIs: ``error`` or ``drop`` (counted in the graph stats).
    """

    model_config = ConfigDict(extra="forbid")

    sources: list[Source] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    graph_file: str | None = None
    discriminator_path: str | None = None
    discriminator_threshold: float = Field(0.0, ge=0.0, le=1.0)
    direction: Direction = "into_prerequisite"
    alpha: float = Field(0.5, ge=0.0, le=1.0)
    weighted: bool = False
    propagate: bool = True
    expansion: ExpansionConfig = Field(default_factory=ExpansionConfig)
    pruning: PruningConfig = Field(default_factory=PruningConfig)
    schema_detector: SchemaConfig = Field(default_factory=SchemaConfig)
    on_unknown: Literal["error", "drop"] = "error"

    def build_config(self) -> GraphBuildConfig:
        return GraphBuildConfig(
            sources=self.sources, pruning=self.pruning, schema_detector=self.schema_detector, on_unknown=self.on_unknown
        )


class TGRStage(Stage):
    """Graph-encoded dense retrieval plus optional prerequisite expansion (see module docs)."""

    score_scale = (
        "set only on prerequisites it inserted or moved: a score between its new neighbours' (why: the trace's "
        "'expanded', prerequisite_of); other results keep the earlier stage's score"
    )

    def __init__(self, config: TGRConfig, ctx: StageContext, path: Path | None = None) -> None:
        self.name = "tgr"
        self.config = config
        self.graph: ToolGraph | None = None
        self._base: ToolGraph | None = None
        self._from_disk = False
        self._propagates = False
        self.discriminator: Any = None
        if "llm" in config.sources:
            raise ConfigError(
                "tgr source 'llm' cannot be configured (an LLM is not serialisable): build the graph with "
                "build_graph(..., judges={'llm': LLMDependencyJudge(llm)}), save it, and use source 'file'"
            )
        if config.propagate and config.alpha > 0 and not ctx.has_embeddings:
            raise ConfigError(
                "tgr propagation needs a dense or hybrid retriever (engine has none); use retriever "
                "'dense'/'hybrid', or set propagate=false to use prerequisite expansion only"
            )
        if "discriminator" in config.sources:
            self.discriminator = self._load_discriminator(path)
        if path is not None and (path / GRAPH_FILE).exists():
            self.graph = ToolGraph.load(path / GRAPH_FILE)
            self._from_disk = True
        elif "file" in config.sources:
            if not config.graph_file:
                raise ConfigError("tgr source 'file' needs graph_file (a graph written by `toolrerank graph build`)")
            self._base = ToolGraph.load(config.graph_file)
        elif path is not None:
            raise GraphError(f"{path}: saved tgr stage has no {GRAPH_FILE}; the engine directory is incomplete")

    def _load_discriminator(self, path: Path | None) -> Any:
        from toolrerank_plugins.graph.discriminator import DependencyDiscriminator

        if path is not None and (path / DISCRIMINATOR_DIR).exists():
            return DependencyDiscriminator.load(path / DISCRIMINATOR_DIR)
        if not self.config.discriminator_path:
            raise ConfigError(
                "tgr source 'discriminator' needs discriminator_path (train one with `toolrerank train discriminator`)"
            )
        return DependencyDiscriminator.load(self.config.discriminator_path)

    # -- index time ------------------------------------------------------------------------------
    def _judges(self) -> dict[str, DependencyJudge]:
        if self.discriminator is None:
            return {}
        return {"discriminator": DiscriminatorJudge(self.discriminator, self.config.discriminator_threshold)}

    def _embeddings(self, ctx: StageContext) -> tuple[np.ndarray | None, list[str] | None]:
        if not {"discriminator", "llm"} & set(self.config.sources):
            return None, None
        ids = ctx.catalog.ids
        return ctx.embeddings(ids), ids

    def on_index(self, ctx: StageContext) -> None:
        """Build the graph (first time), check a loaded one, or update it incrementally."""
        emb, ids = self._embeddings(ctx)
        if self.graph is None:
            self.graph = build_graph(
                ctx.catalog,
                self.config.build_config(),
                embeddings=emb,
                ids=ids,
                judges=self._judges(),
                base=self._base,
            )
        elif self._from_disk:
            self.graph.check_catalog(ctx.catalog, where="saved tgr stage")
            self._from_disk = False
        else:
            # Update a copy: the engine calls on_index on a copy of this stage while searches may still
            # use the current graph (copy-on-write, see Stage.on_index).
            graph = ToolGraph(self.graph.graph.copy(), self.graph.fingerprint)
            graph.dropped = self.graph.dropped.copy()
            changes = update_graph(
                graph, ctx.catalog, self.config.build_config(), embeddings=emb, ids=ids, judges=self._judges()
            )
            self.graph = graph
            logger.info("tgr graph updated: %s", changes)
        self._propagates = ctx.has_embeddings and self.config.propagate and self.config.alpha > 0

    def document_transform(self) -> DocTransform | None:
        """The graph convolution, when propagation is on and the first stage has document vectors."""
        return self.transform if self._propagates else None

    def transform(self, ids: list[str], embeddings: np.ndarray) -> np.ndarray:
        """Graph convolution blended with the originals (the stage's document transform)."""
        if self.graph is None:
            return embeddings
        return propagate(
            embeddings,
            self.graph,
            ids,
            direction=self.config.direction,
            alpha=self.config.alpha,
            weighted=self.config.weighted,
        )

    # -- query time ------------------------------------------------------------------------------
    @property
    def uses_top_k(self) -> bool:
        return self.config.expansion.enabled and self.config.expansion.declared_chains

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        if self.graph is None or not self.config.expansion.enabled:
            return candidates
        expansion = self.config.expansion
        out, inserted = expand_prerequisites(
            candidates, self.graph, ctx.catalog, expansion, stage=self.name, top_k=ctx.top_k
        )
        trace["expanded"] = inserted
        if expansion.declared_chains:
            k, kept, slots = chain_budget(expansion, ctx.top_k)
            if k >= expansion.chain_min_top_k:
                trace["declared_chains"] = {"top_k": k, "targets_kept": kept, "prerequisite_ranks": slots}
            else:  # a short list: declared edges keep the direct rule
                trace["declared_chains"] = {"top_k": k, "off_below_top_k": expansion.chain_min_top_k}
        return out

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        if self.graph is None:
            raise GraphError("tgr stage has no graph to save (it was never indexed)")
        self.graph.save(path / GRAPH_FILE)
        if self.discriminator is not None:
            self.discriminator.save(path / DISCRIMINATOR_DIR)


STAGE_TYPE = StageType(config_model=TGRConfig, factory=lambda cfg, ctx, path: TGRStage(cfg, ctx, path))
