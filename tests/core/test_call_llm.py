"""A search call's own LLM (``engine.search(..., llm=)``): that call's LLM stages use it instead of the registered
or engine one, in sync, async and worker-thread calls, with the stages' budgets and fallbacks unchanged."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import BaseModel

from toolrerank_plugins._call_llm import call_llm
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.llm import register_llm, unregister_llm
from toolrerank_plugins.llm._stage import LLMStageError
from toolrerank_plugins.llm.query_generation import QueryGenerationConfig, QueryGenerationStage
from toolrerank_plugins.llm.registry import resolve_llm
from toolrerank_plugins.records import ScoredTool
from toolrerank_plugins.stages import Stage, StageContext, StageType, register_stage_type
from toolrerank_plugins.testing import ScriptedLLM, tiny_catalog

GEO = "1. Geocode a street address\n2. Find coordinates of an address"
MAIL = "1. Send an email message\n2. Compose an email"


@pytest.fixture(autouse=True)
def _registered() -> Iterator[ScriptedLLM]:
    """A registered default LLM that the per-call one must win over (and that must be back afterwards)."""
    llm = ScriptedLLM(default="1. Weather forecast for a city")
    register_llm("default", llm)
    yield llm
    unregister_llm("default")


def _engine(on_error: str = "fallback", **runtime: Any) -> Engine:
    stage = {"type": "query_generation", "params": {"on_error": on_error, "runtime": runtime}}
    cfg = EngineConfig.model_validate({"retriever": "bm25", "depth": 10, "stages": [stage]})
    return Engine.build(tiny_catalog(), cfg)


def _top(results: list[ScoredTool]) -> str:
    return results[0].tool.category or ""


def test_sync_call_uses_its_llm_then_the_registered_one_again(_registered: ScriptedLLM) -> None:
    engine = _engine()
    mine = ScriptedLLM(default=GEO)
    res = engine.search_detailed("help me with this", top_k=3, llm=mine)
    assert len(mine.calls) == 1 and not _registered.calls
    assert res.trace["query_generation"]["queries"][:2] == [
        "Geocode a street address",
        "Find coordinates of an address",
    ]
    assert _top(res.results) == "Maps"
    assert res.trace["query_generation"]["usage"]["llm_calls"] == 1
    # nothing leaks past the call: the next search without llm= uses the registered LLM
    assert call_llm() is None
    assert _top(engine.search("help me with this", top_k=3)) == "Weather"
    assert len(_registered.calls) == 1 and len(mine.calls) == 1


def test_every_search_method_passes_it_down(_registered: ScriptedLLM) -> None:
    engine = _engine()
    mine = ScriptedLLM(default=GEO)
    assert _top(engine.search("help", top_k=2, llm=mine)) == "Maps"
    assert [_top(r) for r in engine.search_batch(["help", "assist"], top_k=2, llm=mine)] == ["Maps", "Maps"]
    assert [_top(r.results) for r in engine.search_batch_detailed(["help", " "], top_k=2, llm=mine)[:1]] == ["Maps"]
    assert _top(asyncio.run(engine.asearch("help", top_k=2, llm=mine))) == "Maps"
    assert [_top(r) for r in asyncio.run(engine.asearch_batch(["help", "assist"], top_k=2, llm=mine))] == [
        "Maps",
        "Maps",
    ]
    assert _top(asyncio.run(engine.asearch_detailed("help", top_k=2, llm=mine)).results) == "Maps"
    assert len(mine.calls) == 8 and not _registered.calls
    assert sum(c.asynchronous for c in mine.calls) == 4  # the async twins await acomplete


def test_concurrent_async_calls_each_see_their_own_llm(_registered: ScriptedLLM) -> None:
    engine = _engine()
    geo, mail = ScriptedLLM(default=GEO, latency_s=0.02), ScriptedLLM(default=MAIL, latency_s=0.02)

    async def main() -> list[list[ScoredTool]]:
        return list(
            await asyncio.gather(
                *(engine.asearch(f"request {i}", top_k=2, llm=geo if i % 2 else mail) for i in range(6))
            )
        )

    out = asyncio.run(main())
    assert [_top(r) for r in out] == ["Mail", "Maps"] * 3
    assert sorted(c.text.count("request 1") + c.text.count("request 3") for c in geo.calls) == [0, 1, 1]
    assert all("request 0" in c.text or "request 2" in c.text or "request 4" in c.text for c in mail.calls)
    assert not _registered.calls


def test_worker_threads_each_see_their_own_llm(_registered: ScriptedLLM) -> None:
    engine = _engine()
    llms = [ScriptedLLM(default=GEO if i % 2 else MAIL, latency_s=0.01) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        out = list(pool.map(lambda i: engine.search(f"request {i}", top_k=2, llm=llms[i]), range(8)))
    assert [_top(r) for r in out] == ["Mail", "Maps"] * 4
    for i, llm in enumerate(llms):
        assert len(llm.calls) == 1 and f"request {i}" in llm.calls[0].text
    assert not _registered.calls


class _NoParams(BaseModel):
    pass


class _SyncLLMStage(Stage):
    """A sync-only stage that asks the resolved LLM once: in ``asearch`` it runs in a worker thread."""

    name = "ask_llm"

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        llm = resolve_llm("default", None, ctx)
        assert llm is not None
        trace["answer"] = llm.complete(query)
        trace["thread"] = threading.get_ident()
        return candidates


def test_sync_stage_in_the_async_path_runs_in_a_worker_thread_with_it(_registered: ScriptedLLM) -> None:
    register_stage_type("test_ask_llm", StageType(_NoParams, lambda cfg, ctx, path: _SyncLLMStage()), replace=True)
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[{"type": "test_ask_llm"}]))
    mine = ScriptedLLM(default="mine")
    trace = asyncio.run(engine.asearch_detailed("hello", top_k=2, llm=mine)).trace
    assert list(trace) == ["test_ask_llm"]
    assert trace["test_ask_llm"]["answer"] == "mine" and trace["test_ask_llm"]["thread"] != threading.get_ident()
    assert asyncio.run(engine.asearch_detailed("hello", top_k=2)).trace["test_ask_llm"]["answer"] != "mine"


def test_it_wins_over_the_stage_llm_and_engine_llm(_registered: ScriptedLLM) -> None:
    engine = _engine()
    stage_llm, engine_llm, mine = ScriptedLLM(default=MAIL), ScriptedLLM(default=MAIL), ScriptedLLM(default=GEO)
    engine.set_stages([QueryGenerationStage(QueryGenerationConfig(), llm=stage_llm)])
    engine.llm = engine_llm
    assert _top(engine.search("help", top_k=2, llm=mine)) == "Maps"
    assert len(mine.calls) == 1 and not stage_llm.calls and not engine_llm.calls
    assert _top(engine.search("help", top_k=2)) == "Mail" and len(stage_llm.calls) == 1


def test_fallback_and_budget_apply_to_it(_registered: ScriptedLLM) -> None:
    broken = ScriptedLLM(default=RuntimeError("provider down"))
    engine = _engine(max_retries=0)
    first = [r.id for r in engine.retrieve(["help me"], 2)[0]]
    res = engine.search_detailed("help me", top_k=2, llm=broken)
    assert res.trace["query_generation"]["fallback"].startswith("llm_error")
    assert [r.id for r in res.results] == first and len(broken.calls) == 1
    with pytest.raises(LLMStageError, match="llm_error"):
        _engine("raise", max_retries=0).search("help me", top_k=2, llm=broken)
    # a per-query budget counts the per-call LLM's calls like any other
    budget = _engine(max_prompt_tokens_per_query=1).search_detailed("help me", top_k=2, llm=ScriptedLLM(default=GEO))
    assert budget.trace["query_generation"]["fallback"].startswith("budget_exceeded")
    assert not _registered.calls


@pytest.mark.parametrize("bad", ["gpt-4o", object(), ScriptedLLM.complete])
def test_a_non_llm_is_a_config_error_naming_it(bad: Any) -> None:
    engine = _engine()
    with pytest.raises(ConfigError, match="llm must be an LLM port"):
        engine.search("help", top_k=2, llm=bad)
    with pytest.raises(ConfigError, match="ChatModelLLM"):
        asyncio.run(engine.asearch("help", top_k=2, llm=bad))
    assert call_llm() is None


def test_rerank_and_its_async_twin_use_the_calls_llm(_registered: ScriptedLLM) -> None:
    engine = _engine()
    candidates = list(engine.catalog)[:6]
    mine = ScriptedLLM(default=GEO)
    engine.rerank("help me with this", candidates, top_k=3, llm=mine)
    asyncio.run(engine.arerank("help me with this", candidates, top_k=3, llm=mine))
    assert len(mine.calls) == 2 and not _registered.calls
    assert [c.asynchronous for c in mine.calls] == [False, True]
    assert call_llm() is None  # nothing leaks past the calls
    engine.rerank("help me with this", candidates, top_k=3)
    assert len(_registered.calls) == 1
    with pytest.raises(ConfigError):
        engine.rerank("help", candidates, llm=object())
