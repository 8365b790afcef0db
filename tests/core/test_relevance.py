"""'No tool fits' (issue 29 item 4): the engine's ``min_relevance``, the relevance model behind it, and the
selection's precedence (an explicit abstention wins over the fallback that fills a short ranking)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins.agents import BaseToolSelector
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.retrieval.relevance import (
    RELEVANCE,
    RelevanceConfig,
    RelevanceModel,
    check_min_relevance,
    words,
)
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

EMAIL = "send an email message to my boss"
OFF_TOPIC = "what is the boiling point of lead"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())


def _relevance(results: list[Any]) -> list[float]:
    return [r.stage_scores[RELEVANCE] for r in results]


def test_off_by_default_nothing_changes(engine: Engine) -> None:
    res = engine.search_detailed(EMAIL, top_k=5)
    assert all(RELEVANCE not in r.stage_scores for r in res.results) and RELEVANCE not in res.trace


def test_zero_scores_every_result_and_drops_none(engine: Engine) -> None:
    plain = engine.search(EMAIL, top_k=5)
    res = engine.search_detailed(EMAIL, top_k=5, min_relevance=0.0)
    assert [r.id for r in res.results] == [r.id for r in plain]
    assert [r.score for r in res.results] == [r.score for r in plain]  # the ranking's scores are untouched
    assert all(0.0 <= p <= 1.0 for p in _relevance(res.results))
    assert res.trace[RELEVANCE]["kept"] == 5 and res.trace[RELEVANCE]["abstained"] is False


def test_results_below_the_threshold_are_dropped_and_the_trace_says_why(engine: Engine) -> None:
    scored = engine.search(EMAIL, top_k=5, min_relevance=0.0)
    probs = sorted(set(_relevance(scored)))
    threshold = probs[len(probs) // 2]
    res = engine.search_detailed(EMAIL, top_k=5, min_relevance=threshold)
    expected = [r.id for r in scored if r.stage_scores[RELEVANCE] >= threshold]
    assert [r.id for r in res.results] == expected and 0 < len(expected) < 5
    assert [r.rank for r in res.results] == list(range(1, len(expected) + 1))
    trace = res.trace[RELEVANCE]
    assert len(trace["dropped"]) == 5 - len(expected)
    assert trace["reason"] == f"{5 - len(expected)} of 5 results below relevance {threshold:g} dropped"


def test_no_tool_fits_returns_nothing(engine: Engine) -> None:
    res = engine.search_detailed(OFF_TOPIC, top_k=3, min_relevance=1.0)
    assert res.results == []
    assert res.trace[RELEVANCE]["abstained"] is True
    assert res.trace[RELEVANCE]["reason"].startswith("no tool fits: no result reached relevance 1")
    assert engine.search_batch([OFF_TOPIC, EMAIL], top_k=3, min_relevance=1.0) == [[], []]


def test_async_twins_give_the_same(engine: Engine) -> None:
    sync = engine.search(EMAIL, top_k=4, min_relevance=0.0)
    got = asyncio.run(engine.asearch(EMAIL, top_k=4, min_relevance=0.0))
    assert [(r.id, r.stage_scores[RELEVANCE]) for r in got] == [(r.id, r.stage_scores[RELEVANCE]) for r in sync]
    assert asyncio.run(engine.asearch_batch([OFF_TOPIC], top_k=3, min_relevance=1.0)) == [[]]


@pytest.mark.parametrize(
    ("value", "error"),
    [(1.5, ValueError), (-0.1, ValueError), (math.nan, ValueError), ("0.5", TypeError), (True, TypeError)],
)
def test_bad_thresholds_are_refused(engine: Engine, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="min_relevance"):
        engine.search(EMAIL, min_relevance=value)
    with pytest.raises(error, match="min_relevance"):
        BaseToolSelector(engine, {i: i for i in engine.catalog.ids}, name=str, min_relevance=value)
    assert check_min_relevance(None) is None and check_min_relevance(np.float32(0.25)) == 0.25


def test_a_prerequisite_counts_as_much_as_the_result_it_serves() -> None:
    tgr = StageSpec(type="tgr", params={"propagate": False, "expansion": {"enabled": True, "window": 1}})
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[tgr]), embedder=FakeEmbedder())
    res = engine.search_detailed("change the email address of my account", top_k=3, min_relevance=0.0)
    by_id = {r.id: r.stage_scores[RELEVANCE] for r in res.results}
    [inserted] = res.trace["tgr"]["expanded"]
    assert by_id[inserted["id"]] >= by_id[inserted["prerequisite_of"]]


def test_the_model_is_fitted_once_and_kept_over_small_changes() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())
    model = engine.relevance_model()
    assert isinstance(model, RelevanceModel) and model.n_pseudo > 0 and len(model.no_fit) == model.n_pseudo
    assert engine.relevance_model() is model
    engine.add([ToolSpec("Extra/Tool/ping", "ping", "Check that a host answers")])  # 1 API of 11
    assert engine.relevance_model() is model
    engine.relevance_config = RelevanceConfig(calibration="logistic")  # another calibration: fitted again
    refit = engine.relevance_model()
    assert refit is not model and refit.no_fit == ()


def test_calibration_without_labels_is_deterministic() -> None:
    a = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())
    b = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())
    assert a.relevance_model() == b.relevance_model()
    assert words("Get the forecasts for getUserNames") == ["forecast", "user", "name"]


# -- the selection: an explicit abstention wins over the fallback fill and fail-open ------------------
def _bm25_selector(**kwargs: Any) -> BaseToolSelector[str]:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25", stages=[]), embedder=FakeEmbedder())
    return BaseToolSelector(engine, {i: i for i in engine.catalog.ids}, name=str, max_tools=3, **kwargs)


def test_abstention_wins_over_the_fallback_fill() -> None:
    misspelt = "wether forcasts"  # BM25 shares no word with it: the fallback would fill the selection
    assert len(_bm25_selector().select(misspelt)) == 3
    selector = _bm25_selector(min_relevance=1.0)
    ranking = selector.rank(misspelt)
    assert ranking.results == [] and ranking.reason == "nothing was ranked; no tool is offered"
    assert selector.select("send an email message") == []
    assert selector.select_detailed("send an email message").reason.startswith("no tool fits")


def test_pins_are_still_offered_when_no_tool_fits() -> None:
    selector = _bm25_selector(min_relevance=1.0, always_include=["Auth/Keyring/login"])
    detailed = selector.select_detailed("send an email message")
    assert detailed.tools == ["Auth/Keyring/login"]
    assert detailed.reason is not None and detailed.reason.endswith("only the pinned tools are offered")
    assert asyncio.run(selector.aselect("send an email message")) == ["Auth/Keyring/login"]


def test_fail_open_offers_nothing_that_may_not_fit() -> None:
    refused = "send an email \ud800"  # a lone surrogate: the engine refuses the request
    assert len(_bm25_selector(fail_open=True).select(refused)) == 3  # without: the catalog's first tools
    ranking = _bm25_selector(fail_open=True, min_relevance=0.5).rank(refused)
    assert ranking.results == [] and "no tool is offered" in (ranking.reason or "")


def test_a_low_threshold_keeps_the_ranking() -> None:
    selector = _bm25_selector(min_relevance=0.0)
    ranking = selector.rank("send an email message")
    assert [r.id for r in ranking.results] == [r.id for r in _bm25_selector().rank("send an email message").results]
    assert all(RELEVANCE in r.stage_scores for r in ranking.results) and ranking.reason is None


def test_query_scope_keeps_all_results_or_none() -> None:
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense", stages=[]), embedder=FakeEmbedder())
    scored = _relevance(engine.search(EMAIL, top_k=5, min_relevance=0.0))
    best = max(scored)
    assert min(scored) < best  # a threshold between them drops results under the per-result rule ...
    assert len(engine.search(EMAIL, top_k=5, min_relevance=best)) < 5
    model = engine.relevance_model()
    engine.relevance_config = RelevanceConfig(scope="query")  # ... and none under the query rule
    assert len(engine.search(EMAIL, top_k=5, min_relevance=best)) == 5
    assert engine.relevance_model() is model  # the scope is read by the search: no second fit
    assert engine.search(EMAIL, top_k=5, min_relevance=min(1.0, best + 1e-6)) == []
