"""Cache-stable selections in the core (issue 31): a deterministic order, a tool once offered keeps its position
and new ones are appended (``stable_offer``, ``OfferLog``, ``ConversationToolSelector(stable=True)``), pins per
tool and per server, and fail-open (the pinned set, never nothing) when the search itself fails.

The failures are real: a request the engine refuses (a lone surrogate) and a first-stage backend that raises
as a database behind it would when its connection is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.agents import FALLBACK_FAILED, BaseToolSelector
from toolrerank_plugins.errors import QueryError
from toolrerank_plugins.retrieval.base import FirstStageType, Hit, register_first_stage
from toolrerank_plugins.selection import ConversationToolSelector, OfferLog, Selection, Turn, stable_offer
from toolrerank_plugins.testing import tiny_catalog
from toolrerank_plugins.testing.first_stages import WordSetIndex

LONE_SURROGATE = "send an email \ud800"


class FlakyIndex(WordSetIndex):
    """A word index whose backend can go away: ``down = True`` makes every search raise ConnectionError."""

    name = "flaky"
    down = False

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        if FlakyIndex.down:
            raise ConnectionError("the index server closed the connection")
        return super().search(queries, depth)


def _flaky_type() -> FirstStageType:
    def build(config: Any, embedder: Any) -> FlakyIndex:
        return FlakyIndex()

    def load(root: Path, config: Any, embedder: Any) -> FlakyIndex:  # pragma: no cover - never saved here
        raise NotImplementedError

    return FirstStageType(build=build, load=load, required_files=())


@pytest.fixture
def flaky_engine() -> Any:
    register_first_stage("flaky", _flaky_type(), replace=True)
    FlakyIndex.down = False
    yield Engine.build(tiny_catalog(), EngineConfig(retriever="flaky"))
    FlakyIndex.down = False


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever="bm25"))


def _selector(engine: Engine, **kwargs: Any) -> BaseToolSelector[str]:
    return BaseToolSelector(engine, {i: engine.catalog[i].name for i in engine.catalog.ids}, name=str, **kwargs)


# -- stable_offer / OfferLog ------------------------------------------------------------------------------
def test_offered_tools_keep_their_positions_and_new_ones_are_appended() -> None:
    offer = stable_offer(["a", "b", "c"], ["d", "b", "e"])
    assert offer.names == ("a", "b", "c", "d", "e")
    assert offer.added == ("d", "e") and not offer.restarted and offer.dropped == ()
    assert stable_offer(["a", "b"], ["b", "a"]).names == ("a", "b")  # nothing new: the very same list


def test_a_full_list_restarts_from_the_fresh_selection_keeping_what_it_still_has_in_order() -> None:
    offer = stable_offer(["pin", "a", "b", "c"], ["pin", "c", "x", "y"], max_offered=4)
    assert offer.restarted
    assert offer.names == ("pin", "c", "x", "y")  # the fresh selection whole; kept tools in their old order
    assert offer.added == ("x", "y")


def test_a_full_list_keeps_its_prefix_with_on_full_keep_and_says_what_it_left_out() -> None:
    offer = stable_offer(["pin", "a", "b"], ["pin", "x", "y"], max_offered=4, on_full="keep")
    assert offer.names == ("pin", "a", "b", "x") and offer.dropped == ("y",) and not offer.restarted


def test_bad_offer_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_offered"):
        stable_offer([], [], max_offered=0)
    with pytest.raises(ValueError, match="on_full"):
        OfferLog(on_full="drop")  # type: ignore[arg-type]


def test_offer_log_is_one_conversation() -> None:
    log = OfferLog(max_offered=5)
    assert log.offer(["a", "b"]).names == ("a", "b")
    assert log.offer(["c", "a"]).names == ("a", "b", "c")
    log.forget(["b"])
    assert log.names == ("a", "c")
    log.reset()
    assert log.offer(["z"]).names == ("z",)


# -- pins per tool and per server -------------------------------------------------------------------------
def test_server_pins_offer_every_tool_of_the_server_first_in_catalog_order(engine: Engine) -> None:
    selector = _selector(engine, max_tools=4, always_include=["send_email"], always_include_servers=["SkyCast"])
    assert selector.select("geocode this address") == ["send_email", "forecast", "current_weather", "geocode"]
    with pytest.raises(ValueError, match="unknown servers \\['Nowhere'\\]"):
        _selector(engine, always_include_servers=["Nowhere"])
    with pytest.raises(ValueError, match="pinned tools"):
        _selector(engine, max_tools=2, always_include=["login"], always_include_servers=["SkyCast"])


# -- fail-open --------------------------------------------------------------------------------------------
def test_without_fail_open_a_search_error_propagates(engine: Engine) -> None:
    with pytest.raises(QueryError):
        _selector(engine, max_tools=2).select(LONE_SURROGATE)


def test_fail_open_offers_the_pinned_set_when_the_engine_refuses_the_request(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    selector = _selector(
        engine, max_tools=5, always_include=["login"], always_include_servers=["PostBox"], fail_open=True
    )
    with caplog.at_level(logging.WARNING, logger="toolrerank_plugins.agents"):
        selected = selector.select_detailed(LONE_SURROGATE)
    assert selected.tools == ["login", "send_email", "list_inbox", "delete_email"]
    assert selected.reason is not None and "QueryError" in selected.reason and "pinned" in selected.reason
    assert any("the search failed" in r.getMessage() for r in caplog.records)


def test_fail_open_without_pins_offers_the_catalogs_first_tools_never_nothing(flaky_engine: Engine) -> None:
    selector = _selector(flaky_engine, max_tools=2, fail_open=True)
    assert selector.select("send an email") == ["send_email", "delete_email"]  # the backend is up
    FlakyIndex.down = True
    ranking = selector.rank("send an email")
    assert [st.tool.name for st in ranking.results] == ["login", "update_email"]
    assert all(FALLBACK_FAILED in st.stage_scores for st in ranking.results)
    assert ranking.reason is not None and "ConnectionError" in ranking.reason
    assert asyncio.run(selector.aselect("send an email")) == ["login", "update_email"]  # the async twin alike
    with pytest.raises(ConnectionError):
        asyncio.run(_selector(flaky_engine, max_tools=2).aselect("send an email"))


# -- ConversationToolSelector(stable=True) -----------------------------------------------------------------
def _conversation(*texts: str) -> list[Turn]:
    turns: list[Turn] = []
    for text in texts:
        turns += [Turn("user", text), Turn("assistant", "done")]
    return turns[:-1]


QUESTIONS = [
    "what is the weather forecast in Paris?",
    "send an email message to my boss",
    "geocode the address of the office",
    "what is the weather forecast for tomorrow?",
]


def _run(chooser: ConversationToolSelector[str]) -> list[list[str]]:
    offered: list[list[str]] = []
    selection: Selection | None = None
    for n in range(1, len(QUESTIONS) + 1):
        tools, selection = chooser.select(_conversation(*QUESTIONS[:n]), selection)
        # the framework keeps the selection as JSON in its state between model calls
        selection = Selection.from_state(selection.to_state())
        offered.append(tools)
    return offered


def test_stable_conversations_keep_every_offered_prefix(engine: Engine) -> None:
    pins = {"always_include": ["login"]}
    before = _run(ConversationToolSelector(_selector(engine, max_tools=3, **pins), history_turns=0))
    after = _run(ConversationToolSelector(_selector(engine, max_tools=3, **pins), history_turns=0, stable=True))
    prefix_kept = [after[i][: len(after[i - 1])] == after[i - 1] for i in range(1, len(after))]
    assert prefix_kept == [True] * 3
    assert [before[i][: len(before[i - 1])] == before[i - 1] for i in range(1, len(before))] == [False] * 3
    for fresh, stable in zip(before, after):  # every turn's own selection is offered, pins first
        assert set(fresh) <= set(stable) and stable[0] == "login"
    assert after[-1] == [
        *("login", "forecast", "current_weather"),
        *("send_email", "delete_email"),
        *("geocode", "update_email"),
    ]
    assert after[-1] == after[-2]  # turn 4 asks for the weather again: already offered, nothing changes
    assert _run(ConversationToolSelector(_selector(engine, max_tools=3, **pins), history_turns=0, stable=True)) == after


def test_stable_conversations_restart_when_full(engine: Engine) -> None:
    chooser = ConversationToolSelector(_selector(engine, max_tools=2), history_turns=0, stable=True, max_offered=4)
    offered = _run(chooser)
    assert offered[0] == ["forecast", "current_weather"]
    assert offered[1] == ["forecast", "current_weather", "send_email", "delete_email"]
    assert len(offered[2]) <= 4 and offered[2][: len(offered[1])] != offered[1]  # restarted
    with pytest.raises(ValueError, match="max_tools"):
        ConversationToolSelector(_selector(engine, max_tools=3), stable=True, max_offered=2)


def test_tools_a_search_found_join_the_stable_list_in_place(engine: Engine) -> None:
    chooser = ConversationToolSelector(_selector(engine, max_tools=2), history_turns=0, stable=True)
    turns = [Turn("user", "what is the weather forecast in Paris?")]
    first, selection = chooser.select(turns)
    turns += [Turn("assistant"), Turn("tool", "found", tool_name="search_tools", found=("geocode",))]
    second, selection = chooser.select(turns, selection)
    assert second == [*first, "geocode"] and selection.names == tuple(second)
    turns += [Turn("assistant", "ok"), Turn("user", "send an email message to my boss")]
    third, _ = chooser.select(turns, selection)
    assert third[:3] == second and "send_email" in third[3:]


def test_rank_selection_is_select_as_a_ranking_and_its_async_twin_agrees(engine: Engine) -> None:
    selector = _selector(engine, max_tools=3, always_include=["login"])
    ranking = selector.rank_selection("send an email message")
    assert [st.tool.name for st in ranking.results] == selector.select("send an email message")
    assert ranking.results[0].stage_scores == {"pinned": 1.0} and [st.rank for st in ranking.results] == [1, 2, 3]
    assert asyncio.run(selector.arank_selection("send an email message")) == ranking
    plain = _selector(engine, max_tools=3)
    assert plain.rank_selection("send an email message") == plain.rank("send an email message")
