"""LangChain integration of toolrerank-plugins.

Example:
    >>> from toolrerank_plugins.engine import EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> from langchain_toolrerank import ToolRerankRetriever
    >>> retriever = ToolRerankRetriever.from_catalog(tiny_catalog(), EngineConfig(retriever="bm25"), k=1)
    >>> retriever.invoke("send an email message")[0].metadata["tool"]
    'PostBox'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_toolrerank.agents import (
    AgentRun,
    DFSDTResult,
    DFSDTRunner,
    ToolBenchRetriever,
    run_tool_calling_agent,
)
from langchain_toolrerank.compressors import ToolRerankCompressor
from langchain_toolrerank.llms import ChatModelLLM
from langchain_toolrerank.mcp import catalog_from_mcp_langchain_tools
from langchain_toolrerank.retrievers import ToolRerankRetriever
from langchain_toolrerank.tools import ToolSelector
from toolrerank_plugins._extras import lazy_exports

if TYPE_CHECKING:
    from langchain_toolrerank.middleware import ToolRerankMiddleware

# The middleware imports ``langchain`` (and langgraph): loaded on first use, so the retriever stays light.
_LAZY_EXPORTS = {"ToolRerankMiddleware": "langchain_toolrerank.middleware"}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY_EXPORTS)

__all__ = [
    "AgentRun",
    "ChatModelLLM",
    "DFSDTResult",
    "DFSDTRunner",
    "ToolBenchRetriever",
    "ToolRerankCompressor",
    "ToolRerankMiddleware",
    "ToolRerankRetriever",
    "ToolSelector",
    "catalog_from_mcp_langchain_tools",
    "run_tool_calling_agent",
]
