"""A search or ``tools/list`` that overlaps an upstream's tool list change (no upstream process: the engine is set).

``ToolProxy._tools_changed`` syncs the engine on a worker thread and re-indexes the exposed names only after it,
so for a moment a name can point at a tool that has already left the catalog. A fresh-clone CI run caught the
live test ``test_an_upstream_tool_list_change_reaches_the_search`` failing there with "no API with id
'lab/stock_price'": the search had ranked the tool before the sync removed it.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types as mcp_types

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders.mcp import from_mcp_tools
from toolrerank_plugins.mcp_proxy.config import ProxyConfig
from toolrerank_plugins.mcp_proxy.proxy import ToolProxy
from toolrerank_plugins.pipelines import pipeline_config

_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"symbol": {"type": "string"}}}
_STOCK = mcp_types.Tool(name="stock_price", description="Current stock price of a company", input_schema=_SCHEMA)
_QUOTE = mcp_types.Tool(name="stock_quote", description="Stock quote with volume for a ticker", input_schema=_SCHEMA)


def _proxy(mode: str) -> ToolProxy:
    config = ProxyConfig.model_validate({"mcpServers": {"lab": {"command": "unused"}}, "toolrerank": {"mode": mode}})
    proxy = ToolProxy(config, engine_config=pipeline_config("bm25"))
    proxy.engine = Engine.build(from_mcp_tools({"lab": [_STOCK, _QUOTE]}), proxy.engine_config)
    proxy._rebuild_selector()
    return proxy


def _mid_sync(proxy: ToolProxy) -> None:
    """The engine synced to a list without ``stock_price``; the names not yet re-indexed (as during the sync)."""
    assert proxy.engine is not None
    proxy.engine.sync(from_mcp_tools({"lab": [_QUOTE]}), tool="lab")


def test_a_search_ranked_before_the_sync_leaves_out_the_removed_tool() -> None:
    proxy = _proxy("meta")

    async def main() -> mcp_types.CallToolResult:
        assert proxy.selector is not None
        ranked = await proxy.selector.arank("stock price", 2)
        assert [st.tool.name for st in ranked.results][:1] == ["stock_price"]  # ranked while it was there

        async def stale(*args: Any, **kwargs: Any) -> Any:
            return ranked

        proxy.selector.arank = stale  # type: ignore[method-assign]
        _mid_sync(proxy)
        return await proxy._call_search({"query": "stock price", "limit": 2})

    result = anyio.run(main)
    assert not result.is_error
    assert result.structured_content is not None
    assert [t["name"] for t in result.structured_content["tools"]] == ["lab__stock_quote"]
    assert result.structured_content["tools"][0]["server"] == "lab"


def test_tools_list_and_down_servers_during_the_sync_leave_out_the_removed_tool() -> None:
    proxy = _proxy("tools")
    proxy.offered.offer(["lab__stock_price", "lab__stock_quote"])
    _mid_sync(proxy)
    listed = [t.name for t in proxy.list_tools()]
    assert "lab__stock_quote" in listed and "lab__stock_price" not in listed
    proxy.upstreams["lab"].status = "down"
    assert proxy._down_names() == ["lab__stock_quote"]
