"""MCP tools loaded through ``langchain-mcp-adapters`` become the same catalog as the MCP tools themselves.

``langchain_mcp_adapters.tools.convert_mcp_tool_to_langchain_tool`` builds ``StructuredTool(name=tool.name,
description=tool.description or "", args_schema=tool.inputSchema, metadata=<annotations.model_dump() and
_meta>, response_format="content_and_artifact", coroutine=...)``. The adapter's current releases pin
``mcp<2`` and do not import next to SDK 2.x (the SDK the real servers need), so the first tests build the tool
exactly that way from real ``mcp.types.Tool`` objects; the last test uses the adapter itself where it is
installed and imports (its skip says which of the two it is not).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
mcp_types = pytest.importorskip("mcp.types", reason="the mcp SDK is not installed (pip install -e '.[mcp]')")

from langchain_core.tools import StructuredTool  # noqa: E402
from langchain_toolrerank.mcp import catalog_from_mcp_langchain_tools  # noqa: E402

from toolrerank_plugins import CatalogError, from_mcp_tools  # noqa: E402
from toolrerank_plugins.records import thaw  # noqa: E402

SCHEMA = {
    "type": "object",
    "title": "logArguments",
    "properties": {
        "repo_path": {"type": "string", "title": "Repo Path"},
        "max_count": {"type": "integer", "default": 10, "title": "Max Count"},
        "since": {"$ref": "#/$defs/Date"},
    },
    "required": ["repo_path"],
    "$defs": {"Date": {"type": "string", "format": "date"}},
}


def _mcp_tools() -> list[Any]:
    """Two ``mcp.types.Tool`` objects (validated from the wire format: the same code for SDK 1.x and 2.x)."""
    return [
        mcp_types.Tool.model_validate(
            {
                "name": "git_log",
                "description": "Shows the commit logs",
                "inputSchema": SCHEMA,
                "annotations": {"readOnlyHint": True, "destructiveHint": False},
            }
        ),
        mcp_types.Tool.model_validate(
            {"name": "git_status", "description": "Shows the working tree status", "inputSchema": SCHEMA}
        ),
    ]


def _as_adapter_does(tool: Any, *, prefix: str | None = None) -> StructuredTool:
    """``convert_mcp_tool_to_langchain_tool`` (langchain-mcp-adapters 0.3.x), minus the session call."""

    async def call_tool(**arguments: Any) -> Any:
        raise AssertionError("not called in these tests")

    base = tool.annotations.model_dump() if tool.annotations is not None else {}
    meta = {"_meta": tool.meta} if tool.meta is not None else {}
    return StructuredTool(
        name=f"{prefix}_{tool.name}" if prefix else tool.name,
        description=tool.description or "",
        args_schema=tool.model_dump(by_alias=True)["inputSchema"],
        coroutine=call_tool,
        response_format="content_and_artifact",
        metadata={**base, **meta} or None,
    )


def test_adapter_tools_give_the_mcp_catalog_with_the_whole_schema() -> None:
    tools = _mcp_tools()
    catalog = catalog_from_mcp_langchain_tools({"git": [_as_adapter_does(t) for t in tools]})
    assert [s.to_dict() for s in catalog] == [s.to_dict() for s in from_mcp_tools({"git": tools})]
    log = catalog["git/git_log"]
    assert thaw(log.parameters) == SCHEMA  # titles and $defs kept (convert_to_openai_tool drops them)
    assert thaw(log.metadata)["annotations"] == {"readOnlyHint": True, "destructiveHint": False}


def test_one_servers_tools_and_prefixed_names() -> None:
    tools = [_as_adapter_does(t, prefix="git") for t in _mcp_tools()]
    catalog = catalog_from_mcp_langchain_tools(tools, server="git")
    assert catalog.ids == ["git/git_git_log", "git/git_git_status"]  # the name the agent calls the tool by
    assert catalog_from_mcp_langchain_tools(tools).ids == ["git_git_log", "git_git_status"]


def test_a_pydantic_args_schema_gives_its_json_schema() -> None:
    def lookup(city: str, days: int = 3) -> str:
        """Look up the forecast."""
        return city

    catalog = catalog_from_mcp_langchain_tools([StructuredTool.from_function(lookup)], server="weather")
    assert set(catalog["weather/lookup"].parameters["properties"]) == {"city", "days"}


@pytest.mark.parametrize(
    ("tools", "kwargs", "message"),
    [
        (["not a tool"], {"server": "git"}, "server 'git': tool 1: expected a LangChain BaseTool, got str"),
        ({"git": "git_log"}, {}, "server 'git': expected a list of LangChain tools, got str"),
        ({"git": []}, {"server": "git"}, "server='git' names the server of one tools/list result"),
    ],
)
def test_bad_input_raises_catalog_error(tools: Any, kwargs: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        catalog_from_mcp_langchain_tools(tools, **kwargs)


def _adapter_converter(module: str = "langchain_mcp_adapters.tools") -> tuple[Any, str]:
    """``(convert_mcp_tool_to_langchain_tool, "")``, or ``(None, why not)``: not installed, or installed but
    failing to import. Checked with pip against mcp 2.3: 0.3.2 requires mcp<2 (pip would downgrade the
    SDK the live-server tests need), 0.3.1 installs next to mcp 2.x but imports mcp.server.fastmcp, which 2.x
    removed; so CI does not install it and the test below skips."""
    package = module.split(".")[0]
    if importlib.util.find_spec(package) is None:
        return None, f"{package.replace('_', '-')} is not installed"
    try:
        converter = importlib.import_module(module).convert_mcp_tool_to_langchain_tool
    except ImportError as exc:
        sdk = importlib.metadata.version("mcp")
        return None, f"{package.replace('_', '-')} is installed but fails to import next to mcp {sdk}: {exc}"
    return converter, ""


def test_the_skip_reason_tells_not_installed_from_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _adapter_converter("no_such_adapter_pkg.tools") == (None, "no-such-adapter-pkg is not installed")
    broken = tmp_path / "broken_adapter_pkg"
    broken.mkdir()
    (broken / "__init__.py").write_text("", encoding="utf-8")
    (broken / "tools.py").write_text("from mcp.server.no_such_module import Tool\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    converter, why = _adapter_converter("broken_adapter_pkg.tools")
    assert converter is None and why.startswith("broken-adapter-pkg is installed but fails to import next to mcp ")


def test_with_the_real_adapter() -> None:
    convert_mcp_tool_to_langchain_tool, why = _adapter_converter()
    if convert_mcp_tool_to_langchain_tool is None:
        pytest.skip(why)
    tools = _mcp_tools()
    connection: Any = {"transport": "stdio", "command": "unused", "args": []}  # never started: no call is made
    converted = [convert_mcp_tool_to_langchain_tool(None, t, connection=connection) for t in tools]
    for real, replica in zip(converted, (_as_adapter_does(t) for t in tools)):
        assert (real.name, real.description, real.args_schema, real.metadata) == (
            replica.name,
            replica.description,
            replica.args_schema,
            replica.metadata,
        )
    catalog = catalog_from_mcp_langchain_tools({"git": converted})
    assert [s.to_dict() for s in catalog] == [s.to_dict() for s in from_mcp_tools({"git": tools})]
