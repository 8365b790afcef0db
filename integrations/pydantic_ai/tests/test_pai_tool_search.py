"""The engine as Pydantic AI's ``ToolSearch`` strategy, inside real Pydantic AI agents (issue 31).

A ``FunctionModel`` script plays the model: it sees only the pinned tools and ``search_tools`` at first, searches,
then sees and calls the tool our engine found, and answers with its result (the bundled catalog's 235 APIs as
deferred tools with deterministic fake implementations). ``TestModel`` runs the same capability with Pydantic
AI's own test model. Also: an index built from the deferred tools follows them when they change, pins per tool
and per server, fail-open, and deterministic results.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai_toolrerank import EngineToolSearch, toolrerank_tool_search, toolset_for_engine

from toolrerank_plugins import Engine, EngineConfig, default_catalog_path, load_catalog
from toolrerank_plugins.testing.tools import fake_implementation

#: BM25 alone splits identifiers and stems (the default pipeline's BM25 is plain; dense makes up for it there)
BM25_IDENTIFIERS = {"tokenizer": "identifiers", "stemmer": "english"}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(load_catalog(default_catalog_path()), EngineConfig(retriever="bm25", bm25=BM25_IDENTIFIERS))


@pytest.fixture(scope="module")
def implementations(engine: Engine) -> dict[str, Any]:
    return {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}


def _last_tool_return(messages: list[ModelMessage]) -> Any:
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, ToolReturnPart):
                return part.content
    return None


def test_a_real_agent_searches_with_the_engine_then_calls_the_found_tool(
    engine: Engine, implementations: dict[str, Any]
) -> None:
    offered: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = [t.name for t in info.function_tools]
        offered.append(names)
        if len(offered) == 1:
            return ModelResponse(parts=[ToolCallPart("search_tools", {"queries": ["update the e-mail address"]})])
        if len(offered) == 2:
            args = {"access_token": "tok-1", "new_email": "ada@example.org"}
            return ModelResponse(parts=[ToolCallPart("update_email", args)])
        return ModelResponse(parts=[TextPart(f"Done. {_last_tool_return(messages)}")])

    strategy = EngineToolSearch(engine, k=3)
    toolset = toolset_for_engine(engine, implementations, pinned=["login"])
    agent = Agent(FunctionModel(model), toolsets=[toolset], capabilities=[toolrerank_tool_search(strategy)])
    result = agent.run_sync("Please change the e-mail address of my account to ada@example.org")

    assert set(offered[0]) == {"login", "search_tools"}  # 234 deferred tools stay hidden until found
    assert strategy.last_found[0] == "update_email" and len(strategy.last_found) == 3
    assert "update_email" in offered[1] and set(strategy.last_found) <= set(offered[1])
    answer = json.loads(result.output.removeprefix("Done. "))
    assert answer["api"].endswith("/update_email") and answer["arguments"]["new_email"] == "ada@example.org"


def test_pydantic_ais_test_model_runs_the_engine_search(engine: Engine, implementations: dict[str, Any]) -> None:
    strategy = EngineToolSearch(engine, k=2)
    toolset = toolset_for_engine(engine, implementations)
    agent = Agent(
        TestModel(call_tools=["search_tools"]), toolsets=[toolset], capabilities=[toolrerank_tool_search(strategy)]
    )
    result = agent.run_sync("anything")
    assert len(strategy.last_found) == 2  # TestModel searches for 'a': the core's fallback still finds tools
    assert strategy.last_reason is not None and "added by" in strategy.last_reason
    assert json.loads(result.output)["search_tools"]["discovered_tools"] == [{"name": n} for n in strategy.last_found]


def _defs(*pairs: tuple[str, str], toolset: str = "<agent>") -> list[ToolDefinition]:
    return [ToolDefinition(name=n, description=d, toolset_id=toolset) for n, d in pairs]


WEATHER = ("get_weather", "Weather forecast for a city")
EMAIL = ("send_email", "Send an email message to a recipient")
STOCKS = ("stock_price", "Latest stock price for a ticker symbol")


def test_an_index_built_from_the_deferred_tools_follows_them() -> None:
    strategy = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=1)
    assert asyncio.run(strategy(None, ["email my boss"], _defs(WEATHER, EMAIL))) == ["send_email"]
    engine = strategy.engine
    assert engine is not None and engine.catalog.ids == ["get_weather", "send_email"]
    assert asyncio.run(strategy(None, ["price of ACME stock"], _defs(WEATHER, STOCKS))) == ["stock_price"]
    assert strategy.engine is engine and engine.catalog.ids == ["get_weather", "stock_price"]  # synced in place
    with pytest.raises(ValueError, match="not both"):
        EngineToolSearch(engine, EngineConfig(retriever="bm25"))


def test_pins_per_tool_and_per_server_come_first() -> None:
    tools = [*_defs(WEATHER, EMAIL), *_defs(STOCKS, ("stock_news", "News about a company"), toolset="markets")]
    by_tool = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=3, always_include=["get_weather"])
    assert asyncio.run(by_tool(None, ["email my boss"], tools))[:2] == ["get_weather", "send_email"]
    by_server = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=3, always_include_servers=["markets"])
    assert asyncio.run(by_server(None, ["email my boss"], tools)) == ["stock_price", "stock_news", "send_email"]


def test_fail_open_returns_the_pinned_tools_and_results_are_deterministic() -> None:
    tools = _defs(WEATHER, EMAIL, STOCKS)
    pinned = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=2, always_include=["get_weather"])
    assert asyncio.run(pinned(None, ["email \ud800"], tools)) == ["get_weather"]
    assert pinned.last_reason is not None and "QueryError" in pinned.last_reason
    strict = EngineToolSearch(config=EngineConfig(retriever="bm25"), k=2, fail_open=False)
    with pytest.raises(Exception, match="surrogate"):
        asyncio.run(strict(None, ["email \ud800"], tools))
    runs = [asyncio.run(EngineToolSearch(config=EngineConfig(retriever="bm25"), k=3)(None, ["weather"], tools))]
    runs.append(asyncio.run(EngineToolSearch(config=EngineConfig(retriever="bm25"), k=3)(None, ["weather"], tools)))
    assert runs[0] == runs[1]


def test_toolset_for_engine_needs_every_implementation(engine: Engine) -> None:
    with pytest.raises(ValueError, match="no implementation"):
        toolset_for_engine(engine, {})
