"""MCP ``tools/list`` results, one per server: server name -> tool."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec


def from_mcp_tools(
    servers: Mapping[str, Mapping[str, Any] | list[Mapping[str, Any]]] | Sequence[Mapping[str, Any]],
    *,
    category: str | None = "mcp",
    source: str = "<mcp>",
    server: str | None = None,
) -> Catalog:
    """Build a catalog from MCP ``tools/list`` results keyed by server name.

    The server becomes the parent tool; each MCP tool an API with id ``"<server>/<tool name>"``,
    ``inputSchema`` as parameters and ``outputSchema`` (when given) as returns. A server's value is its
    ``tools/list`` result (``{"tools": [...]}``) or the bare ``tools`` list.

    A bare list of MCP tools (one server's ``tools`` array, without the server name) is accepted too: with
    ``server="name"`` it is ``{"name": tools}``; without, each tool is its own API (id = its name, no parent
    tool), as :func:`~toolrerank_plugins.loaders.from_openai_tools` does.

    Example:
        >>> cat = from_mcp_tools({"files": {"tools": [{"name": "read_file", "description": "Read a file",
        ...     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}})
        >>> cat["files/read_file"].tool
        'files'
        >>> from_mcp_tools([{"name": "read_file"}]).ids
        ['read_file']

    Raises:
        CatalogError: ``servers`` is neither a mapping nor a list, a server's result has no ``tools`` list,
            or a tool is invalid (the message names the server and the tool's position).
    """
    if server is not None and not isinstance(server, str):
        raise CatalogError(f"{source}: 'server' must be a string or None, got {type(server).__name__}")
    if isinstance(servers, list | tuple):
        results: Mapping[Any, Any] = {server: servers}
    elif isinstance(servers, Mapping):
        results = servers
    else:
        raise CatalogError(
            f"{source}: servers must be a mapping of server name -> tools/list result, or a list of MCP "
            f"tools, got {type(servers).__name__}"
        )
    specs: list[ToolSpec] = []
    for name, result in results.items():
        if name is not None and not isinstance(name, str):
            raise CatalogError(f"{source}: server name must be a string, got {type(name).__name__}")
        label = "" if name is None else f"server {name!r} "
        tools = result.get("tools") if isinstance(result, Mapping) else result
        if not isinstance(tools, list | tuple):
            what = (
                f"server {name!r}: expected a tools/list result" if name is not None else "expected a tools/list result"
            )
            raise CatalogError(f"{source}: {what} with a 'tools' list, got {type(result).__name__}")
        for i, t in enumerate(tools):
            where = f"{source}: {label}tool {i + 1}"
            if not isinstance(t, Mapping) or not isinstance(t.get("name"), str) or not t["name"]:
                raise CatalogError(f"{where}: MCP tool has no 'name'")
            meta: dict[str, Any] = {"format": "mcp"}
            if name is not None:
                meta["server"] = name
            if t.get("title"):
                meta["title"] = t["title"]
            if t.get("annotations"):
                meta["annotations"] = t["annotations"]
            specs.append(
                build_spec(
                    where,
                    id=t["name"] if name is None else f"{name}/{t['name']}",
                    name=t["name"],
                    description=t.get("description") or "",
                    tool=name,
                    category=category,
                    parameters=t.get("inputSchema") or {"type": "object", "properties": {}},
                    returns=t.get("outputSchema"),
                    metadata=meta,
                )
            )
    return Catalog(specs, source=source)
