"""ToolRerankToolRetriever's cache-stable offers, pins and fail-open (issue 31), directly and as a
``FunctionAgent``'s tool retriever across the user messages of one conversation. The order is the core's
(``stable_ranking`` over an ``OfferLog``); the retriever only converts."""

from __future__ import annotations

import asyncio

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.retrievers.toolrerank import ToolRerankToolRetriever
from llama_index.retrievers.toolrerank.testing import ToolPlan, fake_implementation, scripted_function_calling_llm

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.selection import OFFERED_BEFORE
from toolrerank_plugins.testing import tiny_catalog

QUESTIONS = ["weather forecast in Paris", "send an email to my boss", "geocode the office address"]


def _retriever(k: int = 2, **kwargs: object) -> ToolRerankToolRetriever:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=k, **kwargs)  # type: ignore[arg-type]


def _names(retriever: ToolRerankToolRetriever, query: str) -> list[str]:
    return [t.metadata.name or "" for t in retriever.retrieve(query)]


def test_stable_offers_keep_positions_and_lookups_are_unaffected() -> None:
    fresh, stable = _retriever(), _retriever(stable=True)
    before = [_names(fresh, q) for q in QUESTIONS]
    after = [_names(stable, q) for q in QUESTIONS]
    assert [after[i][: len(after[i - 1])] == after[i - 1] for i in (1, 2)] == [True, True]
    assert [before[i][: len(before[i - 1])] == before[i - 1] for i in (1, 2)] == [False, False]
    assert all(set(b) <= set(a) for b, a in zip(before, after))
    nodes = stable.retrieve_nodes("send an email to my boss")
    kept = [n for n in nodes if OFFERED_BEFORE in n.metadata.get("stage_scores", {})]
    assert kept and kept[0].node.metadata["name"] == "forecast"  # offered before, not ranked now
    assert _names(stable, "geocode")[0] == "geocode"  # a lookup by name is not an offer
    assert _names(stable, "weather forecast in Paris") == after[2]  # nothing new: the same list
    stable.new_conversation()
    assert _names(stable, "send an email to my boss") == before[1]


def test_pins_and_fail_open() -> None:
    pinned = _retriever(always_include=["login"], always_include_servers=["SkyCast"], k=4)
    assert _names(pinned, "send an email") == ["login", "forecast", "current_weather", "send_email"]
    nodes = pinned.retrieve_nodes("send an email \ud800")  # the engine refuses the request: fail-open
    assert [n.node.metadata["name"] for n in nodes] == ["login", "forecast", "current_weather"]
    assert "QueryError" in nodes[0].node.metadata["selection_reason"]


def test_a_function_agent_conversation_gets_a_growing_stable_tool_list() -> None:
    retriever = _retriever(stable=True)
    plan = ToolPlan(tools=["forecast", "send_email", "geocode"], args={})
    agent = FunctionAgent(tool_retriever=retriever, llm=scripted_function_calling_llm(plan))

    async def conversation() -> None:
        for question in QUESTIONS:
            await agent.run(user_msg=question)

    asyncio.run(conversation())
    offered = plan.offered
    assert len(offered) == 3 and offered[0] == ["forecast", "current_weather"]
    assert offered[1][:2] == offered[0] and offered[2][: len(offered[1])] == offered[1]
    assert "send_email" in offered[1] and "geocode" in offered[2]  # each message's tools were offered
    assert len(plan.calls) == 3 and all(call in turn for call, turn in zip(plan.calls, offered))
