"""``toolrerank mcp-proxy``: one MCP server in front of many, offering their tools through one engine.

The proxy is an MCP server (the official SDK's low-level ``Server``) that starts or connects to the upstream
servers of its configuration file (:mod:`toolrerank_plugins.mcp_proxy.config`), builds one engine over all
their tools (ids ``<server>/<tool>``, as :func:`~toolrerank_plugins.loaders.from_mcp_tools` makes them) and
keeps it in step with each server's ``tools/list`` (``Engine.sync(..., tool=server)`` after every
``notifications/tools/list_changed``). Its client sees, per configuration:

* ``mode="meta"``: three meta-tools — ``search_tools`` (query -> the best tools with their input schemas),
  ``call_tool`` (name, arguments -> the upstream result) and ``list_servers`` (each upstream's status) — plus
  the pinned tools;
* ``mode="tools"``: ``search_tools`` and ``list_servers``, the pinned tools, then the tools searches found,
  each appended once (cache-stable: a tool once offered keeps its place, :class:`~toolrerank_plugins.selection.
  OfferLog`); the client is told with ``notifications/tools/list_changed``.

An upstream tool is exposed as ``<server>__<tool>``. Calls are forwarded with the upstream result as it is
(``isError`` results too), a JSON-RPC error is passed through with its code, and a client's cancellation
cancels the upstream call. An upstream that fails to start or dies is marked down and reported (in
``list_servers``, in search results and in any call to its tools); the others keep working. The selection —
pins per tool and per server, fail-open searches, cache-stable order — is the core's
(:class:`~toolrerank_plugins.agents.BaseToolSelector`, :class:`~toolrerank_plugins.selection.OfferLog`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any, TextIO

import anyio
from mcp import MCPError
from mcp import types as mcp_types
from mcp.server.lowlevel import NotificationOptions, Server

from toolrerank_plugins._version import __version__
from toolrerank_plugins.agents import BaseToolSelector, Ranking
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders.mcp import from_mcp_tools
from toolrerank_plugins.mcp_proxy.config import ProxyConfig, ProxySettings
from toolrerank_plugins.mcp_proxy.upstream import Upstream, UpstreamDown
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.selection import OfferLog

logger = logging.getLogger(__name__)

SEARCH_TOOLS, CALL_TOOL, LIST_SERVERS = "search_tools", "call_tool", "list_servers"
#: the JSON-RPC code the SDK gives a request that timed out (mcp_types.REQUEST_TIMEOUT)
REQUEST_TIMEOUT = getattr(mcp_types, "REQUEST_TIMEOUT", -32001)
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def exposed_name(server: str, tool: str) -> str:
    """The name a proxied tool is offered under: ``<server>__<tool>``, in the MCP tool-name characters.

    Example:
        >>> exposed_name("git", "git_log"), exposed_name("files", "read file")
        ('git__git_log', 'files__read_file')
    """
    return f"{server}__{_NAME_CHARS.sub('_', tool)}"[:128]


def _text(text: str, *, error: bool = False, structured: dict[str, Any] | None = None) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=structured, is_error=error
    )


class ToolProxy:
    """The proxy's state: upstream connections, the engine over their tools, the selection and what is offered.

    Use :meth:`serve_stdio` (what ``toolrerank mcp-proxy CONFIG`` runs), or :meth:`running` to drive it in a
    test or an application of your own (``async with proxy.running(): ...`` then :attr:`server`).

    Args:
        config: the configuration (:func:`~toolrerank_plugins.mcp_proxy.config.load_proxy_config`).
        engine_config: the engine's pipeline; default: ``config.toolrerank.pipeline``, else the recommended
            default pipeline.
        errlog: where stdio upstreams' stderr goes (default: this process's stderr).
    """

    def __init__(
        self, config: ProxyConfig, *, engine_config: EngineConfig | None = None, errlog: TextIO | None = None
    ) -> None:
        self.config = config
        self.settings: ProxySettings = config.toolrerank
        if engine_config is None:
            from toolrerank_plugins.pipelines import pipeline_config

            engine_config = pipeline_config(self.settings.pipeline or "default")
        self.engine_config = engine_config
        self.upstreams: dict[str, Upstream] = {
            name: Upstream(name, cfg, on_tools_changed=self._tools_changed, errlog=errlog)
            for name, cfg in config.servers.items()
        }
        self.engine: Engine | None = None
        self.selector: BaseToolSelector[str] | None = None
        self.offered = OfferLog(max_offered=self.settings.max_offered, on_full=self.settings.on_full)
        self._by_name: dict[str, str] = {}  # exposed name -> catalog id
        self._lock = anyio.Lock()  # one engine change at a time
        self._client: Any = None  # the client's ServerSession, for tools/list_changed
        self._ready = anyio.Event()
        self.server = self._build_server()

    # -- engine and selection ---------------------------------------------------------------------------
    def _catalog_of(self, upstream: Upstream) -> Catalog:
        return from_mcp_tools({upstream.name: upstream.tools}, source=f"<mcp server {upstream.name}>")

    def _index_names(self) -> None:
        engine = self.engine
        self._by_name = {}
        if engine is None:
            return
        for spec in engine.catalog:
            name = exposed_name(spec.tool or "", spec.name)
            if name in self._by_name:  # two tool names that differ only in characters MCP names cannot hold
                name = f"{name}_{sum(1 for n in self._by_name if n.startswith(name))}"
            self._by_name[name] = spec.id

    def _pins(self, engine: Engine) -> tuple[list[str], list[str]]:
        """The pinned tools (exposed names) and servers present in the catalog now; the others are logged."""
        ids = {v: k for k, v in self._by_name.items()}
        tools: list[str] = []
        for pin in self.settings.pin_tools:
            name = pin if pin in self._by_name else ids.get(pin)
            if name is None:
                logger.warning("pinned tool %r is not offered by any upstream server now", pin)
            else:
                tools.append(name)
        servers = {s.tool for s in engine.catalog}
        missing = [s for s in self.settings.pin_servers if s not in servers]
        if missing:
            logger.warning("pinned servers %s have no tools now (down or empty)", missing)
        return tools, [s for s in self.settings.pin_servers if s in servers]

    def _rebuild_selector(self) -> None:
        engine = self.engine
        self._index_names()
        if engine is None:
            self.selector = None
            return
        tools, servers = self._pins(engine)
        names = {tid: name for name, tid in self._by_name.items()}
        pinned = len(set(tools) | {n for n, tid in self._by_name.items() if engine.catalog[tid].tool in servers})
        self.selector = BaseToolSelector(
            engine,
            names,
            name=str,
            max_tools=max(self.settings.search_k, pinned, 1),
            always_include=tools,
            always_include_servers=servers,
            fail_open=self.settings.fail_open,
            builder="ToolProxy",
        )
        gone = [n for n in self.offered.names if n not in self._by_name]
        if gone:
            self.offered.forget(gone)
        self.offered.offer([str(t) for t in self.selector.pinned])

    async def _build_engine(self) -> None:
        up = [u for u in self.upstreams.values() if u.status == "up" and u.tools]
        if not up:
            logger.warning("no upstream server offers tools; search_tools will find nothing until one does")
            return
        catalog = Catalog([spec for u in up for spec in self._catalog_of(u)], source="<mcp proxy>")
        self.engine = await anyio.to_thread.run_sync(lambda: Engine.build(catalog, self.engine_config))
        self._rebuild_selector()
        logger.info("engine over %d tools of %d servers", len(catalog), len(up))

    async def _tools_changed(self, upstream: Upstream) -> None:
        """An upstream's tool list changed: sync its part of the engine, tell the client if what it sees did."""
        async with self._lock:
            before = self._visible_specs()
            catalog = self._catalog_of(upstream)
            engine = self.engine
            if engine is None:
                if len(catalog):
                    self.engine = await anyio.to_thread.run_sync(lambda: Engine.build(catalog, self.engine_config))
            else:
                report = await anyio.to_thread.run_sync(lambda: engine.sync(catalog, tool=upstream.name))
                logger.info(
                    "server %r changed its tools: %d added, %d updated, %d removed",
                    upstream.name,
                    len(report.added),
                    len(report.updated),
                    len(report.removed),
                )
            self._rebuild_selector()
            changed = self._visible_specs() != before
        if changed:
            await self._notify_client()

    def _visible_specs(self) -> list[Any]:
        return [spec for n in self.offered.names if (spec := self._spec(n)) is not None]

    def _spec(self, name: str) -> ToolSpec | None:
        """The catalog entry behind an exposed name; None where there is none now. An upstream's tool list change
        syncs the engine on a worker thread and re-indexes the names after it, so a search or ``tools/list``
        meanwhile can hold a name whose tool has just left the catalog: it is left out, never a KeyError."""
        engine, tid = self.engine, self._by_name.get(name)
        return None if engine is None or tid is None else engine.catalog.get(tid)

    async def _notify_client(self) -> None:
        client = self._client
        if client is None:
            return
        try:
            await client.send_tool_list_changed()
        except Exception as exc:  # noqa: BLE001 - a client that cannot be told re-lists on its own schedule
            logger.info("could not send tools/list_changed to the client: %s", exc)

    def _down_names(self) -> list[str]:
        down = {n for n, u in self.upstreams.items() if u.status != "up"}
        engine = self.engine
        if engine is None or not down:
            return []
        return [n for n in self._by_name if (spec := self._spec(n)) is not None and spec.tool in down]

    async def search(self, query: str, k: int | None = None) -> tuple[list[str], Ranking]:
        """The exposed names of the best ``k`` tools for ``query`` (tools of servers that are down left out)
        and the ranking behind them; fail-open when the search fails (see ``ProxySettings.fail_open``)."""
        selector = self.selector
        if selector is None:
            return [], Ranking([], "no upstream server offers tools")
        k = min(k or self.settings.search_k, selector.max_tools)
        ranking = await selector.arank(query, k, exclude=self._down_names())
        names = {tid: name for name, tid in self._by_name.items()}
        found = [names[st.tool.id] for st in ranking.results if st.tool.id in names][:k]
        if not found and ranking.reason is not None:  # fail-open with pins: the pinned set, never nothing
            found = [str(t) for t in selector.pinned]
        return found, ranking

    # -- the MCP server ------------------------------------------------------------------------------------
    def _tool_entry(self, name: str, spec: ToolSpec) -> mcp_types.Tool:
        upstream = self.upstreams.get(spec.tool or "")
        original = next((t for t in upstream.tools if t.name == spec.name), None) if upstream else None
        if original is not None:
            return original.model_copy(update={"name": name})
        return mcp_types.Tool(
            name=name,
            description=spec.description,
            input_schema=dict(spec.parameters),  # type: ignore[arg-type]
        )

    def _meta_tools(self) -> list[mcp_types.Tool]:
        up = [u for u in self.upstreams.values() if u.status == "up"]
        count = sum(len(u.tools) for u in up)
        servers = ", ".join(u.name for u in up) or "none up"
        then = (
            "then call one with call_tool(name, arguments)"
            if self.settings.mode == "meta"
            else "the tools found are added to your tool list"
        )
        tools = [
            mcp_types.Tool(
                name=SEARCH_TOOLS,
                description=(
                    f"Search the {count} tools of the MCP servers behind this proxy ({servers}) for the task at "
                    f"hand, described in plain words; returns the best matches with their input schemas; {then}."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "what the tool should do"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "most tools"},
                    },
                    "required": ["query"],
                },
                annotations=mcp_types.ToolAnnotations(read_only_hint=True),
            ),
        ]
        if self.settings.mode == "meta":
            tools.append(
                mcp_types.Tool(
                    name=CALL_TOOL,
                    description="Call a tool that search_tools found, by its name, with its arguments.",
                    input_schema={
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "description": "the tool's name as search_tools gave it"},
                            "arguments": {"type": "object", "description": "the tool's arguments"},
                        },
                        "required": ["name"],
                    },
                )
            )
        tools.append(
            mcp_types.Tool(
                name=LIST_SERVERS,
                description="List the MCP servers behind this proxy: status (up / down and why) and tool counts.",
                input_schema={"type": "object", "properties": {}},
                annotations=mcp_types.ToolAnnotations(read_only_hint=True),
            )
        )
        return tools

    def list_tools(self) -> list[mcp_types.Tool]:
        """What the client's ``tools/list`` gets: the meta-tools, then the offered upstream tools in offer order
        (in ``meta`` mode only the pinned ones)."""
        offered = list(self.offered.names)
        if self.settings.mode == "meta" and self.selector is not None:
            pinned = {str(t) for t in self.selector.pinned}
            offered = [n for n in offered if n in pinned]
        return [*self._meta_tools(), *(self._tool_entry(n, s) for n in offered if (s := self._spec(n)) is not None)]

    def _build_server(self) -> Server[Any]:
        async def on_list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
            self._client = ctx.session
            await self._ready.wait()
            return mcp_types.ListToolsResult(tools=self.list_tools())

        async def on_call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
            self._client = ctx.session
            await self._ready.wait()
            return await self.call(params.name, dict(params.arguments or {}))

        return Server(
            "toolrerank-mcp-proxy",
            version=__version__,
            instructions=(
                "This server fronts several MCP servers. Use search_tools to find the tool for a task"
                + (", then call_tool to run it." if self.settings.mode == "meta" else "; found tools are added.")
            ),
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )

    # -- tool calls ----------------------------------------------------------------------------------------
    async def call(self, name: str, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        """Answer a ``tools/call`` of the client (a meta-tool or a proxied tool)."""
        if name == SEARCH_TOOLS:
            return await self._call_search(arguments)
        if name == LIST_SERVERS:
            async with anyio.create_task_group() as tg:  # a server that died since its last call shows as down
                for upstream in self.upstreams.values():
                    tg.start_soon(upstream.check)
            servers = [u.report() for u in self.upstreams.values()]
            lines = [
                f"{s['name']} ({s['transport']}): {s['status']}, {s['tools']} tools"
                + (f" — {s['error']}" if s["error"] else "")
                for s in servers
            ]
            return _text("\n".join(lines), structured={"servers": servers})
        if name == CALL_TOOL and self.settings.mode == "meta":
            target = arguments.get("name")
            args = arguments.get("arguments") or {}
            if not isinstance(target, str) or not isinstance(args, Mapping):
                return _text("call_tool needs 'name' (a string) and 'arguments' (an object)", error=True)
            return await self._forward(target, dict(args))
        return await self._forward(name, dict(arguments))

    def _resolve(self, name: str) -> str | None:
        """The exposed name of a tool given by exposed name or catalog id (``server/tool``)."""
        if name in self._by_name:
            return name
        return next((n for n, tid in self._by_name.items() if tid == name), None)

    async def _forward(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        exposed = self._resolve(name)
        engine = self.engine
        if exposed is None or engine is None:
            return _text(f"unknown tool {name!r}; use {SEARCH_TOOLS} to find tools and their names", error=True)
        spec = engine.catalog[self._by_name[exposed]]
        upstream = self.upstreams[spec.tool or ""]
        try:
            return await upstream.call(spec.name, arguments, timeout_s=self.settings.call_timeout_s)
        except UpstreamDown as down:
            return _text(f"{down}; its tools cannot be called now ({LIST_SERVERS} shows every server)", error=True)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT and self.settings.call_timeout_s is not None:
                return _text(f"{exposed}: no answer within {self.settings.call_timeout_s:g} s", error=True)
            raise  # the upstream's JSON-RPC error, passed through with its code and data

    async def _call_search(self, arguments: Mapping[str, Any]) -> mcp_types.CallToolResult:
        query = arguments.get("query")
        limit = arguments.get("limit")
        if not isinstance(query, str) or not query.strip():
            return _text("search_tools needs a 'query': what the tool should do, in plain words", error=True)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            return _text("'limit' must be a positive integer", error=True)
        found, ranking = await self.search(query, limit)
        down = [u.name for u in self.upstreams.values() if u.status == "down"]
        entries: list[dict[str, Any]] = []
        for n in found:
            spec = self._spec(n)
            if spec is None:  # left the catalog since the search ranked it
                continue
            tool = self._tool_entry(n, spec)
            entries.append(
                {
                    "name": n,
                    "server": spec.tool,
                    "description": tool.description or "",
                    "input_schema": tool.input_schema,
                }
            )
        added: tuple[str, ...] = ()
        if self.settings.mode == "tools" and found:
            before = self._visible_specs()
            pins = [str(t) for t in self.selector.pinned] if self.selector is not None else []
            added = self.offered.offer([*pins, *found]).added  # pins first: a restart keeps them in front
            if self._visible_specs() != before:
                await self._notify_client()
        lines = [f"{len(found)} tools for {query!r}:"]
        for e in entries:
            lines.append(f"- {e['name']} (server {e['server']}): {str(e['description']).strip()[:300]}")
            if self.settings.mode == "meta":
                lines.append(f"  input schema: {json.dumps(e['input_schema'], ensure_ascii=False)}")
        if self.settings.mode == "tools" and added:
            lines.append(f"Added to your tools: {', '.join(added)}.")
        if ranking.reason:
            lines.append(f"Note: {ranking.reason}")
        if down:
            lines.append(f"Servers down (their tools are left out): {', '.join(down)}.")
        structured = {"tools": entries, "down": down, "note": ranking.reason}
        return _text("\n".join(lines), structured=structured)

    # -- running -------------------------------------------------------------------------------------------
    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start every upstream in ``tg``, wait until each is up or down, and build the engine."""
        for upstream in self.upstreams.values():
            tg.start_soon(upstream.run)
        for upstream in self.upstreams.values():
            await upstream.wait_ready()
        async with self._lock:
            await self._build_engine()
        self._ready.set()
        for upstream in self.upstreams.values():
            if upstream.status == "down":
                logger.warning("server %r is down: %s", upstream.name, upstream.error)

    def stop(self) -> None:
        for upstream in self.upstreams.values():
            upstream.stop()

    async def serve_stdio(self) -> None:
        """Serve the proxy over stdio until the client disconnects (``toolrerank mcp-proxy``)."""
        from mcp.server.stdio import stdio_server

        async with anyio.create_task_group() as tg:
            # the client may initialize while the upstreams start: its requests wait for them (self._ready)
            tg.start_soon(self.start, tg)
            async with stdio_server() as (read, write):
                options = self.server.create_initialization_options(NotificationOptions(tools_changed=True))
                await self.server.run(read, write, options)
            self.stop()
            tg.cancel_scope.cancel()

    def report(self) -> list[dict[str, Any]]:
        """Every upstream's state (what ``list_servers`` returns)."""
        return [u.report() for u in self.upstreams.values()]
