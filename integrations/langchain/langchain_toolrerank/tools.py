"""Tool selection for LangChain agents: bind only the few tools a request needs, plus a tool-search tool.

The selection itself (engine search, pins, cap, exclusions) is :class:`toolrerank_plugins.agents.BaseToolSelector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool

from langchain_toolrerank._convert import spec_to_tool, tool_to_spec
from toolrerank_plugins.agents import BaseToolSelector
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import engine_for_tools, tools_for_engine


class ToolSelector(BaseToolSelector[BaseTool]):
    """Select the tools for the current request out of many (engine search), with pins and a cap.

    Args:
        engine: engine over the tools' catalog.
        tools: the callable tools, keyed by catalog id (a sequence is keyed by tool name, which is then
            the id, as :meth:`from_tools` builds it).
        max_tools: most tools bound per request, pins included.
        always_include: tool names bound on every request, first (e.g. a "finish" or "ask user" tool).
        always_include_servers: servers (catalog parent tools, e.g. an MCP server) whose every tool is bound on
            every request.
        fail_open: when the search fails, bind the pinned tools instead of raising (the core's
            ``BaseToolSelector``).
        min_relevance: "no tool fits" (off by default): tools whose relevance is below it are not bound, so a
            request may get only the pinned tools or none (the core's ``BaseToolSelector``).

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
        always_include_servers: Iterable[str] = (),
        fail_open: bool = False,
        min_relevance: float | None = None,
    ) -> None:
        super().__init__(
            engine,
            dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools},
            name=attrgetter("name"),
            max_tools=max_tools,
            always_include=[p if isinstance(p, str) else p.name for p in always_include],
            always_include_servers=always_include_servers,
            fail_open=fail_open,
            builder="ToolSelector.from_tools",
            min_relevance=min_relevance,
        )

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
        specs = [tool_to_spec(t) for t in tools]
        engine = engine_for_tools(specs, config, embedder=embedder, source="<langchain tools>")
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
        JSON Schema; names come from :func:`toolrerank_plugins.interop.function_names`)."""
        tools = tools_for_engine(engine, implementations, spec_to_tool)
        return cls(engine, tools, max_tools=max_tools, always_include=always_include)

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

    def search_tool(self, *, name: str = "search_tools", k: int = 3, llm: Any = None) -> BaseTool:
        """A tool the agent calls mid-episode to find more tools (the langgraph-bigtool pattern).

        Its content lists the found tools (name: description) for the model; its artifact is their names,
        which the agent loop adds to the bound tools. ``llm``: an LLM port for the engine's LLM stages in
        these searches (default: the registered one).
        """

        def _found(tools: Sequence[BaseTool]) -> tuple[str, list[str]]:
            return "\n".join(f"{t.name}: {t.description}" for t in tools) or "no tools found", [t.name for t in tools]

        def search(query: str) -> tuple[str, list[str]]:
            return _found(self.find(query, k, llm=llm))

        async def asearch(query: str) -> tuple[str, list[str]]:
            return _found(await self.afind(query, k, llm=llm))

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
