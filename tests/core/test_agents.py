"""The framework-neutral agent code (toolrerank_plugins.agents), driven by the scripted dict-message port."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from typing import Any

import pytest

from toolrerank_plugins.agents import (
    FALLBACK_CATALOG,
    FALLBACK_DENSE,
    FALLBACK_PARTIAL,
    BaseToolSelector,
    DFSDTSearch,
    ModelReply,
    PartialMatcher,
    ToolCall,
    run_tool_loop,
)
from toolrerank_plugins.catalog import Catalog, default_catalog_path
from toolrerank_plugins.config import EngineConfig
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.selection import ConversationToolSelector, Selection, Turn
from toolrerank_plugins.stages import Stage, StageContext
from toolrerank_plugins.testing import FakeEmbedder, fake_implementation, fake_result, tiny_catalog
from toolrerank_plugins.testing.agents import CallableTool, ScriptedAgentPort, ToolScript, search_tool

#: a request with no word in common with the 30 tools below (issue 26: BM25 offered the agent no tool at all)
EUROS = "How much is 100 US dollars in euros?"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())


def _selector(
    engine: Engine, max_tools: int = 3, broken: tuple[str, ...] = (), pins: tuple[str, ...] = ()
) -> BaseToolSelector[CallableTool]:
    def down(**kwargs: Any) -> str:
        raise RuntimeError("service unavailable")

    tools = {}
    for i in engine.catalog.ids:
        spec = engine.catalog[i]
        tools[i] = CallableTool(spec.name, down if i in broken else fake_implementation(spec), spec.description)
    return BaseToolSelector(engine, tools, name=lambda t: t.name, max_tools=max_tools, always_include=pins)


def _names(tools: list[CallableTool]) -> list[str]:
    return [t.name for t in tools]


# -- BaseToolSelector ----------------------------------------------------------------------------------
def test_select_follows_the_engine_ranking_with_a_cap(engine: Engine) -> None:
    selector = _selector(engine, max_tools=3)
    expected = [st.tool.name for st in engine.search("weather forecast in a city", top_k=3)]
    assert _names(selector.select("weather forecast in a city")) == expected
    assert _names(selector.select("weather forecast in a city", k=10)) == expected  # capped at max_tools
    assert _names(selector.select("weather forecast in a city", k=1)) == expected[:1]
    with pytest.raises(ValueError, match="k must be"):
        selector.select("x", k=0)


def test_pins_come_first_and_count_towards_the_cap(engine: Engine) -> None:
    selector = _selector(engine, max_tools=2, pins=("logout",))
    picked = _names(selector.select("send an email message"))
    assert picked[0] == "logout" and len(picked) == 2 and picked[1] != "logout"
    assert _names(selector.select("send an email message", exclude=["logout"]))[0] == "logout"  # pins stay


def test_exclude_searches_deeper_and_still_returns_k(engine: Engine) -> None:
    selector = _selector(engine, max_tools=3)
    query = "weather forecast in a city"
    first = _names(selector.select(query))
    again = _names(selector.select(query, exclude=first[:2]))
    assert len(again) == 3 and not set(first[:2]) & set(again)
    deeper = [st.tool.name for st in engine.search(query, top_k=5)]
    assert again == [n for n in deeper if n not in first[:2]][:3]  # the same order, minus the excluded
    assert _names(selector.select(query, exclude=["no_such_tool"])) == first
    assert _names(asyncio.run(selector.aselect(query, exclude=first[:2]))) == again


def test_exclude_by_name_leaves_out_every_api_of_that_name(engine: Engine) -> None:
    ids = engine.catalog.ids
    # two APIs share the name "weather": excluding the name excludes both
    tools = {i: CallableTool("weather" if "Weather/SkyCast" in i else engine.catalog[i].name, print) for i in ids}
    selector = BaseToolSelector(engine, tools, name=lambda t: t.name, max_tools=3)
    out = selector.select("current weather conditions forecast", exclude=["weather"])
    assert "weather" not in _names(out) and len(out) == 3


def test_selector_checks_its_arguments(engine: Engine) -> None:
    tools = {i: CallableTool(engine.catalog[i].name, print) for i in engine.catalog.ids}
    with pytest.raises(ValueError, match="no tool .* with MySelector.from_tools"):
        BaseToolSelector(engine, dict(list(tools.items())[:2]), name=lambda t: t.name, builder="MySelector.from_tools")
    with pytest.raises(ValueError, match="always_include"):
        BaseToolSelector(engine, tools, name=lambda t: t.name, always_include=["nope"])
    with pytest.raises(ValueError, match="max_tools"):
        BaseToolSelector(engine, tools, name=lambda t: t.name, max_tools=1, always_include=["login", "logout"])


def test_find_and_get(engine: Engine) -> None:
    selector = _selector(engine, max_tools=1, pins=("logout",))
    found = selector.find("convert a street address to coordinates", 2)
    assert found[0].name == "geocode" and len(found) == 2  # no pins, no cap
    assert _names(asyncio.run(selector.afind("convert a street address to coordinates", 2))) == _names(found)
    assert selector.get("geocode") is found[0] and selector.get("nope") is None
    assert "pinned=1" in repr(selector)


# -- a selection is never silently empty -------------------------------------------------------------
@pytest.fixture(scope="module")
def thirty() -> Engine:
    """30 APIs of the bundled catalog (accounts, flights, hotels: nothing about money), BM25 only."""
    catalog = load_catalog(default_catalog_path())
    return Engine.build(Catalog([catalog[i] for i in catalog.ids[:30]]), EngineConfig(retriever="bm25"))


def test_a_request_bm25_cannot_match_still_gets_tools_and_says_why(
    thirty: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    assert thirty.search(EUROS, top_k=3) == []  # the engine alone: nothing
    selector = _selector(thirty, max_tools=3)
    with caplog.at_level(logging.INFO, logger="toolrerank_plugins.agents"):
        chosen = selector.select_detailed(EUROS)
    assert len(chosen.tools) == 3
    assert chosen.reason == (
        "the engine ranked 0 of the 3 tools asked for; 3 added by character n-gram overlap with the tool texts"
    )
    assert all(set(st.stage_scores) == {FALLBACK_PARTIAL} for st in chosen.ranking.results)
    assert [st.rank for st in chosen.ranking.results] == [1, 2, 3]
    assert chosen.reason in caplog.text
    assert _names(selector.select(EUROS)) == _names(chosen.tools)
    assert _names(asyncio.run(selector.aselect(EUROS))) == _names(chosen.tools)
    assert asyncio.run(selector.arank(EUROS)) == selector.rank(EUROS)


def test_a_short_ranking_is_filled_after_the_engines_own_results(thirty: Engine) -> None:
    query = "book a flight"
    found = thirty.search(query, top_k=30)
    assert 0 < len(found) < 30
    ranking = _selector(thirty, max_tools=30).rank(query)
    assert [st.id for st in ranking.results[: len(found)]] == [st.id for st in found]
    assert len(ranking.results) == len({st.id for st in ranking.results}) > len(found)
    assert ranking.reason is not None and ranking.reason.startswith(f"the engine ranked {len(found)} of the 30")
    enough = _selector(thirty, max_tools=len(found)).rank(query)
    assert enough.reason is None and enough.results == found  # the engine ranked enough: no fallback


def test_nothing_matches_pins_alone_or_the_catalog_order(thirty: Engine) -> None:
    pinned = _selector(thirty, max_tools=3, pins=("logout",)).select_detailed("你好")  # no trigram in common
    assert _names(pinned.tools) == ["logout"] and pinned.ranking.results == []
    assert pinned.reason == (
        "the engine ranked 0 of the 3 tools asked for; nothing else matches the request; only the pinned tools "
        "are offered"
    )
    unpinned = _selector(thirty, max_tools=3).select_detailed("你好")
    assert _names(unpinned.tools) == [thirty.catalog[i].name for i in thirty.catalog.ids[:3]]
    assert all(FALLBACK_CATALOG in st.stage_scores for st in unpinned.ranking.results)
    assert unpinned.reason is not None and "catalog order" in unpinned.reason
    blank = _selector(thirty, max_tools=2).select_detailed("   ")
    assert len(blank.tools) == 2 and (blank.reason or "").startswith("the request is blank: ")


def test_the_fallback_never_offers_an_excluded_tool(thirty: Engine) -> None:
    selector = _selector(thirty, max_tools=3)
    names = [thirty.catalog[i].name for i in thirty.catalog.ids]
    out = selector.select(EUROS, exclude=names[:-2])  # all but two excluded
    assert sorted(_names(out)) == sorted(names[-2:])
    assert selector.select(EUROS, exclude=names) == []  # nothing left to offer
    assert selector.rank(EUROS, exclude=names).reason is None


class _KeepsOne(Stage):
    """A stage that keeps only its best candidate (as a confident truncation would)."""

    name = "keep_one"

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        return candidates[:1]


def test_an_engine_with_vectors_fills_from_its_dense_retriever() -> None:
    engine = Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())
    dense = [st.id for st in engine.search("weather forecast in a city", top_k=3)]
    engine.set_stages([_KeepsOne()])
    assert len(engine.search("weather forecast in a city", top_k=3)) == 1
    ranking = _selector(engine, max_tools=3).rank("weather forecast in a city")
    assert [st.id for st in ranking.results] == dense
    assert [FALLBACK_DENSE in st.stage_scores for st in ranking.results] == [False, True, True]
    assert ranking.reason == "the engine ranked 1 of the 3 tools asked for; 2 added by the engine's dense retriever"


def test_the_partial_matcher_follows_catalog_changes() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))
    selector = _selector(engine, max_tools=1)
    first = selector.partial_matcher()
    assert selector.partial_matcher() is first  # built once per catalog
    engine.add([ToolSpec("Money/FX/convert_currency", "convert_currency", "Convert dollars into euros")])
    assert selector.partial_matcher() is not first
    assert selector.partial_matcher().top("dollar to euro rates", 1)[0][0] == "Money/FX/convert_currency"
    assert PartialMatcher(tiny_catalog()).top("", 3) == [] and PartialMatcher(tiny_catalog()).top("geocode", 0) == []


def test_the_conversation_selection_keeps_the_reason(thirty: Engine) -> None:
    chooser = ConversationToolSelector(_selector(thirty, max_tools=2))
    offered, selection = chooser.select([Turn("user", EUROS)])
    assert len(offered) == 2 and selection.reason is not None and "n-gram" in selection.reason
    assert Selection.from_state(selection.to_state()) == selection
    old = {"episode": selection.episode, "names": list(selection.names), "query": selection.query}
    assert Selection.from_state(old) == Selection(selection.episode, selection.names, selection.query)
    assert asyncio.run(chooser.aselect([Turn("user", EUROS)]))[1] == selection
    assert chooser.select([Turn("user", "book a flight")])[1].reason is None


# -- the tool-calling loop -----------------------------------------------------------------------------
def test_loop_offers_calls_and_uses_the_tool(engine: Engine) -> None:
    selector = _selector(engine)
    port = ScriptedAgentPort(ToolScript([{"tools": ["forecast"], "args": {"city": "Paris"}}]))
    run = run_tool_loop(port, selector, "weather forecast for the coming days in Paris", system_prompt="be brief")
    assert run.messages[0] == {"role": "system", "content": "be brief"}
    assert "forecast" in run.offered[0] and len(run.offered[0]) == 3
    assert run.called == ["forecast"] == port.calls
    assert run.answer == "Final answer: " + fake_result(engine.catalog["Weather/SkyCast/forecast"], {"city": "Paris"})


def test_loop_fetches_a_missing_tool_with_the_search_tool(engine: Engine) -> None:
    selector = _selector(engine, max_tools=1)
    port = ScriptedAgentPort(
        ToolScript([{"tools": ["geocode"], "args": {"address": "10 Main Street"}, "search": "street address"}])
    )
    run = run_tool_loop(port, selector, "send an email to my boss", finder=search_tool(selector, k=2))
    assert "geocode" not in run.offered[0] and run.offered[0][-1] == "search_tools"
    assert run.called == ["search_tools", "geocode"]
    assert "geocode" in run.offered[1]
    assert json.loads((run.answer or "").removeprefix("Final answer: "))["api"] == "Maps/GeoFind/geocode"


def test_loop_reports_a_failing_tool_to_the_model(engine: Engine) -> None:
    selector = _selector(engine, broken=("Weather/SkyCast/forecast",))
    port = ScriptedAgentPort(ToolScript([{"tools": ["forecast", "get_forecast"], "args": {"city": "Paris"}}]))
    run = run_tool_loop(port, selector, "weather forecast outlook in Paris")
    assert run.called == ["forecast", "get_forecast"]
    assert run.messages[2]["failed"] and "service unavailable" in run.messages[2]["content"]
    assert run.answer is not None and "Weather/MeteoNow/get_forecast" in run.answer


class _NeverAnswers(ScriptedAgentPort):
    """A model that calls a tool it was never given, forever."""

    def ask(self, messages: Any, tools: Any) -> ModelReply[dict[str, Any]]:
        self.offered.append([t.name for t in tools])
        call = ToolCall("nope", {}, "c")
        return ModelReply({"role": "assistant", "content": "", "calls": [call]}, "", (call,))


def test_loop_stops_after_max_steps(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    port = _NeverAnswers(ToolScript([]))
    with caplog.at_level(logging.WARNING, logger="toolrerank_plugins.agents"):
        run = run_tool_loop(port, _selector(engine), "weather forecast", max_steps=2)
    assert run.answer is None and len(run.offered) == 2 and run.called == ["nope", "nope"]
    assert run.messages[2]["failed"] and "not available" in run.messages[2]["content"]
    assert "max_steps=2" in caplog.text


# -- DFSDT -------------------------------------------------------------------------------------------
def test_dfsdt_backtracks_and_retrieves_per_node(engine: Engine) -> None:
    selector = _selector(engine, max_tools=4, broken=("Weather/SkyCast/forecast",))
    port = ScriptedAgentPort(
        ToolScript(
            [
                {"tools": ["geocode"], "args": {"address": "10 Main Street"}},
                {"tools": ["forecast", "get_forecast", "current_weather"], "args": {"city": "Springfield"}},
            ]
        )
    )
    finish = CallableTool("Finish", lambda **kw: kw.get("final_answer", ""))
    result = DFSDTSearch(port, selector, finish, max_children=3).run("weather forecast for 10 Main Street")
    assert result.failed_calls == ["forecast"] and result.backtracks >= 1
    assert result.path == ["geocode", "get_forecast"]
    assert "geocode" not in result.offered[-1]  # the node below geocode retrieved without it
    assert result.answer is not None and "Weather/MeteoNow/get_forecast" in result.answer
    assert port.calls[-1] == "Finish" and all("Finish" in o for o in port.offered)
    kept = [m for m in result.messages if m["role"] == "assistant"]
    assert all(len(m.get("calls", [])) <= 1 for m in kept)


def test_dfsdt_gives_up_when_every_branch_fails(engine: Engine) -> None:
    selector = _selector(engine, max_tools=1, broken=tuple(engine.catalog.ids))
    port = ScriptedAgentPort(ToolScript([{"tools": ["forecast", "get_forecast"], "args": {}}]))
    finish = CallableTool("Finish", print)
    result = DFSDTSearch(port, selector, finish, max_children=2, max_expansions=5).run("weather forecast")
    assert result.answer is None and result.expansions <= 5 and result.failed_calls


def test_dfsdt_give_up_call_backtracks(engine: Engine) -> None:
    selector = _selector(engine, max_tools=1)
    # nothing in the plan is ever offered and there is no search tool: the model gives up on every branch
    port = ScriptedAgentPort(ToolScript([{"tools": ["no_such_tool"]}]))
    result = DFSDTSearch(port, selector, CallableTool("Finish", print), max_children=2).run("weather")
    assert result.answer is None and result.expansions == 1 and port.calls == ["Finish"]


def test_core_agents_import_no_framework() -> None:
    code = (
        "import sys, toolrerank_plugins.agents, toolrerank_plugins.toolbench, toolrerank_plugins.llm.wrapper,"
        " toolrerank_plugins.testing.agents, toolrerank_plugins.testing.stages;"
        "print(','.join(m for m in ('langchain_core', 'langchain', 'llama_index', 'langgraph') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
