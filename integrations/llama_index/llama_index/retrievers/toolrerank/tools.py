"""A tool retriever for LlamaIndex agents (``FunctionAgent`` / ``ReActAgent`` ``tool_retriever=``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.objects.base import ObjectRetriever
from llama_index.core.objects.base_node_mapping import BaseObjectNodeMapping
from llama_index.core.schema import BaseNode, QueryBundle, QueryType, TextNode
from llama_index.core.tools import BaseTool
from llama_index.retrievers.toolrerank._convert import spec_to_tool, tool_to_spec
from llama_index.retrievers.toolrerank.base import ToolRerankRetriever

from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import TOOL_ID, engine_for_tools, named_first, require_tools, tools_for_engine


class _ToolIdMapping(BaseObjectNodeMapping[BaseTool]):
    """Retrieved node (id = tool id) -> the tool object."""

    def __init__(self, tools: Mapping[str, BaseTool]) -> None:
        self._tools = dict(tools)

    @classmethod
    def from_objects(cls, objs: Sequence[BaseTool], *args: Any, **kwargs: Any) -> _ToolIdMapping:
        return cls({t.metadata.name or "": t for t in objs})

    @property
    def obj_node_mapping(self) -> dict[Any, Any]:
        return self._tools

    def _add_object(self, obj: BaseTool) -> None:
        self._tools[obj.metadata.name or ""] = obj

    def to_node(self, obj: BaseTool) -> BaseNode:
        return TextNode(id_=obj.metadata.name or "", text=obj.metadata.description or "")

    def _from_node(self, node: BaseNode) -> BaseTool:
        return self._tools[node.metadata.get(TOOL_ID, node.node_id)]

    def persist(self, persist_dir: str = "", obj_node_mapping_fname: str = "") -> None:
        raise NotImplementedError("save the engine with engine.save(dir); tools are Python callables")


def _query_str(q: QueryType) -> str:
    return q if isinstance(q, str) else q.query_str if isinstance(q, QueryBundle) else str(q)


class ToolRerankToolRetriever(ObjectRetriever[BaseTool]):
    """Retrieve agent tools through the engine; pass it as ``tool_retriever=`` to ``FunctionAgent`` or
    ``ReActAgent``.

    These agents look a called tool up again by calling the tool retriever with the tool's *name* as the
    query. So a query that is exactly a tool's name returns that tool first (then the search results):
    a tool the agent was offered is always found.

    Args:
        engine: engine over the tools' catalog.
        tools: the tools keyed by catalog id (a sequence is keyed by tool name, which is then the id).
        similarity_top_k: how many tools to offer per request.

    Example:
        >>> from llama_index.core.tools import FunctionTool
        >>> def get_weather(city: str) -> str:
        ...     '''Weather forecast for a city.'''
        ...     return "sunny"
        >>> def send_email(to: str) -> str:
        ...     '''Send an email message to a recipient.'''
        ...     return "sent"
        >>> tools = [FunctionTool.from_defaults(fn=f) for f in (get_weather, send_email)]
        >>> r = ToolRerankToolRetriever.from_tools(tools, EngineConfig(retriever="bm25"), similarity_top_k=1)
        >>> [t.metadata.name for t in r.retrieve("email my boss")], [t.metadata.name for t in r.retrieve("get_weather")]
        (['send_email'], ['get_weather'])
    """

    def __init__(
        self, engine: Engine, tools: Mapping[str, BaseTool] | Sequence[BaseTool], *, similarity_top_k: int = 5
    ) -> None:
        by_id = dict(tools) if isinstance(tools, Mapping) else {t.metadata.name or "": t for t in tools}
        require_tools(engine.catalog.ids, by_id, "ToolRerankToolRetriever.from_tools")
        self.engine = engine
        self.tools_by_name: dict[str, BaseTool] = {t.metadata.name or "": t for t in by_id.values()}
        super().__init__(
            retriever=ToolRerankRetriever(engine, similarity_top_k), object_node_mapping=_ToolIdMapping(by_id)
        )

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[BaseTool],
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        similarity_top_k: int = 5,
    ) -> ToolRerankToolRetriever:
        """Index LlamaIndex tools (names, descriptions, argument schemas) and retrieve among them."""
        engine = engine_for_tools(
            [tool_to_spec(t) for t in tools], config, embedder=embedder, source="<llama_index tools>"
        )
        return cls(engine, tools, similarity_top_k=similarity_top_k)

    @classmethod
    def from_engine(
        cls, engine: Engine, implementations: Mapping[str, Callable[..., Any]], *, similarity_top_k: int = 5
    ) -> ToolRerankToolRetriever:
        """Tools for an engine's catalog from one Python callable per API id."""
        return cls(engine, tools_for_engine(engine, implementations, spec_to_tool), similarity_top_k=similarity_top_k)

    @property
    def similarity_top_k(self) -> int:
        return self.retriever.similarity_top_k  # type: ignore[attr-defined, no-any-return]

    def _with_named(self, query: str, tools: list[BaseTool]) -> list[BaseTool]:
        return named_first(query, tools, self.tools_by_name)

    def retrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        return self._with_named(_query_str(str_or_query_bundle), super().retrieve(str_or_query_bundle))

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        return self._with_named(_query_str(str_or_query_bundle), await super().aretrieve(str_or_query_bundle))
