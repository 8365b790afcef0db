"""Conversions between Pydantic AI tool definitions and the core's records (nothing else happens here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.tools import Tool, ToolDefinition

from toolrerank_plugins.catalog import build_spec
from toolrerank_plugins.records import ToolSpec, thaw

#: The toolset id Pydantic AI gives the agent's own ``tools=`` (no server behind them).
AGENT_TOOLSET = "<agent>"


def tool_def_to_spec(tool_def: ToolDefinition) -> ToolSpec:
    """A ``ToolDefinition`` as a catalog API: id and name = the tool's name, its JSON schema as parameters, its
    toolset (an MCP server's toolset id, say) as the parent tool, so server pins work."""
    toolset = tool_def.toolset_id if tool_def.toolset_id and tool_def.toolset_id != AGENT_TOOLSET else None
    return build_spec(
        f"<pydantic_ai tool {tool_def.name!r}>",
        id=tool_def.name,
        name=tool_def.name,
        description=tool_def.description or "",
        tool=toolset,
        parameters=tool_def.parameters_json_schema or {"type": "object", "properties": {}},
        metadata={"format": "pydantic_ai"},
    )


def spec_to_tool(spec: ToolSpec, function: Callable[..., Any]) -> Tool[Any]:
    """An API as a Pydantic AI ``Tool`` calling ``function`` with keyword arguments, under the API's name and
    with its JSON schema as it is."""
    return Tool.from_schema(function, name=spec.name, description=spec.description, json_schema=thaw(spec.parameters))
