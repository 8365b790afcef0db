"""'No tool fits' (issue 29 item 4) through the LangChain adapters: the retriever's ``min_relevance`` and the
middleware's, inside a real ``create_agent`` graph; the adapters only pass the option to the core."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_toolrerank import ToolRerankMiddleware, ToolRerankRetriever, ToolSelector
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation
from langgraph.checkpoint.memory import InMemorySaver

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.testing.stages import fake_engine

LIMIT = {"recursion_limit": 20}
EMAIL = "send an email message to my boss"


def _tools(engine: Engine) -> dict[str, Any]:
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolSelector.from_engine(engine, impls).tools_by_id


def test_retriever_returns_nothing_when_no_tool_fits() -> None:
    engine = fake_engine()
    assert len(ToolRerankRetriever(engine=engine, k=3).invoke(EMAIL)) == 3
    assert ToolRerankRetriever(engine=engine, k=3, min_relevance=1.0).invoke(EMAIL) == []
    assert asyncio.run(ToolRerankRetriever(engine=engine, k=3, min_relevance=1.0).ainvoke(EMAIL)) == []


def test_retriever_keeps_what_reaches_the_threshold_and_shows_the_relevance() -> None:
    engine = fake_engine()
    scored = ToolRerankRetriever(engine=engine, k=5, min_relevance=0.0).invoke(EMAIL)
    relevance = [d.metadata["stage_scores"]["relevance"] for d in scored]
    assert len(scored) == 5 and all(0.0 <= p <= 1.0 for p in relevance)
    threshold = sorted(relevance)[2]
    kept = ToolRerankRetriever(engine=engine, k=5, min_relevance=threshold).invoke(EMAIL)
    assert [d.metadata["tool_id"] for d in kept] == [
        d.metadata["tool_id"] for d, p in zip(scored, relevance) if p >= threshold
    ]
    with pytest.raises(ValueError):
        ToolRerankRetriever(engine=engine, min_relevance=2.0)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_middleware_offers_no_catalog_tool_when_none_fits(asynchronous: bool) -> None:
    engine = fake_engine()
    rerank = ToolRerankMiddleware(engine, _tools(engine), max_tools=3, min_relevance=1.0)
    model = ScriptedToolCallingModel(plan=[])  # answers with what it is offered: nothing
    agent = create_agent(model, middleware=[rerank], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "none-fits"}, **LIMIT}
    question = {"messages": [HumanMessage(EMAIL)]}
    out = asyncio.run(agent.ainvoke(question, thread)) if asynchronous else agent.invoke(question, thread)
    assert model.offered == [[]] and model.calls == []
    assert out["messages"][-1].content.startswith("Final answer")
    reason = agent.get_state(thread).values["toolrerank_selection"]["reason"]
    assert reason.startswith("no tool fits") and reason.endswith("no tool is offered")


def test_middleware_offers_only_the_pins_when_none_fits_and_the_fallback_does_not_fill() -> None:
    engine = fake_engine()
    tools = _tools(engine)
    login = tools["Auth/Keyring/login"].name
    rerank = ToolRerankMiddleware(engine, tools, max_tools=3, min_relevance=1.0, always_include=[login])
    model = ScriptedToolCallingModel(plan=[])
    create_agent(model, middleware=[rerank]).invoke({"messages": [HumanMessage(EMAIL)]}, LIMIT)
    assert model.offered == [[login]]
    # without the option the same middleware offers three tools
    plain = ToolRerankMiddleware(engine, tools, max_tools=3, always_include=[login])
    model = ScriptedToolCallingModel(plan=[])
    create_agent(model, middleware=[plain]).invoke({"messages": [HumanMessage(EMAIL)]}, LIMIT)
    assert len(model.offered[0]) == 3
