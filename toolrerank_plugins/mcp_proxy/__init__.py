"""``toolrerank mcp-proxy``: an MCP server in front of many, offering their tools through one engine
(docs/mcp-proxy.md).

:mod:`.config` reads the configuration file and needs nothing beyond pydantic; :mod:`.proxy` and
:mod:`.upstream` need the ``mcp`` SDK 2.x (``pip install -e ".[mcp]"``) and import it when first used.
"""

from __future__ import annotations

from toolrerank_plugins._extras import lazy_exports
from toolrerank_plugins.mcp_proxy.config import ProxyConfig, ProxySettings, UpstreamConfig, load_proxy_config

__all__ = ["ProxyConfig", "ProxySettings", "ToolProxy", "Upstream", "UpstreamConfig", "load_proxy_config"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"ToolProxy": "toolrerank_plugins.mcp_proxy.proxy", "Upstream": "toolrerank_plugins.mcp_proxy.upstream"},
)
