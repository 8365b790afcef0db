from __future__ import annotations

import asyncio
import json
import logging

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.llms import MockLLM
from llama_index.core.tools import FunctionTool
from llama_index.retrievers.toolrerank import LlamaIndexLLM, ToolRerankToolRetriever
from llama_index.retrievers.toolrerank.testing import (
    ToolPlan,
    demo_catalog,
    fake_implementation,
    fake_result,
    scripted_function_calling_llm,
    scripted_react_llm,
)

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.llm.base import LLM, LLMError
from toolrerank_plugins.testing import FakeEmbedder


def _retriever(engine, k=3):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=k)


def _run(agent, query):
    async def go():
        return await agent.run(user_msg=query)

    return str(asyncio.run(go()))


@pytest.mark.parametrize("kind", ["function", "react"])
def test_agent_offers_calls_and_uses_the_tool(engine, kind):
    plan = ToolPlan(tools=["forecast"], args={"city": "Paris"})
    retriever = _retriever(engine)
    if kind == "function":
        agent = FunctionAgent(tool_retriever=retriever, llm=scripted_function_calling_llm(plan))
    else:
        agent = ReActAgent(tool_retriever=retriever, llm=scripted_react_llm(plan))
    answer = _run(agent, "weather forecast for the coming days in Paris")
    assert "forecast" in plan.offered[0] and len(plan.offered[0]) == 3  # offered through our retriever
    assert plan.calls == ["forecast"]  # called
    assert answer == "Final answer: " + fake_result(engine.catalog["Weather/SkyCast/forecast"], {"city": "Paris"})


@pytest.mark.parametrize("kind", ["function", "react"])
def test_called_tool_is_found_when_its_name_retrieves_another(engine, kind):
    # With one tool per request, searching the name "login" ranks "logout" first: the agents' second
    # lookup by name must still find login.
    assert engine.search("login", top_k=1)[0].tool.name == "logout"
    retriever = _retriever(engine, k=1)
    plan = ToolPlan(tools=["login"], args={"username": "ann", "password": "pw"})
    llm = scripted_function_calling_llm(plan) if kind == "function" else scripted_react_llm(plan)
    agent = (FunctionAgent if kind == "function" else ReActAgent)(tool_retriever=retriever, llm=llm)
    answer = _run(agent, "log in with username and password to get an access token")
    assert plan.offered[0] == ["login"] and plan.calls == ["login"]
    assert json.loads(answer.removeprefix("Final answer: "))["api"] == "Auth/Keyring/login"


def test_tool_retriever_name_lookup_and_async(engine):
    retriever = _retriever(engine, k=1)
    for name in ("login", "geocode", "get_forecast"):
        assert retriever.retrieve(name)[0].metadata.name == name
    sync = [t.metadata.name for t in retriever.retrieve("send an email")]
    assert sync == [t.metadata.name for t in asyncio.run(retriever.aretrieve("send an email"))]
    assert retriever.similarity_top_k == 1


def test_tool_retriever_from_tools_and_errors(engine):
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        return "sunny"

    def send_email(to: str) -> str:
        """Send an email message."""
        return "sent"

    tools = [FunctionTool.from_defaults(fn=f) for f in (get_weather, send_email)]
    r = ToolRerankToolRetriever.from_tools(
        tools, EngineConfig(retriever="dense"), embedder=FakeEmbedder(), similarity_top_k=1
    )
    assert r.retrieve("weather in a city")[0] is tools[0]
    assert r.engine.catalog["get_weather"].parameters["required"] == ("city",)
    with pytest.raises(ValueError, match="no tool"):
        ToolRerankToolRetriever(engine, tools)
    with pytest.raises(ValueError, match="no implementation"):
        ToolRerankToolRetriever.from_engine(engine, {})


def test_function_agent_over_the_bundled_catalog():
    engine = Engine.build(demo_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    retriever = _retriever(engine)
    query = "what is the weather tomorrow"
    top = retriever.retrieve(query)[0]
    top_id = retriever.retriever.retrieve(query)[0].node.metadata["tool_id"]
    plan = ToolPlan(tools=[top.metadata.name])
    answer = _run(FunctionAgent(tool_retriever=retriever, llm=scripted_function_calling_llm(plan)), query)
    assert plan.calls == [top.metadata.name] and top.metadata.name in plan.offered[0]
    assert json.loads(answer.removeprefix("Final answer: "))["api"] == top_id


def test_llm_wrapper():
    llm = LlamaIndexLLM(MockLLM())
    assert isinstance(llm, LLM)
    out = llm.complete([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert out.splitlines()[:2] == ["system: be brief", "user: hi"]
    assert asyncio.run(llm.acomplete("hi")) == llm.complete("hi")
    assert llm.usage["llm_calls"] == 3
    with pytest.raises(ValueError, match="unknown message role"):
        llm.complete([{"role": "robot", "content": "x"}])

    class Broken(MockLLM):
        def chat(self, messages, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("rate limited")

    with pytest.raises(LLMError, match="rate limited"):
        LlamaIndexLLM(Broken()).complete("x")


@pytest.mark.parametrize("kind", ["function", "react"])
def test_a_request_bm25_cannot_match_is_still_offered_tools_and_the_nodes_say_why(kind, caplog):
    # issue 26: with retriever="bm25" a request sharing no word with the 30 tools retrieved no tool, so the
    # agent's LLM was offered none; the core's fallback now fills the selection and says why
    catalog = demo_catalog()
    specs = [catalog[i] for i in catalog.ids[:30]]  # accounts, flights, hotels: nothing about money
    tools = [
        FunctionTool.from_defaults(fn=fake_implementation(s), name=s.name, description=s.description) for s in specs
    ]
    retriever = ToolRerankToolRetriever.from_tools(tools, EngineConfig(retriever="bm25"), similarity_top_k=3)
    euros = "How much is 100 US dollars in euros?"
    assert retriever.engine.search(euros, top_k=3) == []
    plan = ToolPlan(tools=[s.name for s in specs])  # calls the first tool it is offered
    llm = scripted_function_calling_llm(plan) if kind == "function" else scripted_react_llm(plan)
    agent = (FunctionAgent if kind == "function" else ReActAgent)(tool_retriever=retriever, llm=llm)
    with caplog.at_level(logging.INFO, logger="toolrerank_plugins.agents"):
        answer = _run(agent, euros)
    assert len(plan.offered[0]) == 3 and plan.calls == [plan.offered[0][0]]
    assert answer.startswith("Final answer: ")
    reason = "the engine ranked 0 of the 3 tools asked for; 3 added by character n-gram overlap with the tool texts"
    assert reason in caplog.text
    nodes = retriever.retrieve_nodes(euros)
    assert [n.node.metadata["name"] for n in nodes] == plan.offered[0]
    assert all(n.node.metadata["selection_reason"] == reason for n in nodes)
    assert "selection_reason" in nodes[0].node.excluded_llm_metadata_keys
    assert [n.node.metadata for n in asyncio.run(retriever.aretrieve_nodes(euros))] == [n.node.metadata for n in nodes]
    assert "selection_reason" not in retriever.retrieve_nodes("book a flight")[0].node.metadata
