"""A LangChain document compressor that applies the engine's reranking stages to any retriever's documents."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field

from langchain_toolrerank._convert import document_to_spec, rescored_document, scored_to_document
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.interop import back_to_inputs
from toolrerank_plugins.records import ScoredTool, ToolSpec


class ToolRerankCompressor(BaseDocumentCompressor):
    """Rerank documents that describe tools with the engine's stages (``Engine.rerank``; no first stage).

    A document maps to the engine catalog's tool through ``metadata["tool_id"]``; a document without a
    known id becomes a tool described by its text. Returned documents are copies with ``tool_id``,
    ``score``, ``rank`` and ``stage_scores`` added to their metadata; a tool a stage brings in (the default
    pipeline's prerequisites, a sibling API) comes back at its rank as a new document built from the catalog
    (the rendered tool, id = tool id), as :class:`~langchain_toolrerank.ToolRerankRetriever` makes them
    (:func:`toolrerank_plugins.interop.back_to_inputs`, shared with the LlamaIndex postprocessor). Call
    :meth:`compress_documents` directly, chain it after any retriever, or use it in
    ``ContextualCompressionRetriever`` (package
    ``langchain-classic`` in LangChain 1.x).

    Args:
        engine: the engine whose stages rerank (with no stages the order is kept).
        top_n: how many documents to keep (``None`` keeps all).

    Example:
        >>> from langchain_core.documents import Document
        >>> from toolrerank_plugins.engine import EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> docs = [Document("send mail", metadata={"tool_id": "Mail/PostBox/send_email"})]
        >>> out = ToolRerankCompressor(engine=engine, top_n=1).compress_documents(docs, "email my boss")
        >>> out[0].metadata["rank"], "rank" in docs[0].metadata
        (1, False)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: Engine
    top_n: int | None = Field(3, ge=1)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        specs = [document_to_spec(d, self.engine.catalog) for d in documents]
        ranked = self.engine.rerank(query, specs, top_k=self.top_n)
        return self._back(documents, specs, ranked)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        specs = [document_to_spec(d, self.engine.catalog) for d in documents]
        ranked = await self.engine.arerank(query, specs, top_k=self.top_n)
        return self._back(documents, specs, ranked)

    def _back(
        self, documents: Sequence[Document], specs: Sequence[ToolSpec], ranked: Sequence[ScoredTool]
    ) -> list[Document]:
        render = self.engine.render
        return back_to_inputs(documents, specs, ranked, rescored_document, lambda st: scored_to_document(st, render))
