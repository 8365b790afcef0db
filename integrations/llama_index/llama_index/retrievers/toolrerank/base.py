"""A LlamaIndex retriever over a toolrerank-plugins engine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.retrievers.toolrerank._convert import scored_to_node

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import check_top_k
from toolrerank_plugins.retrieval.relevance import check_min_relevance


class ToolRerankRetriever(BaseRetriever):
    """Retrieve tools (APIs) with the engine's full pipeline: first stage plus every configured stage.

    Each ``NodeWithScore`` holds a ``TextNode`` (id = tool id, text = rendered tool) whose metadata
    carries ``tool_id``, ``name``, ``tool``, ``category``, ``score``, ``rank`` and ``stage_scores``.

    Args:
        engine: a built or loaded :class:`~toolrerank_plugins.engine.Engine`.
        similarity_top_k: how many tools to return.
        min_relevance: "no tool fits" (off by default): tools whose relevance is below it are not returned, so
            a query may get fewer nodes or none (the engine's ``min_relevance``).

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> hit = retriever.retrieve("send an email to my boss")[0]
        >>> hit.node.node_id, hit.node.metadata["rank"]
        ('Mail/PostBox/send_email', 1)
    """

    def __init__(
        self,
        engine: Engine,
        similarity_top_k: int = 5,
        *,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        min_relevance: float | None = None,
    ) -> None:
        self.engine = engine
        self.similarity_top_k = check_top_k(similarity_top_k, name="similarity_top_k")
        self.min_relevance = check_min_relevance(min_relevance)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        similarity_top_k: int = 5,
        resources: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolRerankRetriever:
        """Build an engine over ``catalog`` (see :meth:`Engine.build`; ``resources`` such as a PostgreSQL pool for a
        first stage kept in a database) and wrap it."""
        return cls(Engine.build(catalog, config, embedder=embedder, resources=resources), similarity_top_k, **kwargs)

    @classmethod
    def from_postgres(
        cls,
        pool: Any,
        *,
        table: str = "toolrerank",
        embedder: Embedder | None = None,
        similarity_top_k: int = 5,
        **kwargs: Any,
    ) -> ToolRerankRetriever:
        """Wrap the engine a PostgreSQL store holds (:func:`toolrerank_plugins.postgres.connect_engine`): a worker
        that starts after the store was built finds the catalog without encoding it. ``pool``: a
        ``psycopg_pool.ConnectionPool`` or a conninfo string."""
        from toolrerank_plugins.postgres import connect_engine

        return cls(connect_engine(pool, table=table, embedder=embedder), similarity_top_k, **kwargs)

    @classmethod
    def from_path(cls, path: str | Path, *, similarity_top_k: int = 5, **kwargs: Any) -> ToolRerankRetriever:
        """Wrap an engine saved with :meth:`Engine.save`."""
        return cls(Engine.load(path), similarity_top_k, **kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        results = self.engine.search(
            query_bundle.query_str, top_k=self.similarity_top_k, min_relevance=self.min_relevance
        )
        return [scored_to_node(st, self.engine.render) for st in results]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        results = await self.engine.asearch(
            query_bundle.query_str, top_k=self.similarity_top_k, min_relevance=self.min_relevance
        )
        return [scored_to_node(st, self.engine.render) for st in results]
