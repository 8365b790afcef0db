"""ToolRerankMiddleware inside real ``langchain.agents.create_agent`` graphs driven by a scripted chat model
(no network): which tools the model is offered on each call, that they run, pins, the conversation as the
query, one selection per episode, tool search, async, and the agent's model driving the LLM stages."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_toolrerank import ChatModelLLM, ToolRerankMiddleware, ToolSelector
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation, fake_result
from langgraph.checkpoint.memory import InMemorySaver

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.llm import unregister_llm
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import tiny_catalog

WEATHER = {"forecast", "current_weather", "get_forecast"}
#: what the query generation stage's prompt says (toolrerank_plugins.llm.prompts)
QG_PROMPT = r"generate the description of an API"
#: a scripted model that never gets its tool would search forever: fail fast instead
LIMIT = {"recursion_limit": 20}


def _engine(stages: list[dict[str, Any]] | None = None) -> Engine:
    return Engine.build(tiny_catalog(), pipeline_config("bm25", depth=10, stages=stages or []))


def _tools(engine: Engine) -> dict[str, Any]:
    """One ``StructuredTool`` per catalog API (fake implementations), keyed by id."""
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolSelector.from_engine(engine, impls).tools_by_id


def _middleware(engine: Engine | None = None, **kwargs: Any) -> ToolRerankMiddleware:
    engine = engine or _engine()
    return ToolRerankMiddleware(engine, _tools(engine), **kwargs)


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture(autouse=True)
def _no_registered_llm() -> None:
    unregister_llm("default")  # the LLM stage tests must get their LLM from the middleware


def test_offers_the_selected_tools_on_every_call_and_runs_the_chosen_one() -> None:
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Paris"}}])
    agent = create_agent(model, middleware=[_middleware(max_tools=2)])  # no tools= : the middleware registers them
    out = agent.invoke({"messages": [HumanMessage("what is the weather forecast in Paris?")]}, LIMIT)
    assert model.offered == [["forecast", "current_weather"]] * 2  # 2 of 10 tools, the same on both calls
    [result] = _tool_messages(out)
    expected = fake_result(tiny_catalog()["Weather/SkyCast/forecast"], {"city": "Paris"})
    assert result.name == "forecast" and result.content == expected and result.status == "success"
    assert out["messages"][-1].content == "Final answer: " + expected


def test_pins_are_offered_on_every_call() -> None:
    rerank = _middleware(max_tools=3, always_include=["login"])
    for question, wanted in [("weather forecast in Paris", "forecast"), ("send an email to my boss", "send_email")]:
        model = ScriptedToolCallingModel(plan=[{"tools": [wanted], "args": {}}])
        create_agent(model, middleware=[rerank]).invoke({"messages": [HumanMessage(question)]}, LIMIT)
        assert len(model.offered) == 2
        for offered in model.offered:
            assert offered[0] == "login" and wanted in offered and len(offered) == 3


def test_a_tool_found_with_search_tools_is_offered_and_executable() -> None:
    rerank = _middleware(max_tools=1, include_search_tool=True)
    plan = [{"tools": ["geocode"], "args": {"address": "10 Main Street"}, "search": "street address latitude"}]
    model = ScriptedToolCallingModel(plan=plan)
    out = create_agent(model, middleware=[rerank]).invoke(
        {"messages": [HumanMessage("send an email to my boss")]}, LIMIT
    )
    assert model.offered[0] == ["send_email", "search_tools"]  # geocode is not among the selected
    assert model.calls == ["search_tools", "geocode"]
    search, geocode = _tool_messages(out)
    assert search.name == "search_tools" and search.artifact == ["geocode", "update_email"]
    # the episode's selection plus every tool found, on the following calls
    assert model.offered[1] == model.offered[2] == ["send_email", *search.artifact, "search_tools"]
    expected = fake_result(tiny_catalog()["Maps/GeoFind/geocode"], {"address": "10 Main Street"})
    assert geocode.name == "geocode" and geocode.status == "success" and geocode.content == expected


def test_a_follow_up_uses_the_conversation() -> None:
    """'do it' after a weather question: the earlier turns make the query; the last message alone does not find
    the weather tools."""

    def ask(history_turns: int) -> list[list[str]]:
        model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Paris"}}])
        agent = create_agent(model, middleware=[_middleware(max_tools=2, history_turns=history_turns)])
        agent.invoke(
            {
                "messages": [
                    HumanMessage("what is the weather forecast in Paris?"),
                    AIMessage("Shall I look up the forecast for the coming days?"),
                    HumanMessage("yes, do it"),
                ]
            },
            LIMIT,
        )
        return model.offered

    assert set(ask(history_turns=2)[0]) <= WEATHER and "forecast" in ask(history_turns=2)[0]
    alone = ask(history_turns=0)[0]  # "yes, do it" alone: no word of a tool; the fallback's partial matches
    assert alone and not set(alone) & WEATHER


def test_each_user_message_starts_a_new_selection_in_a_persistent_thread() -> None:
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast", "send_email"], "args": {}}])
    agent = create_agent(model, middleware=[_middleware(max_tools=2, history_turns=0)], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}, **LIMIT}
    agent.invoke({"messages": [HumanMessage("weather forecast in Paris")]}, thread)
    agent.invoke({"messages": [HumanMessage("now send an email to my boss")]}, thread)
    assert model.offered[0] == model.offered[1] == ["forecast", "current_weather"]
    assert model.offered[2][0] == "send_email" and not set(model.offered[2]) & WEATHER


def test_the_agents_other_tools_pass_through_and_duplicates_are_fine() -> None:
    @tool
    def ask_user(question: str) -> str:
        """Ask the user a question."""
        return "yes"

    engine = _engine()
    tools = _tools(engine)
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Rome"}}])
    # the catalog tools given to create_agent too (as with LangChain's own selector middleware)
    agent = create_agent(
        model, [*tools.values(), ask_user], middleware=[ToolRerankMiddleware(engine, tools, max_tools=1)]
    )
    out = agent.invoke({"messages": [HumanMessage("weather forecast in Rome")]}, LIMIT)
    assert model.offered == [["forecast", "ask_user"]] * 2
    assert [m.name for m in _tool_messages(out)] == ["forecast"]


def test_async_ainvoke_offers_the_same_and_searches() -> None:
    rerank = _middleware(max_tools=1, include_search_tool=True, always_include=["login"])
    plan = [{"tools": ["geocode"], "args": {"address": "1 Rue"}, "search": "street address latitude"}]
    sync_model, async_model = ScriptedToolCallingModel(plan=plan), ScriptedToolCallingModel(plan=plan)
    question = {"messages": [HumanMessage("what is the weather forecast in Paris?")]}
    sync_out = create_agent(sync_model, middleware=[rerank]).invoke(question, LIMIT)
    async_out = asyncio.run(create_agent(async_model, middleware=[rerank]).ainvoke(question, LIMIT))
    assert async_model.offered == sync_model.offered
    assert async_model.offered[0] == ["login", "search_tools"]  # max_tools=1 is the pin
    assert async_model.calls == ["search_tools", "geocode"] and "geocode" in async_model.offered[1]
    assert [m.content for m in _tool_messages(async_out)] == [m.content for m in _tool_messages(sync_out)]


# -- the LLM stages run on the agent's model ---------------------------------------------------------
def _qg_engine() -> Engine:
    return _engine([{"type": "query_generation", "params": {"on_error": "fallback"}}])


def test_llm_stages_run_on_the_agents_model_once_per_episode() -> None:
    model = ScriptedToolCallingModel(
        plan=[{"tools": ["geocode"], "args": {"address": "10 Main Street"}}],
        replies=[(QG_PROMPT, "1. Convert a street address into latitude and longitude")],
    )
    agent = create_agent(model, middleware=[_middleware(_qg_engine(), max_tools=2)])
    out = agent.invoke({"messages": [HumanMessage("help me with my trip to 10 Main Street")]}, LIMIT)
    # the stage asked the agent's model (its prompt holds the question), once for the episode's 2 model calls
    assert len(model.prompted) == 1 and "Human: help me with my trip" in model.prompted[0]
    assert model.offered[0][0] == "geocode" and model.offered[0] == model.offered[1]
    assert [m.name for m in _tool_messages(out)] == ["geocode"]
    assert not any(QG_PROMPT in str(m.content) for m in out["messages"])  # stage calls stay out of the chat


def test_without_the_agents_model_the_stage_falls_back() -> None:
    model = ScriptedToolCallingModel(plan=[], replies=[(QG_PROMPT, "1. Convert a street address into coordinates")])
    agent = create_agent(model, middleware=[_middleware(_qg_engine(), max_tools=2, use_agent_model=False)])
    agent.invoke({"messages": [HumanMessage("help me with my trip")]}, LIMIT)
    # no LLM registered: the first-stage ranking, which is empty, so the selection's fallback fills it
    assert model.prompted == [] and len(model.offered[0]) == 2


def test_the_stage_trace_shows_the_agents_model_was_used() -> None:
    model = ScriptedToolCallingModel(plan=[], replies=[(QG_PROMPT, "1. Convert a street address into coordinates")])
    res = _qg_engine().search_detailed("help me with my trip", top_k=2, llm=ChatModelLLM(model))
    trace = res.trace["query_generation"]
    assert "fallback" not in trace and trace["usage"]["llm_calls"] == 1
    assert trace["queries"][0] == "Convert a street address into coordinates" and res.results[0].tool.name == "geocode"


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_separate_llm_wins_over_the_agents_model(asynchronous: bool) -> None:
    agent_model = ScriptedToolCallingModel(plan=[], replies=[(QG_PROMPT, "1. Convert a street address")])
    cheap = ScriptedToolCallingModel(plan=[], replies=[(QG_PROMPT, "1. Send an email message to a recipient")])
    agent = create_agent(agent_model, middleware=[_middleware(_qg_engine(), max_tools=2, llm=cheap)])
    question = {"messages": [HumanMessage("help me with my trip")]}
    asyncio.run(agent.ainvoke(question, LIMIT)) if asynchronous else agent.invoke(question, LIMIT)
    assert agent_model.prompted == [] and len(cheap.prompted) == 1
    assert agent_model.offered[0][0] == "send_email"


def test_bad_arguments_are_named() -> None:
    engine = _engine()
    with pytest.raises(ValueError, match="always_include names unknown tools"):
        ToolRerankMiddleware(engine, _tools(engine), always_include=["nope"])
    with pytest.raises(ValueError, match="history_turns must be >= 0"):
        ToolRerankMiddleware(engine, _tools(engine), history_turns=-1)
    with pytest.raises(ValueError, match="catalog tool"):
        ToolRerankMiddleware(engine, _tools(engine), include_search_tool=True, search_tool_name="forecast")


def test_from_tools_indexes_langchain_tools() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        return json.dumps({"city": city, "sky": "sunny"})

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email message to a recipient."""
        return "sent"

    rerank = ToolRerankMiddleware.from_tools([get_weather, send_email], EngineConfig(retriever="bm25"), max_tools=1)
    model = ScriptedToolCallingModel(plan=[{"tools": ["send_email"], "args": {"to": "boss", "body": "hi"}}])
    out = create_agent(model, middleware=[rerank]).invoke({"messages": [HumanMessage("email my boss")]}, LIMIT)
    assert model.offered == [["send_email"]] * 2 and _tool_messages(out)[0].content == "sent"


def test_a_lone_surrogate_in_an_earlier_turn_does_not_stop_the_agent() -> None:
    """An earlier turn (the model's own reply among them) with a lone surrogate used to make every later model
    call raise ValueError from the search: earlier turns are context, their bad characters become U+FFFD."""
    model = ScriptedToolCallingModel(plan=[{"tools": ["forecast"], "args": {"city": "Paris"}}])
    agent = create_agent(model, middleware=[_middleware(max_tools=2, history_turns=2)])
    agent.invoke(
        {
            "messages": [
                HumanMessage("what is the weather forecast in Paris?"),
                AIMessage("Shall I look up the forecast \ud800 for the coming days?"),
                HumanMessage("yes, do it"),
            ]
        },
        LIMIT,
    )
    assert "forecast" in model.offered[0]


def _thirty_tools() -> list[Any]:
    """30 APIs of the bundled catalog (accounts, flights, hotels: nothing about money) as LangChain tools."""
    from langchain_toolrerank._convert import spec_to_tool

    from toolrerank_plugins.testing.tools import demo_catalog

    catalog = demo_catalog()
    specs = [catalog[i] for i in catalog.ids[:30]]
    return [spec_to_tool(s, fake_implementation(s), s.name) for s in specs]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_request_bm25_cannot_match_is_still_offered_tools_and_the_state_says_why(
    asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 26: with retriever="bm25" (as in every docs snippet) a request sharing no word with the 30 tools
    # was offered no tool at all (tools=None); the core's fallback now fills the selection and says why
    tools = _thirty_tools()
    rerank = ToolRerankMiddleware.from_tools(tools, EngineConfig(retriever="bm25"), max_tools=3)
    euros = "How much is 100 US dollars in euros?"
    assert rerank.engine.search(euros, top_k=3) == []
    model = ScriptedToolCallingModel(plan=[{"tools": [t.name for t in tools], "args": {}}])  # calls what it gets
    agent = create_agent(model, middleware=[rerank], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "euros"}, **LIMIT}
    question = {"messages": [HumanMessage(euros)]}
    with caplog.at_level(logging.INFO, logger="toolrerank_plugins.agents"):
        out = asyncio.run(agent.ainvoke(question, thread)) if asynchronous else agent.invoke(question, thread)
    assert len(model.offered[0]) == 3 and model.offered[1] == model.offered[0]  # offered, kept for the episode
    assert model.calls == [model.offered[0][0]]  # and the model could call one
    assert _tool_messages(out)[0].status == "success"
    reason = agent.get_state(thread).values["toolrerank_selection"]["reason"]
    assert (
        reason
        == "the engine ranked 0 of the 3 tools asked for; 3 added by character n-gram overlap with the tool texts"
    )
    assert reason in caplog.text
