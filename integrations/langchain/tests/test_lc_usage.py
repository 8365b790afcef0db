"""UsageRecorderMiddleware inside a real create_agent graph with a scripted tool-calling model."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_toolrerank._convert import spec_to_tool  # noqa: E402
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation, fake_result  # noqa: E402
from langchain_toolrerank.usage import UsageRecorderMiddleware  # noqa: E402

from toolrerank_plugins.interop import tools_for_engine  # noqa: E402
from toolrerank_plugins.usage import UsageRecorder, read_usage_log  # noqa: E402

FORECAST = "Weather/SkyCast/forecast"


def _tools(engine, broken=()):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}

    def down(**kwargs):
        raise RuntimeError("service unavailable")

    for i in broken:
        impls[i] = down
    return list(tools_for_engine(engine, impls, spec_to_tool).values())


def _agent(engine, plan, middleware, broken=()):
    model = ScriptedToolCallingModel(plan=plan)
    return create_agent(model, _tools(engine, broken), middleware=[middleware])


def test_records_the_request_and_the_successful_call(engine, tmp_path):
    mw = UsageRecorderMiddleware(tmp_path / "usage.jsonl", engine=engine)
    agent = _agent(engine, [{"tools": ["forecast"], "args": {"city": "Paris"}}], mw)
    out = agent.invoke({"messages": [{"role": "user", "content": "weather forecast in Paris"}]})
    assert out["messages"][-1].content == "Final answer: " + fake_result(engine.catalog[FORECAST], {"city": "Paris"})
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.query == "weather forecast in Paris"
    assert record.calls == (FORECAST,) and record.served == (FORECAST,) and record.success
    assert mw.records == [record]


def test_a_tool_that_raises_is_noted_and_the_error_still_propagates(engine, tmp_path):
    recorder = UsageRecorder(tmp_path / "usage.jsonl")
    mw = UsageRecorderMiddleware(recorder, engine=engine)
    agent = _agent(
        engine,
        [{"tools": ["forecast", "get_forecast"], "args": {"city": "Paris"}}],
        mw,
        broken=[FORECAST],
    )
    with pytest.raises(RuntimeError, match="service unavailable"):
        # create_agent's tool node re-raises tool errors by default: the failure is recorded anyway
        agent.invoke({"messages": [{"role": "user", "content": "weather outlook Paris"}]})
    assert mw._failed  # the failing call was seen by wrap_tool_call


def test_tool_errors_handled_by_the_agent_are_failed_calls(engine, tmp_path):
    from langchain_core.tools import ToolException

    mw = UsageRecorderMiddleware(tmp_path / "usage.jsonl", engine=engine)
    tools = _tools(engine)
    for t in tools:
        if t.name == "forecast":

            def down(**kwargs):
                raise ToolException("service unavailable")

            t.func = down
            t.handle_tool_error = True
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast", "get_forecast"], "args": {"city": "Paris"}}])
    agent = create_agent(model, tools, middleware=[mw])
    agent.invoke({"messages": [{"role": "user", "content": "weather outlook Paris"}]})
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.calls == (FORECAST, "Weather/MeteoNow/get_forecast")
    assert record.failed == (FORECAST,) and record.served == ("Weather/MeteoNow/get_forecast",)


def test_async_run_records_too_and_nothing_without_the_middleware(engine, tmp_path):
    mw = UsageRecorderMiddleware(tmp_path / "usage.jsonl", engine=engine)
    agent = _agent(engine, [{"tools": ["forecast"], "args": {"city": "Oslo"}}], mw)
    asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "forecast Oslo"}]}))
    assert [r.query for r in read_usage_log(tmp_path / "usage.jsonl").records] == ["forecast Oslo"]
    plain = create_agent(ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {}}]), _tools(engine))
    plain.invoke({"messages": [{"role": "user", "content": "forecast Oslo"}]})
    assert len(read_usage_log(tmp_path / "usage.jsonl").records) == 1


def test_the_log_teaches_the_engine(engine, tmp_path):
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.testing import FakeEmbedder

    mw = UsageRecorderMiddleware(tmp_path / "usage.jsonl", engine=engine)
    agent = _agent(engine, [{"tools": ["forecast"], "args": {"city": "Paris"}}], mw)
    agent.invoke({"messages": [{"role": "user", "content": "weather forecast in Paris"}]})
    fresh = Engine.build(engine.catalog, engine.config, embedder=FakeEmbedder())
    report = fresh.learn(read_usage_log(tmp_path / "usage.jsonl").records)
    assert report["learned"] == 1 and fresh.catalog.is_seen(FORECAST)


def test_content_blocks_whose_text_is_not_a_string_do_not_break_the_run(engine, tmp_path):
    # fuzz reproducer: a text block with text=3 raised TypeError in after_agent, failing a run it only observes
    from langchain_core.messages import HumanMessage

    mw = UsageRecorderMiddleware(tmp_path / "usage.jsonl", engine=engine)
    agent = _agent(engine, [{"tools": ["forecast"], "args": {"city": "Paris"}}], mw)
    blocks = [
        {"type": "text", "text": "weather forecast"},
        {"type": "text", "text": 3},
        {"type": "text", "text": "in Paris"},
    ]
    agent.invoke({"messages": [HumanMessage(content=blocks)]})
    [record] = read_usage_log(tmp_path / "usage.jsonl").records
    assert record.query == "weather forecast in Paris" and record.calls == (FORECAST,)
