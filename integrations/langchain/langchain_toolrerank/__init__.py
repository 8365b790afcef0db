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

from langchain_toolrerank.agents import (
    AgentRun,
    DFSDTResult,
    DFSDTRunner,
    ToolBenchRetriever,
    run_tool_calling_agent,
)
from langchain_toolrerank.compressors import ToolRerankCompressor
from langchain_toolrerank.llms import ChatModelLLM
from langchain_toolrerank.retrievers import ToolRerankRetriever
from langchain_toolrerank.tools import ToolSelector

__all__ = [
    "AgentRun",
    "ChatModelLLM",
    "DFSDTResult",
    "DFSDTRunner",
    "ToolBenchRetriever",
    "ToolRerankCompressor",
    "ToolRerankRetriever",
    "ToolSelector",
    "run_tool_calling_agent",
]
