"""ToolRerankMiddleware's cache-stable offers, pins per server and fail-open inside real ``create_agent`` graphs
(issue 31). The selection is the core's (``ConversationToolSelector(stable=True)``, ``BaseToolSelector``); these
tests check that the middleware passes it through to the model calls of a persistent thread."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_toolrerank import ToolRerankMiddleware, ToolSelector
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation
from langgraph.checkpoint.memory import InMemorySaver

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import tiny_catalog

LIMIT = {"recursion_limit": 20}
QUESTIONS = ["weather forecast in Paris", "now send an email to my boss", "and geocode the office address"]


def _middleware(**kwargs: Any) -> ToolRerankMiddleware:
    engine = Engine.build(tiny_catalog(), pipeline_config("bm25", depth=10))
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolRerankMiddleware(engine, ToolSelector.from_engine(engine, impls).tools_by_id, **kwargs)


def _conversation(rerank: ToolRerankMiddleware) -> list[list[str]]:
    """One thread, three user messages; the tools offered on each message's first model call."""
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast", "send_email", "geocode"], "args": {}}])
    agent = create_agent(model, middleware=[rerank], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}, **LIMIT}
    firsts = []
    for question in QUESTIONS:
        before = len(model.offered)
        agent.invoke({"messages": [HumanMessage(question)]}, thread)
        firsts.append(model.offered[before])
    return firsts


def _prefix_kept(offered: list[list[str]]) -> list[bool]:
    return [offered[i][: len(offered[i - 1])] == offered[i - 1] for i in range(1, len(offered))]


def test_a_stable_thread_keeps_every_offered_tool_in_place() -> None:
    before = _conversation(_middleware(max_tools=2, history_turns=0))
    after = _conversation(_middleware(max_tools=2, history_turns=0, stable=True))
    assert _prefix_kept(before) == [False, False]
    assert _prefix_kept(after) == [True, True]
    assert after[0] == before[0] == ["forecast", "current_weather"]
    for fresh, stable in zip(before, after):
        assert set(fresh) <= set(stable)  # each message's own selection is offered
    assert "geocode" in after[2] and len(after[2]) > 4


def test_a_stable_thread_restarts_when_full() -> None:
    after = _conversation(_middleware(max_tools=2, history_turns=0, stable=True, max_offered=3))
    assert all(len(offered) <= 3 for offered in after)
    assert _prefix_kept(after) != [True, True]


def test_server_pins_and_fail_open_in_an_agent() -> None:
    rerank = _middleware(max_tools=3, always_include_servers=["SkyCast"])
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Oslo"}}])
    create_agent(model, middleware=[rerank]).invoke({"messages": [HumanMessage("send an email")]}, LIMIT)
    assert model.offered[0][:2] == ["forecast", "current_weather"] and len(model.offered[0]) == 3
    # a request the engine refuses (a lone surrogate): the pinned tools are offered, the agent goes on
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Oslo"}}])
    out = create_agent(model, middleware=[rerank]).invoke({"messages": [HumanMessage("weather \ud800")]}, LIMIT)
    assert model.offered[0] == ["forecast", "current_weather"] and model.calls == ["forecast"]
    assert "Final answer" in out["messages"][-1].content
