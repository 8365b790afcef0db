"""A LlamaIndex node postprocessor that applies the engine's reranking stages to any retriever's nodes."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.bridge.pydantic import ConfigDict, Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.retrievers.toolrerank._convert import node_to_spec, rescored_node, scored_to_node

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.interop import back_to_inputs
from toolrerank_plugins.records import ScoredTool, ToolSpec


class ToolRerankPostprocessor(BaseNodePostprocessor):
    """Rerank nodes that describe tools with the engine's stages (``Engine.rerank``; no first stage).

    A node maps to the engine catalog's tool through ``metadata["tool_id"]``; a node without a known id
    becomes a tool described by its text. Returned nodes are copies with ``tool_id``, ``score``, ``rank``
    and ``stage_scores`` added to their metadata; a tool a stage brings in (a prerequisite, a sibling API)
    comes back at its rank as a new node built from the catalog (id = tool id), as
    :class:`~llama_index.retrievers.toolrerank.ToolRerankRetriever` makes them
    (:func:`toolrerank_plugins.interop.back_to_inputs`, shared with the LangChain compressor).

    Args:
        engine: the engine whose stages rerank (with no stages the order is kept).
        top_n: how many nodes to keep (``None`` keeps all).

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> from toolrerank_plugins.engine import EngineConfig
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> nodes = [NodeWithScore(node=TextNode(text="send mail", metadata={"tool_id": "Mail/PostBox/send_email"}))]
        >>> out = ToolRerankPostprocessor(engine=engine, top_n=1).postprocess_nodes(nodes, query_str="email")
        >>> out[0].node.metadata["rank"], "rank" in nodes[0].node.metadata
        (1, False)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: Engine
    top_n: int | None = Field(default=3, ge=1)

    @classmethod
    def class_name(cls) -> str:
        return "ToolRerankPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query = _query(query_bundle)
        specs = [node_to_spec(n.node, self.engine.catalog) for n in nodes]
        return _back_to_nodes(nodes, specs, self.engine.rerank(query, specs, top_k=self.top_n), self.engine)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query = _query(query_bundle)
        specs = [node_to_spec(n.node, self.engine.catalog) for n in nodes]
        return _back_to_nodes(nodes, specs, await self.engine.arerank(query, specs, top_k=self.top_n), self.engine)


def _query(query_bundle: QueryBundle | None) -> str:
    if query_bundle is None:
        raise ValueError("ToolRerankPostprocessor needs the query: pass query_bundle= or query_str=")
    return query_bundle.query_str


def _back_to_nodes(
    nodes: Sequence[NodeWithScore], specs: Sequence[ToolSpec], ranked: Sequence[ScoredTool], engine: Engine
) -> list[NodeWithScore]:
    return back_to_inputs(nodes, specs, ranked, rescored_node, lambda st: scored_to_node(st, engine.render))
