"""MCP ``tools/list`` results, one per server: server name -> tool.

Accepts what the official ``mcp`` SDK returns (1.x and 2.x) without importing it: ``ListToolsResult`` and
``Tool`` objects are read through pydantic's ``model_dump(by_alias=True)`` (the wire format, the same in both
SDK generations), and dumps of them with or without aliases (``inputSchema`` / ``input_schema``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec

logger = logging.getLogger(__name__)

#: A tool's fields: wire name (SDK 1.x and 2.x aliases) -> the SDK 2.x Python field name of ``model_dump()``.
_TOOL_FIELDS = {"inputSchema": "input_schema", "outputSchema": "output_schema"}
#: ``ToolAnnotations`` fields: SDK 2.x Python name -> wire name (1.x names its fields by the wire name).
_ANNOTATION_NAMES = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}
#: The fields of a ``ListToolsResult`` besides ``tools``, by wire name and SDK 2.x Python name.
_RESULT_FIELDS = frozenset(
    {"nextCursor", "next_cursor", "_meta", "meta", "ttlMs", "ttl_ms", "cacheScope", "cache_scope"}
    | {"resultType", "result_type"}
)
#: Most pages one server's ``tools/list`` may take in :func:`catalog_from_mcp_sessions` (a loop guard).
MAX_PAGES = 10_000


def _plain(value: Any) -> Any:
    """``value`` itself, or its pydantic wire-format dump when it is a model (an ``mcp.types`` object)."""
    if isinstance(value, Mapping | list | tuple | str | bytes) or value is None:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    return value


def _is_result(value: Mapping[Any, Any]) -> bool:
    """Whether a mapping is one ``tools/list`` result (``{"tools": [...], "nextCursor": ...}``) rather than
    a mapping of server name -> result: a ``tools`` list and nothing but result fields beside it, none of
    which looks like a server's tools."""
    if not isinstance(value.get("tools"), list | tuple):
        return False
    for key, item in value.items():
        if key == "tools":
            continue
        if key not in _RESULT_FIELDS or isinstance(item, list | tuple):
            return False
        if isinstance(item, Mapping) and "tools" in item:
            return False
    return True


def _field(tool: Mapping[str, Any], wire: str, where: str) -> Any:
    """A tool field under its wire name (``inputSchema``) or SDK 2.x Python name (``input_schema``)."""
    python = _TOOL_FIELDS[wire]
    a, b = tool.get(wire), tool.get(python)
    if a is not None and b is not None and a != b:
        raise CatalogError(f"{where}: MCP tool has both {wire!r} and {python!r}, and they differ")
    return a if a is not None else b


def _annotations(value: Any, where: str) -> Any:
    """``ToolAnnotations`` under their wire names, ``None`` hints left out (``model_dump()`` without
    ``exclude_none`` writes them), so every SDK shape gives the same record."""
    value = _plain(value)
    if not isinstance(value, Mapping):
        return value  # ToolSpec refuses what is not JSON and names the field
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        name = _ANNOTATION_NAMES.get(key, key) if isinstance(key, str) else key
        if name in out and out[name] != item:
            raise CatalogError(f"{where}: MCP tool annotations give {name!r} twice, with different values")
        out[name] = item
    return out


def _tools_of(result: Any, server: str | None, source: str) -> list[Any]:
    """The ``tools`` list of one server's result: a ``ListToolsResult`` (object or dump), a bare list of
    tools, or a ``{"tools": [...]}`` mapping."""
    result = _plain(result)
    if isinstance(result, list | tuple):
        return list(result)
    tools = result.get("tools") if isinstance(result, Mapping) else None
    what = f"server {server!r}: " if server is not None else ""
    if not isinstance(tools, list | tuple):
        raise CatalogError(
            f"{source}: {what}expected a tools/list result (a ListToolsResult, a mapping with a 'tools' list, "
            f"or a list of MCP tools), got {type(result).__name__}"
        )
    cursor = result.get("nextCursor") or result.get("next_cursor")
    if cursor:
        logger.warning(
            "%s: %stools/list result has a nextCursor (%r): it is one page of the server's tools; "
            "catalog_from_mcp_sessions() follows the cursors",
            source,
            what,
            cursor,
        )
    return list(tools)


def _spec(t: Any, server: str | None, category: str | None, where: str) -> ToolSpec:
    t = _plain(t)
    if not isinstance(t, Mapping):
        raise CatalogError(f"{where}: expected an MCP tool (a mapping or an mcp.types.Tool), got {type(t).__name__}")
    if not isinstance(t.get("name"), str) or not t["name"]:
        raise CatalogError(f"{where}: MCP tool has no 'name'")
    name = t["name"]
    parameters = _field(t, "inputSchema", f"{where} ({name!r})")
    meta: dict[str, Any] = {"format": "mcp"}
    if server is not None:
        meta["server"] = server
    if t.get("title"):
        meta["title"] = t["title"]
    annotations = _annotations(t.get("annotations"), f"{where} ({name!r})")
    if annotations:
        meta["annotations"] = annotations
    return build_spec(
        where,
        id=name if server is None else f"{server}/{name}",
        name=name,
        description=t.get("description") or "",
        tool=server,
        category=category,
        parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
        returns=_field(t, "outputSchema", f"{where} ({name!r})"),
        metadata=meta,
    )


def from_mcp_tools(
    servers: Any,
    *,
    category: str | None = "mcp",
    source: str = "<mcp>",
    server: str | None = None,
) -> Catalog:
    """Build a catalog from MCP ``tools/list`` results keyed by server name.

    The server becomes the parent tool; each MCP tool an API with id ``"<server>/<tool name>"``,
    ``inputSchema`` as parameters and ``outputSchema`` (when given) as returns; ``title`` and
    ``annotations`` go into the metadata (with ``format: "mcp"`` and ``server``).

    What the official ``mcp`` SDK (1.x or 2.x) returns is accepted as it is, and so is its JSON:

    - a server's result: a ``ListToolsResult``, a list of ``mcp.types.Tool``, the ``model_dump()`` of
      either with or without aliases (SDK 2.x Python names ``input_schema`` / ``output_schema`` and 1.x /
      wire names ``inputSchema`` / ``outputSchema`` give the same catalog), ``{"tools": [...]}``, or a
      bare list of tool mappings;
    - ``servers``: a ``{server name: result}`` mapping of any of these, or one result with ``server="name"``.

    One result without ``server`` (a ``ListToolsResult``, a bare list, or a mapping holding nothing but
    result fields such as ``tools`` and ``nextCursor``) makes each tool its own API (id = its name, no parent
    tool), as :func:`~toolrerank_plugins.loaders.from_openai_tools` does. A result that carries a
    ``nextCursor`` is one page; :func:`catalog_from_mcp_sessions` follows the cursors of live sessions.

    Example:
        >>> cat = from_mcp_tools({"files": {"tools": [{"name": "read_file", "description": "Read a file",
        ...     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}})
        >>> cat["files/read_file"].tool, list(cat["files/read_file"].parameters["properties"])
        ('files', ['path'])
        >>> from_mcp_tools([{"name": "read_file", "input_schema": {"type": "object"}}], server="fs").ids
        ['fs/read_file']
        >>> from_mcp_tools([{"name": "read_file"}]).ids
        ['read_file']

    Raises:
        CatalogError: ``servers`` is of none of these shapes, a server's result has no ``tools`` list, a tool
            is not a mapping or model or is invalid, or ``server=`` is given with a mapping of several
            servers (the message names the server and the tool's position and name).
    """
    if server is not None and not isinstance(server, str):
        raise CatalogError(f"{source}: 'server' must be a string or None, got {type(server).__name__}")
    servers = _plain(servers)
    results: Mapping[Any, Any]
    if isinstance(servers, list | tuple) or (isinstance(servers, Mapping) and _is_result(servers)):
        results = {server: servers}
    elif isinstance(servers, Mapping):
        if isinstance(servers.get("name"), str) and any(k in servers for k in ("inputSchema", "input_schema")):
            raise CatalogError(
                f"{source}: got a single MCP tool ({servers['name']!r}); pass a list of tools or a tools/list result"
            )
        if server is not None:
            raise CatalogError(
                f"{source}: server={server!r} names the server of one tools/list result, but a mapping of "
                f"servers ({', '.join(map(repr, list(servers)[:3]))}) was given; pass it without server="
            )
        results = servers
    else:
        raise CatalogError(
            f"{source}: servers must be a mapping of server name -> tools/list result, one tools/list result "
            f"(a ListToolsResult or a list of MCP tools), got {type(servers).__name__}"
        )
    specs: list[ToolSpec] = []
    for name, result in results.items():
        if name is not None and not isinstance(name, str):
            raise CatalogError(f"{source}: server name must be a string, got {type(name).__name__}")
        label = "" if name is None else f"server {name!r} "
        for i, t in enumerate(_tools_of(result, name, source)):
            specs.append(_spec(t, name, category, f"{source}: {label}tool {i + 1}"))
    return Catalog(specs, source=source)


class ToolLister(Protocol):
    """What :func:`catalog_from_mcp_sessions` needs of a session: ``mcp.ClientSession`` (1.x, 2.x) and
    ``mcp.Client`` (2.x) qualify."""

    def list_tools(self, *args: Any, **kwargs: Any) -> Awaitable[Any]: ...


async def _list_all_tools(session: ToolLister, server: str, source: str) -> list[Any]:
    """Every tool a live session lists, following ``nextCursor`` page by page."""
    tools: list[Any] = []
    cursor: str | None = None
    cursors: set[str] = set()
    for _ in range(MAX_PAGES):
        result = await (session.list_tools() if cursor is None else session.list_tools(**_page_args(cursor)))
        page = _plain(result)
        tools.extend(_tools_of(page.get("tools") if isinstance(page, Mapping) else page, server, source))
        if not isinstance(page, Mapping):
            return tools
        cursor = page.get("nextCursor") or page.get("next_cursor")
        if not cursor:
            return tools
        if not isinstance(cursor, str):
            raise CatalogError(f"{source}: server {server!r}: nextCursor must be a string, got {type(cursor).__name__}")
        if cursor in cursors:
            raise CatalogError(f"{source}: server {server!r}: tools/list returned the cursor {cursor!r} twice")
        cursors.add(cursor)
    raise CatalogError(f"{source}: server {server!r}: tools/list took more than {MAX_PAGES} pages")


def _page_args(cursor: str) -> dict[str, Any]:
    """Keyword arguments of ``ClientSession.list_tools`` for the page at ``cursor``: ``params=`` (SDK 2.x
    and recent 1.x), else the old ``cursor=`` (mcp is imported only here, for a server that pages)."""
    from toolrerank_plugins._extras import require

    params = getattr(require("mcp.types"), "PaginatedRequestParams", None)
    return {"cursor": cursor} if params is None else {"params": params(cursor=cursor)}


async def catalog_from_mcp_sessions(
    sessions: Mapping[str, ToolLister],
    *,
    category: str | None = "mcp",
    source: str = "<mcp sessions>",
) -> Catalog:
    """List the tools of live MCP client sessions (``await session.list_tools()``, every page) and build
    the catalog, keyed by the server names given: ``"<server>/<tool name>"`` ids as in :func:`from_mcp_tools`.

    Sessions are listed one after the other (any anyio backend). Keep a server in step later with
    ``engine.sync(await catalog_from_mcp_sessions({"git": session}), tool="git")``.

    Example (needs running servers, so not run here)::

        async with stdio_client(StdioServerParameters(command="mcp-server-time")) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                catalog = await catalog_from_mcp_sessions({"time": session})

    Raises:
        CatalogError: ``sessions`` is not a mapping of server name -> session, a session has no
            ``list_tools``, or a listed tool is invalid (names the server and the tool).
    """
    if not isinstance(sessions, Mapping):
        raise CatalogError(
            f"{source}: sessions must be a mapping of server name -> MCP client session, got {type(sessions).__name__}"
        )
    results: dict[str, list[Any]] = {}
    for name, session in sessions.items():
        if not isinstance(name, str):
            raise CatalogError(f"{source}: server name must be a string, got {type(name).__name__}")
        if not callable(getattr(session, "list_tools", None)):
            raise CatalogError(
                f"{source}: server {name!r}: expected an MCP client session with list_tools(), "
                f"got {type(session).__name__}"
            )
        results[name] = await _list_all_tools(session, name, source)
    return from_mcp_tools(results, category=category, source=source)
