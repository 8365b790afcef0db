"""A tool retriever for LlamaIndex agents (``FunctionAgent`` / ``ReActAgent`` / ``AgentWorkflow`` agents'
``tool_retriever=``), and :func:`use_agent_llm`, which lets the agent's own LLM drive the LLM stages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from llama_index.core.objects.base import ObjectRetriever
from llama_index.core.objects.base_node_mapping import BaseObjectNodeMapping
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, QueryType, TextNode
from llama_index.core.tools import BaseTool
from llama_index.retrievers.toolrerank._convert import selection_nodes, spec_to_tool, tool_to_spec
from llama_index.retrievers.toolrerank.base import ToolRerankRetriever
from llama_index.retrievers.toolrerank.llms import as_llm_port

from toolrerank_plugins.agents import BaseToolSelector, Ranking
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import TOOL_ID, engine_for_tools, lookup_first, tools_for_engine
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.selection import OfferLog, OnFull, stable_ranking

T = TypeVar("T")


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


#: the tool ``AgentWorkflow`` adds to each agent for handing off (llama-index-core's ``handoff`` function)
HANDOFF_TOOL = "handoff"


def _tool_name(tool: BaseTool) -> str:
    return tool.metadata.name or ""


def _query_str(q: QueryType) -> str:
    return q if isinstance(q, str) else q.query_str if isinstance(q, QueryBundle) else str(q)


class ToolRerankToolRetriever(ObjectRetriever[BaseTool]):
    """Retrieve agent tools through the engine; pass it as ``tool_retriever=`` to ``FunctionAgent``,
    ``ReActAgent`` or an agent of an ``AgentWorkflow`` (one retriever per agent).

    A request always gets tools while the catalog has some: when the engine ranks fewer than
    ``similarity_top_k`` (a BM25 index shares no word with the request), the core's fallback fills the
    selection (:meth:`toolrerank_plugins.agents.BaseToolSelector.rank`), logs why, and :meth:`retrieve_nodes`
    shows the reason in each node's ``selection_reason`` metadata.

    These agents look a called tool up again by calling the tool retriever with the tool's *name* as the
    query. So a query that is exactly a tool's name returns that tool first, then the first stage's ranking
    for the name: a tool the agent was offered is always found. Such a lookup runs no stage, so executing
    a tool costs no LLM call; the same holds for the names of the bound agent's own ``tools`` and of
    ``AgentWorkflow``'s ``handoff`` tool, which the agents look up the same way. Any other query runs the
    engine's whole pipeline.

    The LLM stages of the pipeline (``query_generation``, ``qta_rewrite``, ``iterative_feedback``) run on
    ``llm`` when given, else on the LLM of the agent the retriever serves once :func:`use_agent_llm` has
    bound it, else on the registered LLM as usual (see ``docs/llm-stages.md``).

    Args:
        engine: engine over the tools' catalog.
        tools: the tools keyed by catalog id (a sequence is keyed by tool name, which is then the id).
        similarity_top_k: how many tools to offer per request, pins included.
        llm: a separate (e.g. cheaper) LLM for the LLM stages: a LlamaIndex ``LLM`` or an LLM port.
        always_include: tool names offered on every request, first (pins per tool).
        always_include_servers: servers (catalog parent tools, e.g. an MCP server) whose every tool is offered
            on every request (pins per server).
        fail_open: when the search fails, offer the pinned tools (or the catalog's first ones) instead of
            failing the agent's step; the nodes' ``selection_reason`` says why.
        stable: cache-stable offers: a request's tools are appended to the tools this retriever offered
            before, which keep their positions (one conversation per retriever; :meth:`new_conversation`
            starts another); tool-name lookups are unaffected.
        max_offered: with ``stable``, most tools offered at once (``None``: unbounded).
        on_full: with ``stable``, ``"restart"`` or ``"keep"`` when a request's tools do not fit.
        min_relevance: "no tool fits" (off by default): tools whose relevance is below it are not offered, so
            a request may get only the pinned tools or none; it wins over the fallback that fills a short
            selection, and a failed search then offers only the pins (the core's ``BaseToolSelector``;
            ``retrieve_nodes`` shows the reason). Tool-name lookups are unaffected.

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
        self,
        engine: Engine,
        tools: Mapping[str, BaseTool] | Sequence[BaseTool],
        *,
        similarity_top_k: int = 5,
        llm: Any = None,
        always_include: Sequence[str] = (),
        always_include_servers: Sequence[str] = (),
        fail_open: bool = True,
        stable: bool = False,
        max_offered: int | None = None,
        on_full: OnFull = "restart",
        min_relevance: float | None = None,
    ) -> None:
        by_id = dict(tools) if isinstance(tools, Mapping) else {t.metadata.name or "": t for t in tools}
        retriever = ToolRerankRetriever(engine, similarity_top_k)  # checks similarity_top_k
        #: the core's selection (engine search, pins, fail-open, and the fallback when the engine ranks too few)
        self.selector: BaseToolSelector[BaseTool] = BaseToolSelector(
            engine,
            by_id,
            name=_tool_name,
            max_tools=retriever.similarity_top_k,
            always_include=always_include,
            always_include_servers=always_include_servers,
            fail_open=fail_open,
            builder="ToolRerankToolRetriever.from_tools",
            min_relevance=min_relevance,
        )
        if max_offered is not None and max_offered < retriever.similarity_top_k:
            raise ValueError(f"max_offered={max_offered} must be >= similarity_top_k={retriever.similarity_top_k}")
        #: the conversation's offered tools in cache-stable order (``stable=True``), else None
        self.offers: OfferLog | None = OfferLog(max_offered=max_offered, on_full=on_full) if stable else None
        self.engine = engine
        self.tools_by_name: dict[str, BaseTool] = {t.metadata.name or "": t for t in by_id.values()}
        self._ids_by_name = {_tool_name(t): tid for tid, t in by_id.items()}
        #: the separate LLM of the LLM stages (None: the bound agent's ``llm``)
        self.llm = llm
        self._tools_by_id = by_id
        self._agent: Any = None
        self._port: tuple[Any, Any] = (None, None)  # (LLM, its LLM port), replaced as one
        super().__init__(retriever=retriever, object_node_mapping=_ToolIdMapping(by_id))

    @classmethod
    def from_tools(
        cls,
        tools: Sequence[BaseTool],
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        similarity_top_k: int = 5,
        llm: Any = None,
        resources: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolRerankToolRetriever:
        """Index LlamaIndex tools (names, descriptions, argument schemas) and retrieve among them.

        ``resources``: live objects for the first stage (e.g. ``{"postgres": pool}`` with
        ``toolrerank_plugins.postgres.postgres_config()``; workers then use :meth:`from_postgres`). ``kwargs``: the
        constructor's keyword arguments (``always_include``, ``stable`` ...)."""
        engine = engine_for_tools(
            [tool_to_spec(t) for t in tools],
            config,
            embedder=embedder,
            source="<llama_index tools>",
            resources=resources,
        )
        return cls(engine, tools, similarity_top_k=similarity_top_k, llm=llm, **kwargs)

    @classmethod
    def from_postgres(
        cls,
        pool: Any,
        tools: Sequence[BaseTool],
        *,
        table: str = "toolrerank",
        embedder: Embedder | None = None,
        similarity_top_k: int = 5,
        llm: Any = None,
        **kwargs: Any,
    ) -> ToolRerankToolRetriever:
        """Retrieve among ``tools`` with the engine a PostgreSQL store holds (built by :meth:`from_tools` with
        ``resources={"postgres": pool}`` elsewhere): nothing is encoded (:func:`toolrerank_plugins.postgres.
        connect_engine`). ``pool``: a ``psycopg_pool.ConnectionPool`` or a conninfo string."""
        from toolrerank_plugins.postgres import connect_engine

        engine = connect_engine(pool, table=table, embedder=embedder)
        return cls(engine, tools, similarity_top_k=similarity_top_k, llm=llm, **kwargs)

    @classmethod
    def from_engine(
        cls,
        engine: Engine,
        implementations: Mapping[str, Callable[..., Any]],
        *,
        similarity_top_k: int = 5,
        llm: Any = None,
        **kwargs: Any,
    ) -> ToolRerankToolRetriever:
        """Tools for an engine's catalog from one Python callable per API id (``kwargs``: the constructor's)."""
        tools = tools_for_engine(engine, implementations, spec_to_tool)
        return cls(engine, tools, similarity_top_k=similarity_top_k, llm=llm, **kwargs)

    @property
    def similarity_top_k(self) -> int:
        return self.retriever.similarity_top_k  # type: ignore[attr-defined, no-any-return]

    @property
    def agent(self) -> Any:
        """The agent whose ``llm`` drives the LLM stages (bound by :func:`use_agent_llm`), or None."""
        return self._agent

    def bind_agent(self, agent: Any) -> None:
        """Serve ``agent``: its ``llm`` (read at each call) drives the LLM stages unless ``llm`` was given.

        Raises:
            ValueError: the retriever already serves another agent.
        """
        if self._agent is not None and self._agent is not agent:
            raise ValueError(
                f"this tool retriever already serves agent {self._agent.name!r}, so it cannot also take the LLM "
                f"of agent {agent.name!r}; give each agent its own retriever (they can share one engine: "
                "ToolRerankToolRetriever(retriever.engine, tools))"
            )
        self._agent = agent

    def stage_llm(self) -> Any:
        """The LLM port this call's LLM stages get: ``llm``, else the bound agent's ``llm`` (wrapped in
        :class:`~llama_index.retrievers.toolrerank.LlamaIndexLLM`), else None (the engine's usual lookup)."""
        llm = self.llm if self.llm is not None else getattr(self._agent, "llm", None)
        if llm is None:
            return None
        known, port = self._port
        if known is not llm:
            port = as_llm_port(llm)
            self._port = (llm, port)
        return port

    def _is_lookup(self, query: str) -> bool:
        """Whether ``query`` is the name of a tool the agent may call (the agents' lookup, not a request)."""
        if query in self.tools_by_name or query == HANDOFF_TOOL:
            return True
        own = getattr(self._agent, "tools", None) or ()
        return any(getattr(getattr(t, "metadata", None), "name", None) == query for t in own)

    def _lookup(self, query: str, found: list[ScoredTool]) -> Ranking:
        return Ranking(lookup_first(self._ids_by_name.get(query), found, self.engine.catalog))

    def rank(self, str_or_query_bundle: QueryType) -> Ranking:
        """The ranked tools behind :meth:`retrieve`: a lookup's first-stage ranking with the named tool first,
        or a request's selection (the engine's ranking, filled by the core's fallback when it is short)."""
        query = _query_str(str_or_query_bundle)
        if self._is_lookup(query):
            return self._lookup(query, self.engine.retrieve([query], self.similarity_top_k)[0])
        return self._stable(self.selector.rank_selection(query, self.similarity_top_k, llm=self.stage_llm()))

    async def arank(self, str_or_query_bundle: QueryType) -> Ranking:
        """Async twin of :meth:`rank`."""
        query = _query_str(str_or_query_bundle)
        if self._is_lookup(query):
            found = await asyncio.to_thread(self.engine.retrieve, [query], self.similarity_top_k)
            return self._lookup(query, found[0])
        return self._stable(await self.selector.arank_selection(query, self.similarity_top_k, llm=self.stage_llm()))

    def _stable(self, ranking: Ranking) -> Ranking:
        return ranking if self.offers is None else stable_ranking(self.offers, ranking, self.engine.catalog)

    def new_conversation(self) -> None:
        """With ``stable=True``: forget the tools offered so far (a new conversation begins)."""
        if self.offers is not None:
            self.offers.reset()

    def retrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        return [self._tools_by_id[st.tool.id] for st in self.rank(str_or_query_bundle).results]

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[BaseTool]:
        return [self._tools_by_id[st.tool.id] for st in (await self.arank(str_or_query_bundle)).results]

    def retrieve_nodes(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """What :meth:`retrieve` returns, as nodes (id = tool id) with the fixed metadata keys, plus
        ``selection_reason`` when the core's fallback filled the selection (why, e.g. "the engine ranked 0
        of the 3 tools asked for; 3 added by character n-gram overlap with the tool texts")."""
        return selection_nodes(self.rank(str_or_query_bundle), self.engine.render)

    async def aretrieve_nodes(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """Async twin of :meth:`retrieve_nodes`."""
        return selection_nodes(await self.arank(str_or_query_bundle), self.engine.render)


def use_agent_llm(target: T) -> T:
    """Let the LLM stages of each :class:`ToolRerankToolRetriever` in ``target`` run on the LLM of the agent
    it serves: ``target`` is a ``FunctionAgent`` / ``ReActAgent`` or an ``AgentWorkflow`` (every agent).
    Returns ``target``. A retriever given its own ``llm`` keeps it.

    Example:
        >>> from llama_index.core.agent.workflow import FunctionAgent
        >>> from llama_index.core.llms import MockLLM
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> from toolrerank_plugins.testing.tools import fake_implementation
        >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
        >>> impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
        >>> retriever = ToolRerankToolRetriever.from_engine(engine, impls)
        >>> agent = use_agent_llm(FunctionAgent(tool_retriever=retriever, llm=MockLLM()))
        >>> retriever.agent is agent, type(retriever.stage_llm()).__name__
        (True, 'LlamaIndexLLM')

    Raises:
        ValueError: one retriever serves two agents (give each agent its own).
    """
    agents = getattr(target, "agents", None)
    for agent in agents.values() if isinstance(agents, Mapping) else [target]:
        retriever = getattr(agent, "tool_retriever", None)
        if isinstance(retriever, ToolRerankToolRetriever):
            retriever.bind_agent(agent)
    return target
