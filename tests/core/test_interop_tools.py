"""The tools <-> engine helpers both adapters' ``from_tools`` / ``from_engine`` use, and the shared test stage."""

from __future__ import annotations

import asyncio

import pytest

from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.interop import engine_for_tools, function_names, require_tools, tools_for_engine
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.stages import Stage, StageSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
from toolrerank_plugins.testing.stages import PREFER, PREFER_ASYNC, PreferCategory, fake_engine, register_test_stages


def test_require_tools_names_the_missing_ids_and_the_builder() -> None:
    require_tools(["a", "b"], {"a": 1, "b": 2, "extra": 3}, "X.from_tools")
    with pytest.raises(ValueError, match=r"2 catalog APIs have no tool \(first: \['b', 'c'\]\).*X\.from_tools"):
        require_tools(["a", "b", "c"], {"a": 1}, "X.from_tools")


def test_engine_for_tools_indexes_the_specs() -> None:
    specs = [
        ToolSpec("get_weather", "get_weather", "Weather forecast for a city"),
        ToolSpec("send_email", "send_email", "Send an email message"),
    ]
    engine = engine_for_tools(specs, EngineConfig(retriever="dense"), embedder=FakeEmbedder(), source="<test tools>")
    assert engine.catalog.ids == ["get_weather", "send_email"] and engine.catalog.source == "<test tools>"
    assert engine.search("email my boss", top_k=1)[0].tool.id == "send_email"


def test_tools_for_engine_builds_one_tool_per_api_with_function_names() -> None:
    engine = fake_engine(retriever="bm25")
    specs = [engine.catalog[i] for i in engine.catalog.ids]
    impls = {s.id: (lambda s=s: s.id) for s in specs}
    tools = tools_for_engine(engine, impls, lambda spec, fn, name: (spec.id, fn(), name))
    names = function_names(specs)
    assert tools == {s.id: (s.id, s.id, names[s.id]) for s in specs}
    with pytest.raises(ValueError, match=r"no implementation for 1 APIs \(first: \['Maps/GeoFind/geocode'\]\)"):
        tools_for_engine(engine, {k: v for k, v in impls.items() if k != "Maps/GeoFind/geocode"}, lambda *a: a)


def test_the_shared_test_stage_reorders_visibly_on_both_paths() -> None:
    register_test_stages()
    sync_engine = fake_engine([StageSpec(type=PREFER, name="prefer", params={"category": "Mail"})])
    async_engine = fake_engine([StageSpec(type=PREFER_ASYNC, name="prefer", params={"category": "Mail"})])
    assert isinstance(sync_engine.stages[0], Stage) and isinstance(sync_engine.stages[0], PreferCategory)
    plain = [r.tool.category for r in fake_engine().search("weather forecast", top_k=3)]
    assert plain[0] == "Weather"
    out = sync_engine.search("weather forecast", top_k=3)
    assert [r.tool.category for r in out] == ["Mail"] * 3 and out[0].stage_scores["prefer"] == 1.0
    assert [r.tool.id for r in asyncio.run(async_engine.asearch("weather forecast", top_k=3))] == [
        r.tool.id for r in out
    ]
    assert sync_engine.catalog.ids == tiny_catalog().ids
