"""The engine as Pydantic AI's tool search: a ``ToolSearch`` strategy, and toolsets over an engine's catalog.

Pydantic AI's ``ToolSearch`` capability hides the tools marked ``defer_loading=True`` until a search finds them,
and takes the search as a strategy: a callable ``(ctx, queries, tools) -> names``, used by its local
``search_tools`` tool and by the providers' client-executed native search (Anthropic ``tool_reference``
blocks, OpenAI ``tool_search`` with ``execution="client"``). :class:`EngineToolSearch` is that callable: it
ranks the deferred tools with a toolrerank engine. What it selects — pins per tool and per server first, then the
engine's ranking, fail-open to the pinned set when the search fails — is the core's
:class:`~toolrerank_plugins.agents.BaseToolSelector`; this module only converts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai.capabilities import ToolSearch
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from pydantic_ai_toolrerank._convert import spec_to_tool, tool_def_to_spec
from toolrerank_plugins.agents import BaseToolSelector
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.interop import engine_for_tools

logger = logging.getLogger(__name__)


class EngineToolSearch:
    """A ``ToolSearch`` strategy backed by a toolrerank engine: ``ToolSearch(strategy=EngineToolSearch(...))``.

    With ``engine`` the search ranks that engine's catalog (its API names are the tools' names; a tool the
    catalog lacks is never found, one the agent does not offer is left out). Without it, the strategy indexes
    the deferred tools it is handed (names, descriptions, JSON schemas; ``config`` picks the pipeline, default
    the recommended one) and keeps that index in step when they change (``Engine.sync``: only what changed is
    re-encoded).

    Args:
        engine: an engine over the tools' catalog; ``None``: built from the deferred tools.
        config: the pipeline of the engine built from the deferred tools.
        embedder: its embedder (tests pass a fake one).
        k: most tools one search returns (``ToolSearch.max_results`` caps it too).
        always_include: tool names every search returns first (pins per tool).
        always_include_servers: toolset ids (an MCP server's toolset) whose every tool every search returns
            first (pins per server).
        fail_open: when the search itself fails, return the pinned tools (or the first ``k`` deferred tools)
            instead of raising.

    Example:
        >>> import asyncio
        >>> from pydantic_ai.tools import ToolDefinition
        >>> tools = [ToolDefinition(name="get_weather", description="Weather forecast for a city."),
        ...          ToolDefinition(name="send_email", description="Send an email message to a recipient.")]
        >>> strategy = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=1)
        >>> asyncio.run(strategy(None, ["email my boss"], tools))
        ['send_email']
        >>> agent_capability = toolrerank_tool_search(strategy)  # Agent(..., capabilities=[agent_capability])
    """

    def __init__(
        self,
        engine: Engine | None = None,
        config: EngineConfig | None = None,
        *,
        embedder: Embedder | None = None,
        k: int = 5,
        always_include: Iterable[str] = (),
        always_include_servers: Iterable[str] = (),
        fail_open: bool = True,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if engine is not None and (config is not None or embedder is not None):
            raise ValueError("give an engine, or a config (and embedder) to build one from the tools, not both")
        self.engine = engine
        self._own = engine is None
        self.config = config
        self.embedder = embedder
        self.k = k
        self.always_include = list(dict.fromkeys(always_include))
        self.always_include_servers = list(dict.fromkeys(always_include_servers))
        self.fail_open = fail_open
        #: the names the last search returned (for logs and tests)
        self.last_found: list[str] = []
        #: why the last search was filled by a fallback or failed open (None: the engine ranked enough)
        self.last_reason: str | None = None
        self._selector: tuple[Catalog, BaseToolSelector[str]] | None = None
        self._lock = asyncio.Lock()

    # -- the engine over the deferred tools ------------------------------------------------------------
    def _index(self, tools: Sequence[ToolDefinition]) -> Engine:
        """The engine, built from or synced with ``tools`` when this strategy owns it (runs in a thread)."""
        catalog = Catalog([tool_def_to_spec(t) for t in tools], source="<pydantic_ai deferred tools>")
        if self.engine is None:
            self.engine = engine_for_tools(list(catalog), self.config, embedder=self.embedder, source=catalog.source)
        elif self._own and [s.to_dict() for s in self.engine.catalog] != [s.to_dict() for s in catalog]:
            report = self.engine.sync(catalog)
            logger.info("deferred tools changed: %s", report)
        return self.engine

    def selector(self, engine: Engine) -> BaseToolSelector[str]:
        """The core selector over the engine's current catalog (rebuilt when the catalog changes)."""
        catalog = engine.catalog
        cached = self._selector
        if cached is not None and cached[0] is catalog:
            return cached[1]
        names = {spec.id: spec.name for spec in catalog}
        known = set(names.values())
        missing = [p for p in self.always_include if p not in known]
        if missing:
            logger.warning("pinned tools %s are not among the searchable tools; left out", missing)
        servers = {s.tool for s in catalog}
        pins = [p for p in self.always_include if p in known]
        pin_servers = [s for s in self.always_include_servers if s in servers]
        pinned = set(pins) | {s.name for s in catalog if s.tool in set(pin_servers)}
        selector = BaseToolSelector(
            engine,
            names,
            name=str,
            max_tools=max(self.k, len(pinned), 1),
            always_include=pins,
            always_include_servers=pin_servers,
            fail_open=self.fail_open,
            builder="EngineToolSearch",
        )
        self._selector = (catalog, selector)
        return selector

    # -- the strategy ----------------------------------------------------------------------------------
    async def __call__(self, ctx: Any, queries: Sequence[str], tools: Sequence[ToolDefinition]) -> list[str]:
        """Pydantic AI's ``ToolSearchFunc``: the names of the best tools for ``queries`` among ``tools``."""
        offered = [t.name for t in tools]
        query = " ".join(q.strip() for q in queries if q and q.strip())
        try:
            async with self._lock:  # one index change at a time
                engine = await asyncio.to_thread(self._index, tools)
            selector = self.selector(engine)
            available = set(offered)
            exclude = [n for n in selector.tools_by_name if n not in available]
            selected = await selector.aselect_detailed(query, self.k, exclude=exclude)
            found = [n for n in selected.tools if n in available]
            self.last_reason = selected.reason
        except Exception as exc:
            if not self.fail_open:
                raise
            pins = [n for n in self.always_include if n in offered]
            found = pins or offered[: self.k]
            self.last_reason = f"the search failed ({type(exc).__name__}: {exc}); fail_open"
            logger.warning("tool search for %.80r: %s", query, self.last_reason, exc_info=exc)
        self.last_found = found
        return found

    def __repr__(self) -> str:
        size = len(self.engine.catalog) if self.engine is not None else 0
        return f"EngineToolSearch({size} tools, k={self.k}, pinned={len(self.always_include)})"


def toolrerank_tool_search(strategy: EngineToolSearch | None = None, **kwargs: Any) -> ToolSearch[Any]:
    """Pydantic AI's ``ToolSearch`` capability with the engine as its strategy (``max_results`` = ``k``).

    ``kwargs`` build the :class:`EngineToolSearch` when ``strategy`` is not given.
    """
    strategy = strategy if strategy is not None else EngineToolSearch(**kwargs)
    return ToolSearch(strategy=strategy, max_results=strategy.k)


def toolset_for_engine(
    engine: Engine,
    implementations: Mapping[str, Callable[..., Any]],
    *,
    pinned: Iterable[str] = (),
    pinned_servers: Iterable[str] = (),
    id: str | None = None,
) -> AbstractToolset[Any]:
    """A toolset with one tool per API of ``engine``'s catalog (``implementations``: API id -> callable),
    each deferred (``defer_loading``) but the pinned ones (API names or ids; every API of a pinned server), which
    the agent sees from the start. ``id``: the toolset's id (what server pins name).

    Raises:
        ValueError: an API has no implementation (named), or two APIs share a name (tools are called by name).
    """
    missing = [i for i in engine.catalog.ids if i not in implementations]
    if missing:
        raise ValueError(f"no implementation for {len(missing)} APIs, e.g. {missing[:3]}")
    names = [engine.catalog[i].name for i in engine.catalog.ids]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(f"APIs share the names {doubled[:5]}: Pydantic AI calls tools by name")
    pins = set(pinned)
    servers = set(pinned_servers)
    tools = [spec_to_tool(engine.catalog[i], implementations[i]) for i in engine.catalog.ids]
    keep = {s.name for s in engine.catalog if s.name in pins or s.id in pins or s.tool in servers}
    return FunctionToolset(tools, id=id).defer_loading([t.name for t in tools if t.name not in keep])
