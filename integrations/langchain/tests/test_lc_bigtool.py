"""The langgraph-bigtool hook (``langchain_toolrerank.bigtool``) inside real ``langgraph_bigtool.create_agent``
graphs driven by a scripted chat model: the engine's ids become the tools bound on the next turn, and they run."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

pytest.importorskip(
    "langgraph_bigtool",
    reason="langgraph-bigtool is not installed (optional): pip install -e './integrations/langchain[bigtool]'",
)

from langchain_core.messages import HumanMessage, ToolMessage  # noqa: E402
from langchain_toolrerank import ToolSelector  # noqa: E402
from langchain_toolrerank.bigtool import retrieve_tools_coroutine, retrieve_tools_function  # noqa: E402
from langchain_toolrerank.testing import ScriptedToolCallingModel, fake_implementation, fake_result  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph_bigtool import create_agent  # noqa: E402

from toolrerank_plugins.engine import Engine, EngineConfig  # noqa: E402
from toolrerank_plugins.testing import tiny_catalog  # noqa: E402

PLAN = [{"tools": ["geocode"], "args": {"address": "10 Main Street"}, "search": "street address latitude"}]


@pytest.fixture(autouse=True)
def _bigtool_on_langgraph_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """langgraph-bigtool 0.0.3 (the latest) calls ``ToolNode.inject_tool_args``, which langgraph-prebuilt 1.x made
    private; ToolNode 1.x injects state and store itself when it runs a call, so passing the call through is
    what the old method did for tools without injected arguments (all of these)."""
    if not hasattr(ToolNode, "inject_tool_args"):
        monkeypatch.setattr(ToolNode, "inject_tool_args", lambda self, call, state, store: call, raising=False)


def _engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))


def _registry(engine: Engine) -> dict[str, Any]:
    impls = {i: fake_implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolSelector.from_engine(engine, impls).tools_by_id  # keys: catalog ids, as the hook returns


def _check(model: ScriptedToolCallingModel, out: dict[str, Any]) -> None:
    assert model.offered[0] == ["retrieve_tools"]  # bigtool starts with the retrieval tool only
    assert model.calls == ["retrieve_tools", "geocode"]
    assert out["selected_tool_ids"] == ["Maps/GeoFind/geocode", "Auth/Keyring/update_email"]
    assert model.offered[1] == ["retrieve_tools", "geocode", "update_email"]
    result = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert result.content == fake_result(tiny_catalog()["Maps/GeoFind/geocode"], {"address": "10 Main Street"})


def test_the_sync_hook_in_a_bigtool_agent() -> None:
    engine = _engine()
    model = ScriptedToolCallingModel(plan=PLAN, search_tool_name="retrieve_tools")
    agent = create_agent(model, _registry(engine), retrieve_tools_function=retrieve_tools_function(engine)).compile()
    _check(model, agent.invoke({"messages": [HumanMessage("where is 10 Main Street?")]}))


def test_the_async_hook_in_a_bigtool_agent() -> None:
    engine = _engine()
    model = ScriptedToolCallingModel(plan=PLAN, search_tool_name="retrieve_tools")
    hook = retrieve_tools_coroutine(engine)
    assert inspect.iscoroutinefunction(hook)
    agent = create_agent(model, _registry(engine), retrieve_tools_coroutine=hook).compile()  # async path only
    _check(model, asyncio.run(agent.ainvoke({"messages": [HumanMessage("where is 10 Main Street?")]})))


def test_hook_signature_ids_limit_and_llm() -> None:
    engine = _engine()
    sync, coro = retrieve_tools_function(engine, limit=3), retrieve_tools_coroutine(engine, limit=3)
    assert sync.__name__ == coro.__name__ == "retrieve_tools" and sync.__doc__
    ids = sync("weather forecast in Paris")
    assert (
        ids == asyncio.run(coro("weather forecast in Paris")) and len(ids) == 3 and ids[0] == "Weather/SkyCast/forecast"
    )
    with pytest.raises(ValueError, match="limit must be an int >= 1"):
        retrieve_tools_function(engine, limit=0)
    # an engine with an LLM stage: the hook's llm= (a chat model) writes the queries
    qg = Engine.build(
        tiny_catalog(), EngineConfig.model_validate({"retriever": "bm25", "stages": [{"type": "query_generation"}]})
    )
    llm = ScriptedToolCallingModel(plan=[], replies=[("description of an API", "1. Send an email message")])
    assert retrieve_tools_function(qg, limit=1, llm=llm)("help me") == ["Mail/PostBox/send_email"]
    assert len(llm.prompted) == 1
