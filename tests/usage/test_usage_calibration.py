"""The usage memory's gates: calibrated trust, request-by-request lookups, support of a request's vote."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.errors import PersistenceError
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
from toolrerank_plugins.usage import (
    CALIBRATION_FILE,
    RANK_BINS,
    Calibration,
    UsageMemoryConfig,
    UsageRecord,
)

SEND, FORECAST, GEOCODE, INBOX = (
    "Mail/PostBox/send_email",
    "Weather/SkyCast/forecast",
    "Maps/GeoFind/geocode",
    "Mail/PostBox/list_inbox",
)
TEMPLATE = "hello dear assistant could you kindly help me right away with this small thing {}"
TASKS = {
    SEND: ["send an email", "send the email to bob", "email my boss"],
    FORECAST: ["weather forecast for tomorrow", "forecast of the weather", "the weather forecast"],
    GEOCODE: ["geocode this address", "coordinates of an address", "address coordinates"],
    INBOX: ["list my inbox", "show the inbox", "inbox messages list"],
}
# Paraphrases whose words say nothing about the tool: only the history knows what served them.
CODED = {
    SEND: ["ping the blue bird", "ping the blue bird now", "please ping the blue bird", "ping that blue bird"],
    FORECAST: ["is it cold up north", "is it cold up north today", "cold up north or not", "so is it cold up north"],
    GEOCODE: ["pin the red house", "pin the red house please", "pin that red house", "go pin the red house"],
    INBOX: ["what did the owl bring", "what did the owl bring me", "the owl bring anything", "what did owl bring"],
}


def _learned(records, **cfg):
    engine = Engine.build(
        tiny_catalog(),
        EngineConfig(retriever="dense", stages=[{"type": "usage_memory", "params": cfg}]),
        embedder=FakeEmbedder(),
    )
    engine.learn(records)
    return engine


def _ids(engine, query, k=3):
    return [r.id for r in engine.search(query, top_k=k)]


# Similar-sounding requests (one long template) served by different tools, most of them by one tool: the
# neighbours of a new request are not trustworthy (Seal-Tools' situation: the same words, other tools).
UNTRUSTED = [
    UsageRecord(TEMPLATE.format(task), relevant=(tool,))
    for tool, tasks in TASKS.items()
    for task in tasks
    for _ in range(4 if tool == FORECAST else 1)
] + [UsageRecord(TEMPLATE.format(f"{t} number {i}"), relevant=(FORECAST,)) for i in range(6) for t in ["one"]]


def test_calibrated_memory_leaves_the_ranking_alone_when_its_votes_were_wrong_on_the_log():
    base = Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())
    query = TEMPLATE.format("send an email to alice")
    assert _ids(base, query, 1) == [SEND]
    weighted = _learned(UNTRUSTED, fusion="weighted")
    assert _ids(weighted, query, 1) == [FORECAST]  # the ungated vote of the crowd wins
    calibrated = _learned(UNTRUSTED)
    cal = calibrated.stages[0].calibration
    assert cal is not None and cal.fitted and cal.n_votes >= 20
    assert _ids(calibrated, query, 1) == [SEND]  # the ranking's right answer keeps its place


# Requests that share words with another tool's requests: some leave-one-out votes are wrong, most right.
CONFUSERS = [
    UsageRecord("ping the red house", relevant=(GEOCODE,)),
    UsageRecord("is the blue bird cold", relevant=(FORECAST,)),
    UsageRecord("what did the red house bring", relevant=(INBOX,)),
    UsageRecord("pin the owl up north", relevant=(SEND,)),
]
CODED_LOG = [UsageRecord(q, relevant=(tool,)) for tool, qs in CODED.items() for q in qs]


def test_calibrated_memory_promotes_what_served_similar_requests_when_that_was_right():
    base = Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())
    engine = _learned(CODED_LOG + CONFUSERS)
    cal = engine.stages[0].calibration
    assert cal.fitted and 0 < cal.n_right < cal.n_votes
    for tool, query in [
        (SEND, "ping the blue bird tonight"),
        (GEOCODE, "pin the red house today"),
        (FORECAST, "is it cold up north now"),
        (INBOX, "what did the owl bring today"),
    ]:
        assert _ids(base, query, 1) != [tool]
        assert _ids(engine, query, 1) == [tool]


def test_each_request_of_a_message_finds_its_own_past_requests():
    query = "Please ping the blue bird tonight. Also, is it cold up north this week?"
    res = _learned(CODED_LOG).search_detailed(query, top_k=2)
    assert len(res.trace["usage_memory"]["requests"]) == 2
    assert {r.id for r in res.results} == {SEND, FORECAST}
    split_votes = res.trace["usage_memory"]["votes"]
    whole_votes = _learned(CODED_LOG, split_requests=False).search_detailed(query).trace["usage_memory"]["votes"]
    assert split_votes[FORECAST] > 5 * whole_votes.get(FORECAST, 0.0)  # the whole message is far from both


def test_a_request_votes_only_for_tools_two_past_requests_agree_on():
    # One (perhaps wrong) record is the only past request like the message's second request.
    log = [*CODED_LOG, UsageRecord("zebra quantum saxophone", relevant=("Auth/Keyring/logout",))]
    query = (
        "Please ping the blue bird tonight when you can, thank you so much my friend. "
        "Also, zebra quantum saxophone again?"
    )
    strict = _learned(log).search_detailed(query, top_k=1)
    loose = _learned(log, part_support=1).search_detailed(query, top_k=1)
    assert loose.results[0].id == "Auth/Keyring/logout"
    assert strict.results[0].id == SEND and "Auth/Keyring/logout" not in strict.trace["usage_memory"]["votes"]


def test_request_lookups_cost_no_encoding_when_multi_intent_searched_the_requests():
    query = "Please ping the blue bird tonight. Also, is it cold up north this week?"
    calls = []
    for log in ([], CODED_LOG):
        emb = FakeEmbedder()
        engine = Engine.build(
            tiny_catalog(), EngineConfig(retriever="hybrid", stages=[{"type": "multi_intent"}]), embedder=emb
        )
        if log:
            engine.learn(log)
        engine.search("a warm up request", top_k=3)
        before = emb.texts_encoded
        res = engine.search_detailed(query, top_k=3)
        calls.append(emb.texts_encoded - before)
    assert res.trace["usage_memory"]["requests"]  # the memory looked the message up request by request...
    assert calls[1] == calls[0]  # ...with the vectors the first stage and multi_intent had just computed


def test_calibration_is_saved_and_loads_back_and_a_corrupt_one_is_refused(tmp_path):
    log = CODED_LOG + CONFUSERS
    engine = _learned(log)
    before = [r.to_dict() for r in engine.search("ping the blue bird tonight", top_k=5)]
    engine.save(tmp_path / "e")
    loaded = Engine.load(tmp_path / "e", embedder=FakeEmbedder())
    assert loaded.stages[0].calibration == engine.stages[0].calibration
    assert [r.to_dict() for r in loaded.search("ping the blue bird tonight", top_k=5)] == before
    emb = FakeEmbedder()
    again = Engine.load(tmp_path / "e", embedder=emb)
    calls = emb.texts_encoded
    again.learn(log[:3])  # nothing new: no search again for the sampled records, nothing encoded
    assert emb.texts_encoded == calls
    files = list(version_dir(tmp_path / "e").rglob(CALIBRATION_FILE))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    data["coef"] = [1.0, 2.0]
    files[0].write_text(json.dumps(data))
    with pytest.raises(PersistenceError, match="calibration"):
        Engine.load(tmp_path / "e", embedder=FakeEmbedder(), verify=False)


def test_huge_integers_in_the_calibration_file_are_a_persistence_error(tmp_path):
    # json.loads raises a bare ValueError for an integer over 4,300 digits
    _learned(CODED_LOG + CONFUSERS).save(tmp_path / "e")
    (file,) = version_dir(tmp_path / "e").rglob(CALIBRATION_FILE)
    file.write_text('{"big": 1' + "0" * 5000 + "}")
    with pytest.raises(PersistenceError, match="corrupt usage memory calibration"):
        Engine.load(tmp_path / "e", embedder=FakeEmbedder(), verify=False)


def test_without_evidence_only_a_word_for_word_repeat_moves_a_tool():
    base = Engine.build(tiny_catalog(), pipeline_config("dense"), embedder=FakeEmbedder())
    engine = _learned([UsageRecord("mail my landlord about the rent", relevant=(SEND,))])
    cal = engine.stages[0].calibration
    assert not cal.fitted and cal.n_votes == 0  # one record: no leave-one-out vote, no evidence
    assert _ids(base, "mail my landlord about the rent", 1) != [SEND]
    res = engine.search_detailed("mail my landlord about the rent", top_k=1)
    assert res.results[0].id == SEND and res.trace["usage_memory"]["repeat"]  # seen before: its tool first
    query = "email my landlord about the rent tomorrow"
    assert engine.search_detailed(query).trace["usage_memory"]["similar"]  # a similar past request...
    assert _ids(engine, query, 5) == _ids(base, query, 5)  # ...that moves nothing without evidence


@FUZZ
@pytest.mark.fuzz
@given(
    st.lists(
        st.tuples(
            st.permutations(list(range(12))),
            st.dictionaries(st.integers(0, 14), st.floats(0.0, 1.0), max_size=6),
            st.sets(st.integers(0, 14), min_size=1, max_size=3),
        ),
        min_size=3,
        max_size=30,
    )
)
def test_without_votes_the_calibrated_order_is_the_rankings_order(samples):
    """Whatever the log taught, tools without votes keep the ranking's order (the rank's weight is >= 0)."""
    data = [
        ([f"t{i}" for i in ranking], {f"t{t}": (v, 0.0) for t, v in votes.items()}, {f"t{t}" for t in served})
        for ranking, votes, served in samples
    ]
    cal = Calibration.fit(data, UsageMemoryConfig(min_votes=1), len(data))
    if not cal.fitted:
        return
    probs = [cal.probability(r, 0.0) for r in range(1, 60)]
    assert all(a >= b for a, b in zip(probs, probs[1:]))
    assert len(cal.rank_precision) == len(RANK_BINS)
    assert all(np.isfinite(cal.coef))
