"""MCP ``tools/list`` results, one per server: server name -> tool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.records import ToolSpec


def from_mcp_tools(
    servers: Mapping[str, Mapping[str, Any] | list[Mapping[str, Any]]],
    *,
    category: str | None = "mcp",
    source: str = "<mcp>",
) -> Catalog:
    """Build a catalog from MCP ``tools/list`` results keyed by server name.

    The server becomes the parent tool; each MCP tool an API with id ``"<server>/<tool name>"``,
    ``inputSchema`` as parameters and ``outputSchema`` (when given) as returns.

    Example:
        >>> cat = from_mcp_tools({"files": {"tools": [{"name": "read_file", "description": "Read a file",
        ...     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}})
        >>> cat["files/read_file"].tool
        'files'
    """
    specs = []
    for server, result in servers.items():
        tools = result.get("tools") if isinstance(result, Mapping) else result
        if not isinstance(tools, list):
            raise CatalogError(f"{source}: server {server!r}: expected a tools/list result with a 'tools' list")
        for i, t in enumerate(tools):
            where = f"{source}: server {server!r} tool {i + 1}"
            if not isinstance(t, Mapping) or not isinstance(t.get("name"), str) or not t["name"]:
                raise CatalogError(f"{where}: MCP tool has no 'name'")
            meta: dict[str, Any] = {"format": "mcp", "server": server}
            if t.get("title"):
                meta["title"] = t["title"]
            if t.get("annotations"):
                meta["annotations"] = t["annotations"]
            specs.append(
                ToolSpec(
                    id=f"{server}/{t['name']}",
                    name=t["name"],
                    description=t.get("description") or "",
                    tool=server,
                    category=category,
                    parameters=t.get("inputSchema") or {"type": "object", "properties": {}},
                    returns=t.get("outputSchema"),
                    metadata=meta,
                )
            )
    return Catalog(specs, source=source)
