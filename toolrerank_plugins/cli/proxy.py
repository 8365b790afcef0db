"""``toolrerank mcp-proxy CONFIG``: an MCP server over stdio in front of the MCP servers of a config file
(docs/mcp-proxy.md)."""

from __future__ import annotations

import argparse
from typing import Any

from toolrerank_plugins.cli._common import pipeline_help, positive_int
from toolrerank_plugins.errors import MissingExtraError


def cmd_mcp_proxy(args: argparse.Namespace) -> int:
    from toolrerank_plugins._extras import require

    mcp = require("mcp")
    version = getattr(mcp, "__version__", None) or _version("mcp")
    if version is not None and int(version.split(".")[0]) < 2:
        raise MissingExtraError(
            f"the MCP proxy needs the mcp SDK 2.x (found {version}): pip install 'mcp>=2.3' "
            '(pip install -e ".[test]" installs it with the servers the tests use)'
        )
    import anyio

    from toolrerank_plugins.mcp_proxy.config import load_proxy_config
    from toolrerank_plugins.mcp_proxy.proxy import ToolProxy

    config = load_proxy_config(args.config)
    overrides: dict[str, Any] = {
        key: value
        for key, value in {
            "mode": args.mode,
            "pipeline": args.pipeline,
            "search_k": args.search_k,
            "max_offered": args.max_offered,
        }.items()
        if value is not None
    }
    if args.pin_tool:
        overrides["pin_tools"] = [*config.toolrerank.pin_tools, *args.pin_tool]
    if args.pin_server:
        overrides["pin_servers"] = [*config.toolrerank.pin_servers, *args.pin_server]
    if overrides:
        settings = config.toolrerank.model_validate({**config.toolrerank.model_dump(), **overrides})
        config = config.model_copy(update={"toolrerank": settings})

    async def serve() -> None:
        # built inside the event loop: the proxy's locks and events belong to it
        await ToolProxy(config).serve_stdio()

    anyio.run(serve)
    return 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def add_parser(sub: Any) -> None:
    """Add ``mcp-proxy`` to the ``toolrerank`` sub-commands ``sub``."""
    s = sub.add_parser(
        "mcp-proxy",
        help="serve one MCP server (stdio) in front of the MCP servers of a config file, with tool search",
        description=(
            "An MCP server over stdio that starts or connects to the upstream MCP servers of CONFIG (an "
            "'mcpServers' mapping as MCP clients write it, plus a 'toolrerank' section), builds one engine over "
            "all their tools and offers them through search_tools / call_tool / list_servers (--mode meta) or "
            "as the selected tools themselves (--mode tools). Logs go to stderr. See docs/mcp-proxy.md."
        ),
    )
    s.add_argument("config", help="configuration file (JSON, or YAML with the [openapi] extra)")
    s.add_argument("--mode", choices=["meta", "tools"], default=None, help="overrides toolrerank.mode")
    s.add_argument(
        "--pipeline", default=None, help=pipeline_help("engine pipeline name or .json config (default: default)")
    )
    s.add_argument("--search-k", type=positive_int, default=None, help="tools one search returns")
    s.add_argument("--max-offered", type=positive_int, default=None, help="tools mode: most tools offered at once")
    s.add_argument("--pin-tool", action="append", default=[], help="a tool always offered (server/tool); repeat")
    s.add_argument("--pin-server", action="append", default=[], help="a server whose tools are always offered")
    s.set_defaults(func=cmd_mcp_proxy)
