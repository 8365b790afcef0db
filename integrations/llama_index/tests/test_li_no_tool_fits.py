"""'No tool fits' (issue 29 item 4) through the LlamaIndex adapters: ``min_relevance`` on the retriever and the
tool retriever (also inside a real ``FunctionAgent``); the adapters only pass the option to the core."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.retrievers.toolrerank import ToolRerankRetriever, ToolRerankToolRetriever

from toolrerank_plugins.testing.stages import fake_engine
from toolrerank_plugins.testing.tools import fake_implementation

EMAIL = "send an email message to my boss"


def _tool_retriever(**kwargs):
    engine = fake_engine()
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=3, **kwargs)


def test_retriever_returns_nothing_when_no_tool_fits():
    engine = fake_engine()
    assert len(ToolRerankRetriever(engine, similarity_top_k=3).retrieve(EMAIL)) == 3
    strict = ToolRerankRetriever(engine, similarity_top_k=3, min_relevance=1.0)
    assert strict.retrieve(EMAIL) == [] and asyncio.run(strict.aretrieve(EMAIL)) == []
    scored = ToolRerankRetriever(engine, similarity_top_k=3, min_relevance=0.0).retrieve(EMAIL)
    assert all(0.0 <= h.node.metadata["stage_scores"]["relevance"] <= 1.0 for h in scored)
    with pytest.raises(ValueError, match="min_relevance"):
        ToolRerankRetriever(engine, min_relevance=-1.0)


def test_tool_retriever_offers_nothing_or_the_pins_and_says_why():
    assert len(_tool_retriever().retrieve(EMAIL)) == 3
    retriever = _tool_retriever(min_relevance=1.0)
    assert retriever.retrieve(EMAIL) == [] and asyncio.run(retriever.aretrieve(EMAIL)) == []
    pinned = _tool_retriever(min_relevance=1.0, always_include=["login"])
    [node] = pinned.retrieve_nodes(EMAIL)
    assert node.node.metadata["name"] == "login"
    assert node.node.metadata["selection_reason"].endswith("only the pinned tools are offered")
    # an agent looking a tool up by its name still finds it
    assert [t.metadata.name for t in retriever.retrieve("send_email")][0] == "send_email"


def test_a_function_agent_gets_no_tool_when_none_fits():
    from llama_index.core.llms import MockLLM

    retriever = _tool_retriever(min_relevance=1.0)
    agent = FunctionAgent(tool_retriever=retriever, llm=MockLLM())
    tools = asyncio.run(agent.get_tools(EMAIL))
    assert [t.metadata.name for t in tools if t.metadata.name != "handoff"] == []
