"""A LangChain ``BaseRetriever`` over a toolrerank-plugins engine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from langchain_toolrerank._convert import scored_to_document
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig


class ToolRerankRetriever(BaseRetriever):
    """Retrieve tools (APIs) with the engine's full pipeline: first stage plus every configured stage.

    Each ``Document`` holds the rendered tool text; its metadata carries ``tool_id``, ``name``, ``tool``,
    ``category``, ``score``, ``rank`` and ``stage_scores`` (stage name -> score).

    Args:
        engine: a built or loaded :class:`~toolrerank_plugins.engine.Engine`.
        k: how many tools to return (override per call with ``invoke(query, k=...)``).
        min_relevance: "no tool fits" (off by default): tools whose relevance is below it are not returned, so
            a query may get fewer documents or none (the engine's ``min_relevance``; each document's
            ``stage_scores`` then holds its ``relevance``).

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), EngineConfig(retriever="bm25"), k=2)
        >>> docs = retriever.invoke("send an email to my boss")
        >>> docs[0].metadata["tool_id"], docs[0].metadata["rank"], len(retriever.invoke("email", k=1))
        ('Mail/PostBox/send_email', 1, 1)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: Engine
    k: int = Field(5, ge=1)
    min_relevance: float | None = Field(None, ge=0.0, le=1.0)

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        k: int = 5,
        resources: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolRerankRetriever:
        """Build an engine over ``catalog`` (see :meth:`Engine.build`; ``resources`` such as a PostgreSQL pool for a
        first stage kept in a database) and wrap it."""
        return cls(engine=Engine.build(catalog, config, embedder=embedder, resources=resources), k=k, **kwargs)

    @classmethod
    def from_postgres(
        cls, pool: Any, *, table: str = "toolrerank", embedder: Embedder | None = None, k: int = 5, **kwargs: Any
    ) -> ToolRerankRetriever:
        """Wrap the engine a PostgreSQL store holds (:func:`toolrerank_plugins.postgres.connect_engine`): a worker
        that starts after the store was built finds the catalog without encoding it. ``pool``: a
        ``psycopg_pool.ConnectionPool`` or a conninfo string."""
        from toolrerank_plugins.postgres import connect_engine

        return cls(engine=connect_engine(pool, table=table, embedder=embedder), k=k, **kwargs)

    @classmethod
    def from_path(cls, path: str | Path, *, k: int = 5, **kwargs: Any) -> ToolRerankRetriever:
        """Wrap an engine saved with :meth:`Engine.save`."""
        return cls(engine=Engine.load(path), k=k, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        results = self.engine.search(query, top_k=self.k if k is None else k, min_relevance=self.min_relevance)
        return [scored_to_document(st, self.engine.render) for st in results]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        results = await self.engine.asearch(query, top_k=self.k if k is None else k, min_relevance=self.min_relevance)
        return [scored_to_document(st, self.engine.render) for st in results]
