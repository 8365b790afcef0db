"""Retrieval-based tool selection for LangChain 1.x agents: an ``AgentMiddleware`` for ``create_agent``.

What the middleware decides (query from the conversation, one selection per episode, tools found by a tool
search, pins and cap) is the core's :class:`toolrerank_plugins.selection.ConversationToolSelector`; this
module converts LangChain messages and tools and plugs the result into ``request.override(tools=...)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ExtendedModelResponse, ModelRequest, ModelResponse
from langchain.agents.middleware.internal_call_transformer import InternalCallTransformer, internal_call_metadata
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.types import Command
from typing_extensions import NotRequired

from langchain_toolrerank._convert import to_turns, tool_name, tool_to_spec
from langchain_toolrerank.llms import ChatModelLLM
from langchain_toolrerank.tools import ToolSelector
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import engine_for_tools
from toolrerank_plugins.selection import ConversationToolSelector, OnFull, Selection, uses_llm

#: The agent-state key holding the current episode's selection.
STATE_KEY = "toolrerank_selection"


class ToolRerankState(AgentState[Any]):
    """The agent state plus the current episode's tool selection (private to the middleware)."""

    toolrerank_selection: NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr]]


def _internal(source: str) -> RunnableConfig:
    # LangChain's mark for a middleware's own model calls: kept out of the agent's streamed messages
    return {"metadata": {"lc_source": source, **internal_call_metadata()}}


class ToolRerankMiddleware(AgentMiddleware[ToolRerankState, Any, Any]):
    """Offer the model only the catalog tools each request needs, chosen by a toolrerank-plugins engine.

    For every model call of ``create_agent(model, tools, middleware=[...])`` the middleware replaces the
    catalog tools in ``request.tools`` with the selected ones (``request.override(tools=...)``); the agent's
    other tools (not in the catalog) stay as they are. It registers every catalog tool with the agent
    (:attr:`tools`), so a selected tool can always be executed: ``create_agent`` needs no ``tools=`` of its own.

    * The query is the last user message plus up to ``history_turns`` earlier user/assistant turns, so a
      follow-up such as "do it" still finds the conversation's tools.
    * One selection per episode (the model calls from one user message to the answer): while the agent works
      through tool results the tools stay the same, unless it searched for more.
    * ``include_search_tool=True`` adds a ``search_tools`` tool: the tools it finds are offered from the next
      model call of the episode on.
    * LLM stages (query generation, QTA rewriting, the feedback loop) run on the agent's own model for that
      call (``request.model``), or on ``llm`` when given (e.g. a cheaper model); ``use_agent_model=False``
      leaves them on the registered LLM. Their budgets and fallbacks are the stages' own.

    Args:
        engine: an engine whose catalog ids are the tools' keys.
        tools: the tools, keyed by catalog id (a sequence is keyed by tool name, as :meth:`from_tools`
            builds the engine).
        max_tools: most catalog tools offered per model call, pins included (tools found by a search come
            on top).
        always_include: tools offered on every model call (names or tools of the catalog).
        history_turns: earlier user/assistant turns added to the query (0: the last user message only).
        include_search_tool: register and offer a tool-search tool.
        search_tool_name: its name.
        search_k: how many tools one search finds.
        llm: the model for the engine's LLM stages (a chat model, or an LLM port); default the agent's.
        use_agent_model: without ``llm``, run the LLM stages on the agent's model (False: the registered LLM).
        always_include_servers: servers (catalog parent tools, e.g. the MCP server of a tool loaded with
            ``langchain_toolrerank.mcp``) whose every tool is offered on every model call.
        fail_open: when the search fails (an engine or LLM stage error), offer the pinned tools, or without
            pins the catalog's first ones, instead of failing the agent run; the reason is logged.
        stable: cache-stable offers: within a conversation (the agent's thread) a tool once offered keeps its
            position and a new user message's tools are appended, so the tool block stays a prefix of the next
            prompt (``ConversationToolSelector(stable=True)``).
        max_offered: with ``stable``, most catalog tools offered at once (``None``: unbounded).
        on_full: with ``stable``, ``"restart"`` or ``"keep"`` when a selection does not fit
            (:data:`toolrerank_plugins.selection.OnFull`).
        min_relevance: "no tool fits" (off by default): catalog tools whose relevance is below it are not
            offered, so a request may get only the pinned tools, or no catalog tool, and the model answers
            without them; it wins over the fallback that fills a short selection, and a failed search then offers
            only the pins (the core's ``BaseToolSelector``; the reason is in the selection state).

    Example:
        >>> from langchain.agents import create_agent
        >>> from langchain_core.tools import tool
        >>> from langchain_toolrerank.testing import ScriptedToolCallingModel
        >>> @tool
        ... def get_weather(city: str) -> str:
        ...     '''Weather forecast for a city.'''
        ...     return "sunny"
        >>> @tool
        ... def send_email(to: str, body: str) -> str:
        ...     '''Send an email message to a recipient.'''
        ...     return "sent"
        >>> rerank = ToolRerankMiddleware.from_tools([get_weather, send_email], EngineConfig(retriever="bm25"),
        ...                                          max_tools=1)
        >>> model = ScriptedToolCallingModel(plan=[{"tools": ["get_weather"], "args": {"city": "Paris"}}])
        >>> agent = create_agent(model, middleware=[rerank])
        >>> out = agent.invoke({"messages": [("user", "what is the weather forecast in Paris?")]})
        >>> model.offered, out["messages"][-1].content
        ([['get_weather'], ['get_weather']], 'Final answer: sunny')
    """

    state_schema = ToolRerankState
    transformers = (InternalCallTransformer,)

    def __init__(
        self,
        engine: Engine,
        tools: Mapping[str, BaseTool] | Sequence[BaseTool],
        *,
        max_tools: int = 5,
        always_include: Iterable[str | BaseTool] = (),
        history_turns: int = 2,
        include_search_tool: bool = False,
        search_tool_name: str = "search_tools",
        search_k: int = 3,
        llm: Any = None,
        use_agent_model: bool = True,
        always_include_servers: Iterable[str] = (),
        fail_open: bool = True,
        stable: bool = False,
        max_offered: int | None = None,
        on_full: OnFull = "restart",
        min_relevance: float | None = None,
    ) -> None:
        super().__init__()
        self.selector = ToolSelector(
            engine,
            tools,
            max_tools=max_tools,
            always_include=always_include,
            always_include_servers=always_include_servers,
            fail_open=fail_open,
            min_relevance=min_relevance,
        )
        self.llm = ChatModelLLM(llm, config=_internal("toolrerank")) if isinstance(llm, BaseChatModel) else llm
        self.use_agent_model = use_agent_model
        self.chooser = ConversationToolSelector(
            self.selector,
            history_turns=history_turns,
            search_tool_name=search_tool_name if include_search_tool else None,
            stable=stable,
            max_offered=max_offered,
            on_full=on_full,
        )
        self.search_tool = (
            self.selector.search_tool(name=search_tool_name, k=search_k, llm=self.llm) if include_search_tool else None
        )
        if self.search_tool is not None and self.search_tool.name in self.selector.tools_by_name:
            raise ValueError(f"search_tool_name={search_tool_name!r} is the name of a catalog tool; choose another")
        #: Registered with the agent: every catalog tool (so a selected one can run) and the search tool.
        self.tools: list[BaseTool] = [*self.selector.tools_by_id.values()]
        if self.search_tool is not None:
            self.tools.append(self.search_tool)

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[BaseTool],
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        resources: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolRerankMiddleware:
        """Index LangChain tools (names, descriptions, argument schemas; id = tool name) and select among them.

        ``resources``: live objects for the first stage, e.g. ``{"postgres": pool}`` with
        ``toolrerank_plugins.postgres.postgres_config()`` to keep the index in PostgreSQL, where workers that start
        later find it (:meth:`from_postgres`). ``kwargs``: the constructor's keyword arguments (``max_tools``,
        ``always_include``, ...).
        """
        engine = engine_for_tools(
            [tool_to_spec(t) for t in tools], config, embedder=embedder, source="<langchain tools>", resources=resources
        )
        return cls(engine, tools, **kwargs)

    @classmethod
    def from_postgres(
        cls,
        pool: Any,
        tools: Sequence[BaseTool],
        *,
        table: str = "toolrerank",
        embedder: Embedder | None = None,
        **kwargs: Any,
    ) -> ToolRerankMiddleware:
        """Select among ``tools`` with the engine a PostgreSQL store holds (built by :meth:`from_tools` with
        ``resources={"postgres": pool}`` in another process): nothing is encoded, the catalog and its index are
        read from the store (:func:`toolrerank_plugins.postgres.connect_engine`). ``pool``: a
        ``psycopg_pool.ConnectionPool`` or a conninfo string."""
        from toolrerank_plugins.postgres import connect_engine

        return cls(connect_engine(pool, table=table, embedder=embedder), tools, **kwargs)

    @property
    def engine(self) -> Engine:
        return self.selector.engine

    # -- per model call ---------------------------------------------------------------------------
    def _stage_llm(self, request: ModelRequest) -> Any:
        if self.llm is not None:
            return self.llm
        if self.use_agent_model and uses_llm(self.engine):
            return ChatModelLLM(request.model, config=_internal("toolrerank"))
        return None

    def _request(self, request: ModelRequest, offered: list[BaseTool]) -> ModelRequest:
        return request.override(tools=self.chooser.replace_catalog_tools(request.tools, offered, tool_name))

    @staticmethod
    def _kept(selection: Selection, previous: Selection | None, response: ModelResponse) -> Any:
        if selection == previous:
            return response
        return ExtendedModelResponse(response, Command(update={STATE_KEY: selection.to_state()}))

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        previous = Selection.from_state(request.state.get(STATE_KEY))
        offered, selection = self.chooser.select(to_turns(request.messages), previous, llm=self._stage_llm(request))
        return self._kept(selection, previous, handler(self._request(request, offered)))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        previous = Selection.from_state(request.state.get(STATE_KEY))
        turns = to_turns(request.messages)
        offered, selection = await self.chooser.aselect(turns, previous, llm=self._stage_llm(request))
        return self._kept(selection, previous, await handler(self._request(request, offered)))

    def __repr__(self) -> str:
        search = f", search_tool={self.search_tool.name!r}" if self.search_tool is not None else ""
        return f"ToolRerankMiddleware({self.selector!r}{search})"
