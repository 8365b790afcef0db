"""A request's action verb picks among one thing's actions (``multi_intent.actions``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ScoredTool, ToolSpec
from toolrerank_plugins.rerank.intents import api_action, by_action, leading_words, request_action


@pytest.mark.parametrize(
    ("request_text", "action"),
    [
        ("Can you cancel my appointment with Dr. Chen?", "delete"),
        ("Can you help me add a schedule for tomorrow at 2pm?", "create"),
        ("Please check my meetings on Friday", "read"),
        ("I want to change my password", "update"),
        ("Can you record my blood pressure?", "record"),
        ("Can you remind me ten minutes before?", None),  # no action verb: nothing to match
        ("weather in Rome", None),
        # a listed verb after a determiner or a preposition is a noun: the request's verb comes later or not at all
        ("I need your assistance with tracking an order", None),
        ("Details about the book, then cancel my booking", "delete"),
        ("Tell me about the book", "read"),  # "tell" comes first
        ("Can you give me the list of devices in the Morning Routine scene?", "read"),  # "of" after it: the action
        ("I need your assistance with the log and a post", None),
        ("In order to travel, book a hotel", "create"),
        ("I want a new account", "create"),  # "new" (an adjective) keeps its class after a determiner
        ("Order a pizza", "create"),
    ],
)
def test_request_action_is_the_class_of_the_first_action_verb(request_text: str, action: str | None) -> None:
    assert request_action(request_text) == action


@pytest.mark.parametrize(
    ("name", "action", "thing"),
    [
        ("CancelRegistration", "delete", {"registration"}),
        ("AppointmentRegistration", None, {"appointment", "registration"}),
        ("query_meetings", "read", {"meeting"}),  # a plural's "s" is dropped
        ("Hotels.SearchHotel", "read", {"hotel"}),
        ("DELETE /me/albums", "delete", {"me", "album"}),
        ("get_address", "read", {"address"}),  # "ss" is not a plural
    ],
)
def test_api_action_reads_the_verb_and_the_thing_from_the_name(name: str, action: str | None, thing: set[str]) -> None:
    assert api_action(name) == (action, frozenset(thing))


def _ranking(*names: str) -> list[ScoredTool]:
    return [
        ScoredTool(ToolSpec(id=n, name=n, description=""), score=1.0 / rank, rank=rank)
        for rank, n in enumerate(names, start=1)
    ]


def test_the_requested_action_takes_the_place_of_another_action_on_the_same_thing() -> None:
    ranking = _ranking(
        "AppointmentRegistration", "QueryRegistration", "RecordHealthData", "ModifyRegistration", "CancelRegistration"
    )
    moved = [c.id for c in by_action(ranking, "delete", window=10)]
    # CancelRegistration takes QueryRegistration's place; AppointmentRegistration states no action: it stays
    assert moved == [
        "AppointmentRegistration",
        "CancelRegistration",
        "QueryRegistration",
        "RecordHealthData",
        "ModifyRegistration",
    ]


def test_nothing_moves_past_another_thing_or_below_the_window() -> None:
    ranking = _ranking("AddMeeting", "QueryAgenda", "DeleteAlarm", "DeleteMeeting")
    # AddAgenda is not in the ranking; DeleteAlarm acts on another thing than AddMeeting
    assert by_action(ranking, "read", window=10) is ranking
    assert [c.id for c in by_action(ranking, "delete", window=10)] == [
        "DeleteMeeting",
        "AddMeeting",
        "QueryAgenda",
        "DeleteAlarm",
    ]
    assert by_action(ranking, "delete", window=3) is ranking  # DeleteMeeting is below the window


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (["PlaySong", "Music.PlayMovie", "AppointmentRegistration", "CancelRegistration"], {"play"}),
        (["performDataAnalysis", "perform_surgery", "runCampaign"], {"perform"}),
        (["GET /me/albums", "GET /users/album", "weather"], {"album"}),  # the last segment; plural "s" dropped
        (["", "...", "x"], set()),
    ],
)
def test_leading_words_are_the_words_that_begin_two_or_more_names(names: list[str], words: set[str]) -> None:
    assert leading_words(names) == frozenset(words)
    assert leading_words(names, min_count=1) >= frozenset(words)


def test_an_api_that_names_more_of_the_thing_counts_as_another_action_with_the_catalog_verbs() -> None:
    ranking = _ranking("AppointmentRegistration", "QueryRegistration", "CancelRegistration")
    verbs = frozenset({"query", "cancel"})
    assert [c.id for c in by_action(ranking, "delete", window=10, verbs=verbs)] == [
        "CancelRegistration",
        "AppointmentRegistration",
        "QueryRegistration",
    ]
    # without the catalog's verbs (or when "appointment" begins several names: a verb) it is not passed
    assert by_action(ranking, "delete", window=10)[0].id == "AppointmentRegistration"
    assert by_action(ranking, "delete", window=10, verbs=verbs | {"appointment"})[0].id == "AppointmentRegistration"


def test_an_api_of_another_tool_that_names_more_of_the_thing_is_not_passed() -> None:
    def spec(name: str, tool: str) -> ScoredTool:
        return ScoredTool(ToolSpec(id=f"{tool}/{name}", name=name, description="", tool=tool), score=1.0, rank=1)

    verbs = frozenset({"get"})
    other_tool = [spec("Playlist extraction", "Miza"), spec("Get playlist", "YT Music")]
    assert by_action(other_tool, "read", window=10, verbs=verbs) is other_tool
    same_tool = [spec("Playlist extraction", "YT Music"), spec("Get playlist", "YT Music")]
    assert [c.tool.name for c in by_action(same_tool, "read", window=10, verbs=verbs)] == [
        "Get playlist",
        "Playlist extraction",
    ]


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            ["AddMeeting", "QueryMeeting", "DeleteMeeting", "Meeting", "MeetingNotes", "GetWeather", "x", "Query"]
        ),
        unique=True,
    ),
    st.sampled_from(["create", "read", "update", "delete", "record"]),
    st.integers(1, 8),
    st.one_of(st.none(), st.sets(st.sampled_from(["meeting", "note", "add", "query"])).map(frozenset)),
)
def test_by_action_only_reorders_the_window(
    names: list[str], action: str, window: int, verbs: frozenset[str] | None
) -> None:
    ranking = _ranking(*names)
    out = by_action(ranking, action, window, verbs)
    assert sorted(c.id for c in out[:window]) == sorted(c.id for c in ranking[:window])
    assert out[window:] == ranking[window:]


def _meetings() -> Catalog:
    # One thing's four actions, described with nearly the same words: the one that reads meetings mentions the
    # calendar twice, so a plain ranking puts it first for any request about a meeting in the calendar.
    same = "a meeting in the user's calendar: title, time and place"
    return Catalog(
        [
            ToolSpec(id="QueryMeeting", name="QueryMeeting", description=same + "; the whole calendar"),
            *(ToolSpec(id=n, name=n, description=same) for n in ("AddMeeting", "ModifyMeeting", "DeleteMeeting")),
            ToolSpec(id="GetWeather", name="GetWeather", description="the weather forecast for a city"),
        ]
    )


def _engine(**params: object) -> Engine:
    return Engine.build(_meetings(), pipeline_config("bm25", stages=[{"type": "multi_intent", "params": params}]))


def test_the_request_verb_picks_the_meeting_action_and_the_trace_says_so() -> None:
    query = "please cancel my meeting in the calendar tomorrow"
    off = [h.id for h in _engine(actions=False).search(query, top_k=4)]
    assert off[0] == "QueryMeeting"
    detailed = _engine().search_detailed(query, top_k=4)
    assert detailed.results[0].id == "DeleteMeeting"
    assert detailed.trace["multi_intent"]["actions"] == {query: "delete"}


def test_each_request_of_a_message_picks_its_own_action() -> None:
    query = "Can you cancel the meeting in my calendar at noon? Also, show the weather forecast for Rome"
    # the three actions' APIs read the same: equal BM25 scores, ranked in catalog order (Add, Modify, Delete) ...
    off = [h.id for h in _engine(actions=False).search(query, top_k=5)]
    assert off[0] == "GetWeather" and off[1:] == ["QueryMeeting", "AddMeeting", "ModifyMeeting", "DeleteMeeting"]
    # ... until the first request's verb ("cancel") lifts DeleteMeeting over the other actions on meetings
    detailed = _engine().search_detailed(query, top_k=5)
    ids = [h.id for h in detailed.results]
    assert ids[0] == "GetWeather" and ids[1:3] == ["QueryMeeting", "DeleteMeeting"]
    assert detailed.trace["multi_intent"]["actions"] == {"Can you cancel the meeting in my calendar at noon?": "delete"}


def _registrations(engine_params: dict[str, object]) -> Engine:
    # An action-less API that names the thing twice over (the words of API-Bank's AppointmentRegistration) and
    # the thing's three actions, described alike.
    same = "an appointment registration with a doctor: patient name, date and doctor"
    catalog = Catalog(
        [
            ToolSpec(id="AppointmentRegistration", name="AppointmentRegistration", description=same + " appointment"),
            *(ToolSpec(id=n, name=n, description=same) for n in ("QueryRegistration", "CancelRegistration")),
        ]
    )
    return Engine.build(catalog, pipeline_config("bm25", stages=[{"type": "multi_intent", "params": engine_params}]))


def test_cancel_my_appointment_passes_the_registration_api_that_states_no_action() -> None:
    query = "Can you cancel my appointment with Dr. Chen?"
    assert _registrations({"action_compounds": False}).search(query, top_k=3)[0].id == "AppointmentRegistration"
    assert _registrations({}).search(query, top_k=3)[0].id == "CancelRegistration"


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=200))
def test_action_verbs_only_reorder_and_never_raise(text: str) -> None:
    assert request_action(text) in {None, "create", "read", "update", "delete", "record"}
    if not text.strip():
        return
    on = [h.id for h in _engine().search(text, top_k=10)]  # every match of the 5-API catalog: a permutation
    off = [h.id for h in _engine(actions=False).search(text, top_k=10)]
    assert sorted(on) == sorted(off) and len(set(on)) == len(on)
