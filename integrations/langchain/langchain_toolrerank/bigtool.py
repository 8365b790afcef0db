"""langgraph-bigtool's tool-retrieval hook backed by a toolrerank-plugins engine.

``langgraph_bigtool.create_agent(llm, tool_registry, retrieve_tools_function=..., retrieve_tools_coroutine=...)``
starts the agent with a single ``retrieve_tools`` tool; the hook receives the agent's query and returns the ids of
the tools to bind from then on (keys of ``tool_registry``). These factories make that hook search the engine (its
first stage and every configured stage) instead of a LangGraph store, so the registry's keys are the engine
catalog's ids. ``langgraph-bigtool`` itself is only needed to build the agent (``pip install
"./integrations/langchain[bigtool]"``); this module does not import it.

Example:
    >>> from toolrerank_plugins.engine import Engine, EngineConfig
    >>> from toolrerank_plugins.testing import tiny_catalog
    >>> engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    >>> retrieve_tools = retrieve_tools_function(engine, limit=2)
    >>> retrieve_tools("weather forecast for Paris")
    ['Weather/SkyCast/forecast', 'Weather/SkyCast/current']
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.language_models import BaseChatModel

from langchain_toolrerank.llms import ChatModelLLM
from toolrerank_plugins.engine import Engine

__all__ = ["retrieve_tools_coroutine", "retrieve_tools_function"]

_DOC = "Retrieve tools to use, given a search query describing what you need to do."


def _port(llm: Any) -> Any:
    return ChatModelLLM(llm) if isinstance(llm, BaseChatModel) else llm


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    return limit


def retrieve_tools_function(engine: Engine, *, limit: int = 2, llm: Any = None) -> Callable[[str], list[str]]:
    """bigtool's ``retrieve_tools_function``: ``retrieve_tools(query) -> [tool ids]``, the engine's ``limit`` best.

    Args:
        engine: the engine over the tool registry's catalog (registry keys = catalog ids).
        limit: how many tool ids one retrieval returns (bigtool's name for it).
        llm: the model the engine's LLM stages use for these searches (a chat model or an LLM port; default:
            the registered LLM).
    """
    limit = _limit(limit)
    port = _port(llm)

    def retrieve_tools(query: str) -> list[str]:
        return [st.id for st in engine.search(query, top_k=limit, llm=port)]

    retrieve_tools.__doc__ = _DOC
    return retrieve_tools


def retrieve_tools_coroutine(
    engine: Engine, *, limit: int = 2, llm: Any = None
) -> Callable[[str], Awaitable[list[str]]]:
    """bigtool's ``retrieve_tools_coroutine``: the async twin of :func:`retrieve_tools_function` (same ids)."""
    limit = _limit(limit)
    port = _port(llm)

    async def retrieve_tools(query: str) -> list[str]:
        return [st.id for st in await engine.asearch(query, top_k=limit, llm=port)]

    retrieve_tools.__doc__ = _DOC
    return retrieve_tools
