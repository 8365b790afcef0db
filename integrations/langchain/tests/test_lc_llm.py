from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_toolrerank import ChatModelLLM

from toolrerank_plugins.llm.base import LLM, LLMError


class Recording(GenericFakeChatModel):
    seen: list[Any] = []
    kwargs: list[dict] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        self.seen.append(messages)
        self.kwargs.append({"stop": stop, **kwargs})
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_complete_converts_messages_and_options():
    reply = AIMessage("rewritten query", usage_metadata={"input_tokens": 7, "output_tokens": 2, "total_tokens": 9})
    model = Recording(messages=iter([reply]), seen=[], kwargs=[])
    llm = ChatModelLLM(model)
    assert isinstance(llm, LLM)
    out = llm.complete(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        temperature=0.0,
        stop=["\n"],
    )
    assert out == "rewritten query"
    sent = model.seen[0]
    assert isinstance(sent[0], SystemMessage) and isinstance(sent[1], HumanMessage) and sent[1].content == "hi"
    assert model.kwargs[0]["stop"] == ["\n"] and model.kwargs[0]["temperature"] == 0.0
    assert "max_tokens" not in model.kwargs[0]
    assert llm.usage == {"llm_calls": 1, "prompt_tokens": 7, "completion_tokens": 2}


def test_acomplete_matches_complete():
    llm = ChatModelLLM(FakeListChatModel(responses=["a", "a"]))
    assert llm.complete("q") == asyncio.run(llm.acomplete("q")) == "a"


def test_content_blocks_are_joined():
    msg = AIMessage(content=[{"type": "text", "text": "foo "}, {"type": "text", "text": "bar"}])
    assert ChatModelLLM(GenericFakeChatModel(messages=iter([msg]))).complete("q") == "foo bar"


def test_errors_become_llm_errors():
    llm = ChatModelLLM(GenericFakeChatModel(messages=iter([])))  # exhausted: raises on call
    with pytest.raises(LLMError, match="GenericFakeChatModel"):
        llm.complete("q")
    with pytest.raises(ValueError, match="unknown message role"):
        llm.complete([{"role": "robot", "content": "x"}])


def test_llm_stage_runs_on_the_agents_chat_model():
    # The query-generation stage, driven by a LangChain chat model through the adapter (registry lookup).
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.llm import register_llm, unregister_llm
    from toolrerank_plugins.stages import StageSpec
    from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

    answers = ["1. Convert a street address into coordinates\n2. Current weather", "unused"]
    model = FakeListChatModel(responses=answers)
    register_llm("lc_test_agent_model", ChatModelLLM(model))
    try:
        stage = StageSpec(type="query_generation", params={"llm": "lc_test_agent_model"})
        engine = Engine.build(tiny_catalog(), EngineConfig(depth=10, stages=[stage]), embedder=FakeEmbedder())
        res = engine.search_detailed("where is 10 Main Street and is it raining there", top_k=3)
    finally:
        unregister_llm("lc_test_agent_model")
    assert res.trace["query_generation"]["usage"]["llm_calls"] == 1 and model.i == 1
    assert "fallback" not in res.trace["query_generation"]
    assert "Maps/GeoFind/geocode" in [r.tool.id for r in res.results]
