"""Tool selection for LangChain agents: bind only the few tools a request needs, plus a tool-search tool."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool

from langchain_toolrerank._convert import spec_to_tool, tool_to_spec
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import function_names
from toolrerank_plugins.records import ScoredTool


class ToolSelector:
    """Select the tools for the current request out of many (engine search), with pins and a cap.

    Args:
        engine: engine over the tools' catalog.
        tools: the callable tools, keyed by catalog id (a sequence is keyed by tool name, which is then
            the id, as :meth:`from_tools` builds it).
        max_tools: most tools bound per request, pins included.
        always_include: tool names bound on every request, first (e.g. a "finish" or "ask user" tool).

    Example:
        >>> from langchain_core.tools import tool
        >>> @tool
        ... def get_weather(city: str) -> str:
        ...     '''Weather forecast for a city.'''
        ...     return "sunny"
        >>> @tool
        ... def send_email(to: str, body: str) -> str:
        ...     '''Send an email message to a recipient.'''
        ...     return "sent"
        >>> selector = ToolSelector.from_tools([get_weather, send_email], EngineConfig(retriever="bm25"),
        ...                                    max_tools=1)
        >>> [t.name for t in selector.select("email my boss")]
        ['send_email']
    """

    def __init__(
        self,
        engine: Engine,
        tools: Mapping[str, BaseTool] | Sequence[BaseTool],
        *,
        max_tools: int = 5,
        always_include: Iterable[str | BaseTool] = (),
    ) -> None:
        by_id = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
        missing = [i for i in engine.catalog.ids if i not in by_id]
        if missing:
            raise ValueError(
                f"{len(missing)} catalog APIs have no tool (first: {missing[:3]}); pass a tool for every id "
                "in engine.catalog, or build the engine from the tools with ToolSelector.from_tools"
            )
        self.engine = engine
        self.tools_by_id: dict[str, BaseTool] = by_id
        self.tools_by_name: dict[str, BaseTool] = {t.name: t for t in by_id.values()}
        pins = [p if isinstance(p, str) else p.name for p in always_include]
        unknown = [p for p in pins if p not in self.tools_by_name]
        if unknown:
            raise ValueError(f"always_include names unknown tools {unknown}; known: {sorted(self.tools_by_name)}")
        if max_tools < max(1, len(pins)):
            raise ValueError(f"max_tools={max_tools} must be >= 1 and >= the {len(pins)} always_include tools")
        self.max_tools = max_tools
        self.pinned: list[BaseTool] = [self.tools_by_name[p] for p in dict.fromkeys(pins)]

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[BaseTool],
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        max_tools: int = 5,
        always_include: Iterable[str | BaseTool] = (),
    ) -> ToolSelector:
        """Index LangChain tools (names, descriptions, argument schemas) and select among them."""
        catalog = Catalog([tool_to_spec(t) for t in tools], source="<langchain tools>")
        engine = Engine.build(catalog, config, embedder=embedder)
        return cls(engine, tools, max_tools=max_tools, always_include=always_include)

    @classmethod
    def from_engine(
        cls,
        engine: Engine,
        implementations: Mapping[str, Callable[..., Any]],
        *,
        max_tools: int = 5,
        always_include: Iterable[str | BaseTool] = (),
    ) -> ToolSelector:
        """Tools for an engine's catalog from one Python callable per API id (the model sees each API's
        JSON Schema; names come from :func:`~langchain_toolrerank._convert.function_names`)."""
        specs = [engine.catalog[i] for i in engine.catalog.ids]
        names = function_names(specs)
        missing = [s.id for s in specs if s.id not in implementations]
        if missing:
            raise ValueError(f"no implementation for {len(missing)} APIs (first: {missing[:3]})")
        tools = {s.id: spec_to_tool(s, implementations[s.id], names[s.id]) for s in specs}
        return cls(engine, tools, max_tools=max_tools, always_include=always_include)

    # -- selection -------------------------------------------------------------------------------
    def _merge(self, results: Sequence[ScoredTool], k: int, exclude: set[str]) -> list[BaseTool]:
        chosen = {t.name: t for t in self.pinned}
        for st in results:
            if len(chosen) >= k:
                break
            tool = self.tools_by_id[st.tool.id]
            if tool.name not in exclude:
                chosen.setdefault(tool.name, tool)
        return list(chosen.values())

    def _k(self, k: int | None) -> int:
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return max(len(self.pinned), min(self.max_tools, self.max_tools if k is None else k))

    def select(self, query: str, k: int | None = None, *, exclude: Iterable[str] = ()) -> list[BaseTool]:
        """The pinned tools, then the best-ranked others, ``min(k, max_tools)`` in all.

        ``exclude`` names tools not to offer (e.g. ones that failed); the search goes that much deeper so
        ``k`` tools still come back when the catalog has them.
        """
        k, skip = self._k(k), set(exclude)
        return self._merge(self.engine.search(query, top_k=k + len(skip)), k, skip)

    async def aselect(self, query: str, k: int | None = None, *, exclude: Iterable[str] = ()) -> list[BaseTool]:
        """Async twin of :meth:`select` (same tools)."""
        k, skip = self._k(k), set(exclude)
        return self._merge(await self.engine.asearch(query, top_k=k + len(skip)), k, skip)

    def bind(
        self,
        model: BaseChatModel,
        query: str,
        *,
        k: int | None = None,
        extra_tools: Sequence[BaseTool] = (),
        **kwargs: Any,
    ) -> Runnable:
        """``model.bind_tools`` with only the tools selected for ``query`` (plus ``extra_tools``)."""
        return model.bind_tools([*self.select(query, k), *extra_tools], **kwargs)

    def get(self, name: str) -> BaseTool | None:
        """A tool by name among all tools (an agent's call to a tool it was offered always resolves)."""
        return self.tools_by_name.get(name)

    # -- tool search -----------------------------------------------------------------------------
    def search_tool(self, *, name: str = "search_tools", k: int = 3) -> BaseTool:
        """A tool the agent calls mid-episode to find more tools (the langgraph-bigtool pattern).

        Its content lists the found tools (name: description) for the model; its artifact is their names,
        which the agent loop adds to the bound tools.
        """

        def _found(results: Sequence[ScoredTool]) -> tuple[str, list[str]]:
            tools = [self.tools_by_id[st.tool.id] for st in results]
            lines = [f"{t.name}: {t.description}" for t in tools]
            return "\n".join(lines) or "no tools found", [t.name for t in tools]

        def search(query: str) -> tuple[str, list[str]]:
            return _found(self.engine.search(query, top_k=k))

        async def asearch(query: str) -> tuple[str, list[str]]:
            return _found(await self.engine.asearch(query, top_k=k))

        return StructuredTool.from_function(
            func=search,
            coroutine=asearch,
            name=name,
            description=(
                "Search for more tools by describing what you need to do; the tools found become available "
                "on your next turn."
            ),
            response_format="content_and_artifact",
        )

    def __repr__(self) -> str:
        return f"ToolSelector({len(self.tools_by_id)} tools, max_tools={self.max_tools}, pinned={len(self.pinned)})"
