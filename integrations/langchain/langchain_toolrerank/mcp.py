"""MCP tools loaded through ``langchain-mcp-adapters`` as a catalog (a conversion; the core loader does the rest).

``langchain_mcp_adapters.tools.load_mcp_tools(session)`` and ``MultiServerMCPClient.get_tools()`` return
``StructuredTool`` objects that carry the MCP tool's ``inputSchema`` verbatim as ``args_schema`` (a dict) and its
``ToolAnnotations`` in ``metadata``. :func:`catalog_from_mcp_langchain_tools` turns them back into MCP tool
records and hands them to :func:`toolrerank_plugins.loaders.from_mcp_tools`, so the parameter schema survives
whole (``convert_to_openai_tool`` would drop its titles and ``$defs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.loaders import from_mcp_tools

#: ``ToolAnnotations`` fields as the adapter writes them into ``tool.metadata`` (``model_dump()`` of the
#: annotations: wire names with SDK 1.x, Python names with 2.x).
_ANNOTATION_KEYS = frozenset(
    {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    | {"read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"}
)


def mcp_tool_record(tool: BaseTool) -> dict[str, Any]:
    """A LangChain tool as an MCP tool record (``name``, ``description``, ``inputSchema``, ``annotations``).

    ``inputSchema`` is ``args_schema`` itself when it is a JSON Schema dict (what ``langchain-mcp-adapters``
    sets), else the tool's input JSON Schema. The record's ``name`` is the LangChain tool's name (with the
    adapter's ``tool_name_prefix`` it is ``"<server>_<tool>"``), the name the agent calls it by.
    """
    if not isinstance(tool, BaseTool):
        raise CatalogError(f"expected a LangChain BaseTool, got {type(tool).__name__}")
    schema = tool.args_schema
    parameters = dict(schema) if isinstance(schema, Mapping) else tool.get_input_jsonschema()
    record: dict[str, Any] = {"name": tool.name, "description": tool.description or "", "inputSchema": parameters}
    annotations = {k: v for k, v in (tool.metadata or {}).items() if k in _ANNOTATION_KEYS}
    if annotations:
        record["annotations"] = annotations
    return record


def catalog_from_mcp_langchain_tools(
    tools: Sequence[BaseTool] | Mapping[str, Sequence[BaseTool]],
    *,
    server: str | None = None,
    category: str | None = "mcp",
    source: str = "<langchain-mcp-adapters>",
) -> Catalog:
    """A catalog of MCP tools loaded through ``langchain-mcp-adapters``, ids ``"<server>/<tool name>"``.

    Give ``{server: tools}`` (e.g. ``{name: await client.get_tools(server_name=name) for name in ...}``) or
    one server's tools with ``server=``; without a server each tool is its own API (id = its name). The
    adapter does not keep an ``outputSchema``, so ``returns`` stays empty.

    Example:
        >>> from langchain_core.tools import StructuredTool
        >>> async def call(**kwargs): ...
        >>> tool = StructuredTool(name="git_log", description="Shows the commit logs", coroutine=call,
        ...     args_schema={"type": "object", "properties": {"max_count": {"type": "integer"}}})
        >>> catalog = catalog_from_mcp_langchain_tools([tool], server="git")
        >>> catalog.ids, list(catalog["git/git_log"].parameters["properties"])
        (['git/git_log'], ['max_count'])

    Raises:
        CatalogError: an entry is not a LangChain tool, or its record is not a valid MCP tool.
    """
    if isinstance(tools, Mapping):
        servers: Any = {name: _records(group, name, source) for name, group in tools.items()}
    else:
        servers = _records(tools, server, source)
    return from_mcp_tools(servers, server=server, category=category, source=source)


def _records(tools: Any, server: Any, source: str) -> list[dict[str, Any]]:
    what = f"server {server!r}: " if server is not None else ""
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise CatalogError(f"{source}: {what}expected a list of LangChain tools, got {type(tools).__name__}")
    records = []
    for i, tool in enumerate(tools):
        try:
            records.append(mcp_tool_record(tool))
        except CatalogError as exc:
            raise CatalogError(f"{source}: {what}tool {i + 1}: {exc}") from exc
    return records
