from __future__ import annotations

import json

import pytest
from langchain_toolrerank import DFSDTRunner, ToolBenchRetriever, ToolSelector, run_tool_calling_agent
from langchain_toolrerank.agents import toolbench_category, toolbench_name
from langchain_toolrerank.testing import ScriptedToolCallingModel, demo_catalog, fake_implementation, fake_result

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.testing import FakeEmbedder


def _selector(engine, max_tools=3, broken=()):
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}

    def down(**kwargs):
        raise RuntimeError("service unavailable")

    for i in broken:
        impls[i] = down
    return ToolSelector.from_engine(engine, impls, max_tools=max_tools)


def test_tool_calling_agent_offers_calls_and_uses_the_tool(engine):
    selector = _selector(engine)
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Paris"}}])
    run = run_tool_calling_agent(model, selector, "weather forecast for the coming days in Paris")
    expected = fake_result(engine.catalog["Weather/SkyCast/forecast"], {"city": "Paris"})
    assert "forecast" in run.offered[0]  # offered through our retriever
    assert run.called == ["forecast"]  # called
    assert run.answer == "Final answer: " + expected  # its result used in the answer
    assert len(run.offered[0]) == 4  # max_tools=3 plus the search tool


def test_agent_fetches_missing_tool_with_search_tool(engine):
    selector = _selector(engine, max_tools=1)
    model = ScriptedToolCallingModel(
        plan=[{"tools": ["geocode"], "args": {"address": "10 Main Street"}, "search": "street address coordinates"}]
    )
    run = run_tool_calling_agent(model, selector, "send an email to my boss")
    assert "geocode" not in run.offered[0]
    assert run.called == ["search_tools", "geocode"]
    assert "geocode" in run.offered[1]
    assert json.loads(run.answer.removeprefix("Final answer: "))["api"] == "Maps/GeoFind/geocode"


def test_agent_reports_failing_tool_to_model(engine):
    selector = _selector(engine, broken=["Weather/SkyCast/forecast"])
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast", "get_forecast"], "args": {"city": "Paris"}}])
    run = run_tool_calling_agent(model, selector, "weather forecast outlook in Paris", search_tool=False)
    assert run.called[0] == "forecast" and "service unavailable" in run.messages[2].content
    assert run.called[-1] == "get_forecast"


def test_agent_over_the_bundled_catalog():
    catalog = demo_catalog()
    engine = Engine.build(catalog, EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    selector = _selector(engine)
    query = "what is the weather tomorrow"
    top = selector.select(query)[0]
    model = ScriptedToolCallingModel(plan=[{"tools": [top.name], "args": {}}])
    run = run_tool_calling_agent(model, selector, query)
    assert run.called == [top.name] and top.name in run.offered[0]
    assert json.loads(run.answer.removeprefix("Final answer: "))["api"] == top.metadata["tool_id"]


def test_dfsdt_backtracks_and_retrieves_per_node(engine):
    selector = _selector(engine, max_tools=4, broken=["Weather/SkyCast/forecast"])
    model = ScriptedToolCallingModel(
        plan=[
            {"tools": ["geocode"], "args": {"address": "10 Main Street"}},
            {"tools": ["forecast", "get_forecast", "current_weather"], "args": {"city": "Springfield"}},
        ]
    )
    result = DFSDTRunner(model, selector, max_children=3).run("weather forecast for 10 Main Street")
    assert result.failed_calls == ["forecast"] and result.backtracks >= 1
    assert result.path == ["geocode", "get_forecast"]
    assert "geocode" not in result.offered[-1]  # the node below geocode retrieved without it
    assert result.answer is not None and result.path[-1] in result.answer
    assert model.calls[-1] == "Finish"


def test_dfsdt_gives_up_when_every_branch_fails(engine):
    selector = _selector(engine, max_tools=1, broken=list(engine.catalog.ids))
    model = ScriptedToolCallingModel(plan=[{"tools": [s for s in ("forecast", "get_forecast")], "args": {}}])
    result = DFSDTRunner(model, selector, max_children=2, max_expansions=5).run("weather forecast")
    assert result.answer is None and result.expansions <= 5


def test_toolbench_retriever_interface(engine):
    r = ToolBenchRetriever(engine)
    out = r.retrieving("weather forecast for a city", top_k=3)
    assert len(out) == 3 and set(out[0]) >= {"category", "tool_name", "api_name"}
    assert out[0]["tool_name"] == out[0]["tool_name"].lower()
    excluded = r.retrieving("weather forecast for a city", top_k=3, excluded_tools={"Weather": ["skycast"]})
    assert len(excluded) == 3 and all(d["tool_name"] != "skycast" for d in excluded)
    raw = ToolBenchRetriever(engine, standardize=False).retrieving("weather forecast", top_k=1)
    assert raw[0]["tool_name"] in ("SkyCast", "MeteoNow")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Weather API v2", "weather_api_v2"), ("3d-models", "get_3d_models"), ("id", "is_id"), ("__x__", "x")],
)
def test_toolbench_names(name, expected):
    assert toolbench_name(name) == expected


def test_toolbench_category():
    assert toolbench_category("Text Analysis, NLP/Tools") == "Text_Analysis_NLP_Tools"
