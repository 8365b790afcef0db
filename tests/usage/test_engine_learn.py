"""Engine.learn: seen tools, the usage memory stage, co-usage edges, persistence, identity without a log."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog
from toolrerank_plugins.usage import USAGE_EDGE_ORIGIN, UsageLogError, UsageRecord

SEND = "Mail/PostBox/send_email"
LOGIN, UPDATE = "Auth/Keyring/login", "Auth/Keyring/update_email"
QUERIES = [
    "mail my landlord about the rent",
    "change the email address of my account",
    "what is the weather tomorrow",
    "where is 10 Main Street",
    "read my inbox",
]

LOG = [
    UsageRecord("mail my landlord about the rent", relevant=(SEND,)),
    UsageRecord("write to my landlord about the rent", relevant=(SEND,)),
    UsageRecord("switch my account to a new email", calls=(LOGIN, UPDATE)),
    UsageRecord("my account needs a new email address", calls=(LOGIN, UPDATE)),
    UsageRecord("tell my landlord", relevant=("Nowhere/ghost",)),
]


def _engine(retriever="dense", stages=()):
    return Engine.build(tiny_catalog(), EngineConfig(retriever=retriever, stages=list(stages)), embedder=FakeEmbedder())


def _dump(engine, queries=QUERIES, top_k=5):
    return [r.to_dict()["results"] for r in engine.search_batch_detailed(queries, top_k)]


def test_learn_marks_seen_tools_adds_a_memory_stage_and_co_usage_edges():
    engine = _engine()
    assert not engine.catalog.seen_tools and not engine.stages
    report = engine.learn(LOG)
    assert [s.name for s in engine.stages] == ["usage_memory"]
    assert [s.type for s in engine.config.stages] == ["usage_memory"]
    assert engine.catalog.seen_tools == {"Mail/PostBox", "Auth/Keyring"}
    assert engine.catalog.is_seen(SEND) and not engine.catalog.is_seen("Weather/SkyCast/forecast")
    usage = [e for e in engine.catalog.edges if e.origin == USAGE_EDGE_ORIGIN]
    assert [(e.source, e.target, e.type, e.weight) for e in usage] == [(LOGIN, UPDATE, "co_usage", 1.0)]
    assert report["learned"] == 4 and report["memory_size"] == 4
    assert report["unknown_tool_ids"] == 1 and report["unknown_tools"] == ["Nowhere/ghost"]
    assert report["skipped_no_known_tool"] == 1 and report["seen_tools_added"] == 2


def test_memory_brings_the_tool_that_served_a_similar_request_to_the_top():
    engine = _engine()
    before = [r.id for r in engine.search("mail my landlord about the rent", top_k=3)]
    assert before[0] != SEND
    engine.learn(LOG)
    res = engine.search_detailed("email my landlord about the rent", top_k=3)
    assert res.results[0].id == SEND
    trace = res.trace["usage_memory"]
    assert trace["similar"][0]["request"] in {LOG[0].query, LOG[1].query}
    assert trace["similar"][0]["tools"] == [SEND] and trace["votes"][SEND] > 0
    res = engine.search_detailed("my account needs a new email address", top_k=3)
    assert res.trace["usage_memory"]["used_with"][UPDATE] == [LOGIN]


def test_no_log_and_irrelevant_memory_change_nothing_byte_for_byte():
    base = _engine("hybrid")
    with_memory = _engine("hybrid")
    with_memory.learn([])  # an empty log: the memory stage is there, and empty
    assert with_memory.stages and len(with_memory.stages[0].memory) == 0
    assert _dump(with_memory) == _dump(base)
    unrelated = _engine("hybrid")
    unrelated.learn([UsageRecord("zebra quantum saxophone", relevant=("Maps/GeoFind/geocode",))])
    assert _dump(unrelated) == _dump(base)  # no similar past request: the ranking is untouched
    assert unrelated.search_detailed(QUERIES[0]).trace["usage_memory"] == {"similar": []}


def test_learn_is_incremental_and_skips_duplicates():
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=emb)
    engine.learn(LOG[:2])
    before = emb.texts_encoded
    report = engine.learn(LOG[:3])  # two already known: only one new request is encoded
    assert report["skipped_duplicate"] == 2 and report["learned"] == 1 and report["memory_size"] == 3
    assert emb.texts_encoded - before == 1


def test_the_query_is_encoded_once_per_search():
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=emb)
    engine.learn(LOG)
    engine.search("a brand new request about rent", top_k=3)
    calls = emb.calls
    engine.search("another brand new request", top_k=3)
    assert emb.calls - calls == 1  # the stage reuses the first stage's query vector


def test_memory_is_saved_with_the_engine_and_loads_back(tmp_path):
    engine = _engine()
    engine.learn(LOG)
    engine.save(tmp_path / "e")
    folder = version_dir(tmp_path / "e") / "stages" / "00-usage_memory"
    meta = json.loads((folder / "usage_memory.json").read_text())
    assert meta["n"] == 4 and np.load(folder / "vectors.npy", allow_pickle=False).shape == (4, 128)
    loaded = Engine.load(tmp_path / "e", embedder=FakeEmbedder())
    assert _dump(loaded) == _dump(engine)
    assert loaded.catalog.seen_tools == engine.catalog.seen_tools
    assert [e for e in loaded.catalog.edges if e.origin == "usage"] == [
        e for e in engine.catalog.edges if e.origin == "usage"
    ]
    loaded.learn([UsageRecord("forecast for Oslo", relevant=("Weather/SkyCast/forecast",))])
    assert len(loaded.stages[0].memory) == 5


def test_corrupt_memory_file_is_a_persistence_error(tmp_path):
    from toolrerank_plugins.errors import PersistenceError

    engine = _engine()
    engine.learn(LOG)
    engine.save(tmp_path / "e")
    f = version_dir(tmp_path / "e") / "stages" / "00-usage_memory" / "usage_memory.json"
    f.write_text('{"format": 1, "requests": [{"id": 3}]}')
    with pytest.raises(PersistenceError, match="usage_memory.json"):
        Engine.load(tmp_path / "e", embedder=FakeEmbedder(), verify=False)


def test_a_vectors_file_whose_header_numpy_cannot_tokenize_is_a_persistence_error(tmp_path):
    # numpy parses a .npy header with tokenize: an unterminated triple quote is a tokenize.TokenError, which no
    # except clause for ValueError or SyntaxError catches
    from toolrerank_plugins.errors import PersistenceError

    engine = _engine()
    engine.learn(LOG)
    engine.save(tmp_path / "e")
    f = version_dir(tmp_path / "e") / "stages" / "00-usage_memory" / "vectors.npy"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 128), }" + b'"""'
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    f.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(4 * 128 * 4))
    with pytest.raises(PersistenceError, match=r"vectors\.npy: missing or corrupt vectors \(TokenError"):
        Engine.load(tmp_path / "e", embedder=FakeEmbedder(), verify=False)


def test_huge_integers_in_the_memory_file_are_a_persistence_error(tmp_path):
    # json.loads raises a bare ValueError for an integer over 4,300 digits
    from toolrerank_plugins.errors import PersistenceError

    engine = _engine()
    engine.learn(LOG)
    engine.save(tmp_path / "e")
    f = version_dir(tmp_path / "e") / "stages" / "00-usage_memory" / "usage_memory.json"
    f.write_text('{"big": 1' + "0" * 5000 + "}")
    with pytest.raises(PersistenceError, match=r"usage_memory\.json: corrupt usage memory \(not valid JSON"):
        Engine.load(tmp_path / "e", embedder=FakeEmbedder(), verify=False)


def test_forget_removes_requests_from_the_memory():
    engine = _engine()
    engine.learn(LOG)
    report = engine.learn([], forget=[LOG[0].id, LOG[1].id])
    assert report["forgotten"] == 2 and report["memory_size"] == 2
    assert all(
        LOG[0].query not in s["request"] for s in engine.search_detailed(LOG[0].query).trace["usage_memory"]["similar"]
    )


def test_a_bad_record_leaves_the_engine_as_it_was():
    engine = _engine()
    before = _dump(engine)
    with pytest.raises(UsageLogError):
        engine.learn([LOG[0].to_dict(), {"query": "no tools"}])
    with pytest.raises(TypeError):
        engine.learn("mail my landlord")
    assert not engine.stages and not engine.catalog.seen_tools and _dump(engine) == before


def test_async_twin_gives_the_same_results():
    engine = _engine("hybrid")
    engine.learn(LOG)
    sync = [[r.id for r in rs] for rs in engine.search_batch(QUERIES, 5)]
    async_ = [[r.id for r in rs] for rs in asyncio.run(engine.asearch_batch(QUERIES, 5))]
    assert sync == async_


def test_co_usage_edges_feed_tgr_expansion():
    tgr = StageSpec(type="tgr", params={"sources": ["declared"], "propagate": False, "expansion": {"enabled": True}})
    catalog = tiny_catalog()
    # without declared edges, TGR knows nothing; the log teaches it that geocode comes before the forecast
    bare = type(catalog)(list(catalog), source="bare")
    engine = Engine.build(bare, EngineConfig(retriever="dense", stages=[tgr]), embedder=FakeEmbedder())
    geo, fc = "Maps/GeoFind/geocode", "Weather/SkyCast/forecast"
    log = [UsageRecord(f"forecast at address {i}", calls=(geo, fc)) for i in range(2)]
    engine.learn(log)
    assert engine.stages[0].graph.graph.has_edge(geo, fc)
    res = engine.search_detailed("weather forecast tomorrow", top_k=3)
    ids = [r.id for r in res.results]
    assert fc in ids and geo in ids and ids.index(geo) == ids.index(fc) + 1


def test_seen_tools_reach_toolrerank_truncation():
    engine = _engine("dense", [StageSpec(type="toolrerank", params={"m_s": 2, "m_u": 10, "classification": "single"})])
    assert not engine.stages[0].seen_tools(engine.context)
    engine.learn(LOG)
    assert {"Mail/PostBox", "Auth/Keyring"} <= engine.stages[0].seen_tools(engine.context)


@pytest.mark.fuzz
@FUZZ
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=30).filter(lambda s: not any("\ud800" <= c <= "\udfff" for c in s)),
            st.lists(st.sampled_from([*tiny_catalog().ids, "ghost/a", "ghost/b"]), max_size=4),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_generated_logs_never_lose_records_over_unknown_ids(items):
    engine = _engine()
    records = [UsageRecord(q, calls=tuple(c), success=ok) for q, c, ok in items]
    report = engine.learn(records)
    known = set(tiny_catalog().ids)
    learned, unknown, ids = 0, 0, set()
    for r in records:
        if r.id in ids:
            continue
        ids.add(r.id)
        if not r.query.strip() or not r.success:
            continue
        unknown += sum(t not in known for t in r.served)
        learned += any(t in known for t in r.served)
    assert report["learned"] == learned == len(engine.stages[0].memory)
    assert report["unknown_tool_ids"] == unknown
    for res in engine.search_batch([r.query for r in records if r.query.strip()][:3] or ["x"], 3):
        assert all(hit.id in known for hit in res)
