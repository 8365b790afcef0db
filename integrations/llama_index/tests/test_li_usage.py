"""AgentUsageRecorder around real FunctionAgent / ReActAgent runs with scripted LLMs."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.retrievers.toolrerank import ToolRerankToolRetriever
from llama_index.retrievers.toolrerank.testing import (
    ToolPlan,
    fake_implementation,
    fake_result,
    scripted_function_calling_llm,
    scripted_react_llm,
)
from llama_index.retrievers.toolrerank.usage import AgentUsageRecorder

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.testing import FakeEmbedder
from toolrerank_plugins.usage import read_usage_log

FORECAST = "Weather/SkyCast/forecast"


def _retriever(engine, broken=()):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}

    def down(**kwargs):
        raise RuntimeError("service unavailable")

    for i in broken:
        impls[i] = down
    return ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=3)


@pytest.mark.parametrize("kind", ["function", "react"])
def test_records_the_request_and_the_tool_that_served_it(engine, tmp_path, kind):
    plan = ToolPlan(tools=["forecast"], args={"city": "Paris"})
    llm = scripted_function_calling_llm(plan) if kind == "function" else scripted_react_llm(plan)
    agent = (FunctionAgent if kind == "function" else ReActAgent)(tool_retriever=_retriever(engine), llm=llm)
    recorder = AgentUsageRecorder(tmp_path / "usage.jsonl", engine=engine)
    answer = asyncio.run(recorder.run(agent, "weather forecast for the coming days in Paris"))
    assert str(answer) == "Final answer: " + fake_result(engine.catalog[FORECAST], {"city": "Paris"})
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.query == "weather forecast for the coming days in Paris"
    assert record.calls == (FORECAST,) and record.served == (FORECAST,) and record.success
    assert recorder.records == [record]


def test_a_failing_tool_is_a_failed_call(engine, tmp_path):
    plan = ToolPlan(tools=["forecast"], args={"city": "Paris"})
    agent = FunctionAgent(tool_retriever=_retriever(engine, broken=[FORECAST]), llm=scripted_function_calling_llm(plan))
    recorder = AgentUsageRecorder(tmp_path / "usage.jsonl", engine=engine)
    asyncio.run(recorder.run(agent, "weather forecast in Paris"))
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.failed == (FORECAST,) and record.served == () and not record.success


def test_unmapped_tools_keep_their_names_and_learning_skips_them(tmp_path):
    tool = FunctionTool.from_defaults(fn=lambda city: f"sunny in {city}", name="weather_now", description="weather")
    plan = ToolPlan(tools=["weather_now"], args={"city": "Oslo"})
    agent = FunctionAgent(tools=[tool], llm=scripted_function_calling_llm(plan))
    recorder = AgentUsageRecorder(tmp_path / "usage.jsonl")
    asyncio.run(recorder.run(agent, "is it sunny in Oslo"))
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.calls == ("weather_now",)
    from toolrerank_plugins.engine import EngineConfig
    from toolrerank_plugins.testing import tiny_catalog

    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    report = engine.learn([record])
    assert report["learned"] == 0 and report["unknown_tool_ids"] == 1
