"""Usage records, the log format (compatible with queries.jsonl) and the recorder."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins.loaders import load_queries
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.usage import (
    UsageLogError,
    UsageRecord,
    UsageRecorder,
    as_usage_records,
    read_usage_log,
    records_to_queries,
    write_usage_log,
)


def test_record_defaults_relevant_to_successful_calls_and_a_stable_id():
    r = UsageRecord("weather in Oslo", calls=("geo", "forecast", "forecast"), failed=("geo",), ts=1.0)
    assert r.relevant == ("forecast",) and r.served == ("forecast",) and r.order == ("forecast", "forecast")
    assert (
        r.id.startswith("sha256:") and r.id == UsageRecord("weather in Oslo", calls=r.calls, failed=r.failed, ts=1.0).id
    )
    assert UsageRecord("x", relevant=("a",), success=False).served == ()


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        ({"query": 3}, "'query' must be a string"),
        ({"query": "q", "relevant": "a"}, "'relevant' must be a list"),
        ({"query": "q", "relevant": ("a", 2)}, "non-empty tool id"),
        ({"query": "q", "success": "yes"}, "'success' must be true or false"),
        ({"query": "q", "ts": float("nan")}, "'ts' must be a number"),
        ({"query": "bad \ud800"}, "lone surrogate"),
    ],
)
def test_invalid_records_raise_naming_the_field(kwargs, problem):
    with pytest.raises(UsageLogError, match=problem):
        UsageRecord(**kwargs)


def test_log_is_readable_as_queries_jsonl_and_back(tmp_path):
    path = tmp_path / "usage.jsonl"
    records = [
        UsageRecord("send mail to Ann", calls=("Mail/PostBox/send_email",), ts=5.0),
        UsageRecord("log in then change email", calls=("Auth/Keyring/login", "Auth/Keyring/update_email")),
    ]
    write_usage_log(records, path)
    assert read_usage_log(path).records == records
    queries = load_queries(path)  # the benchmark loader reads a usage log
    assert [q.relevant for q in queries] == [r.relevant for r in records]
    assert queries[1].calls == ("Auth/Keyring/login", "Auth/Keyring/update_email")
    # and a queries.jsonl is a usage log
    again = as_usage_records(queries)
    assert [(r.query, r.relevant, r.calls) for r in again] == [(r.query, r.relevant, r.calls) for r in records]


def test_records_to_queries_keeps_served_known_tools_in_call_order():
    recs = [
        UsageRecord("a then b", calls=("x/a", "ghost", "x/b"), failed=("ghost",)),
        UsageRecord("failed", relevant=("x/a",), success=False),
        UsageRecord("only ghosts", relevant=("ghost",)),
    ]
    qs = records_to_queries(recs, catalog={"x/a", "x/b"})
    assert qs == [LabelledQuery(recs[0].id, "a then b", ("x/a", "x/b"), None, None, ("x/a", "x/b"))]


def test_malformed_line_names_the_line_or_is_skipped_and_counted(tmp_path):
    path = tmp_path / "log.jsonl"
    good = json.dumps(UsageRecord("ok", relevant=("a",)).to_dict())
    path.write_text(good + "\n{not json\n" + json.dumps({"query": "no tools"}) + "\n\n" + good + "\n", encoding="utf-8")
    with pytest.raises(UsageLogError, match=r"log\.jsonl:2: not a JSON object"):
        read_usage_log(path)
    log = read_usage_log(path, on_error="skip")
    assert len(log.records) == 2 and log.n_skipped == 2
    assert "log.jsonl:3" in log.problems[1] and "needs 'relevant' or 'calls'" in log.problems[1]


def test_split_filter(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text(
        "\n".join(json.dumps({"query": q, "relevant": ["a"], "split": s}) for q, s in [("1", "train"), ("2", "dev")]),
        encoding="utf-8",
    )
    assert [r.query for r in read_usage_log(tmp_path, split="train").records] == ["1"]


def test_recorder_appends_from_many_threads_and_forgets_atomically(tmp_path):
    rec = UsageRecorder(tmp_path / "logs" / "usage.jsonl")

    def work(k: int) -> None:
        for i in range(25):
            rec.record(f"request {k}-{i}", calls=[f"t{i % 3}"], ts=float(i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = rec.read().records
    assert len(records) == 200 and len({r.id for r in records}) == 200
    with (tmp_path / "logs" / "usage.jsonl").open("a") as fh:
        fh.write("{broken line\n")
    # the victim must not be one of thread 3's records, which are forgotten next (the order is the threads')
    victim = next(r for r in records[17:] if not r.query.startswith("request 3-"))
    assert rec.forget(victim.id) == 1
    assert rec.forget(lambda r: r.query.startswith("request 3-")) == 25
    log = rec.read(on_error="skip")
    assert len(log.records) == 174 and victim.id not in {r.id for r in log.records}
    assert log.n_skipped == 1  # a line that is not a record is kept as it was
    assert not [p for p in (tmp_path / "logs").iterdir() if p.name.endswith(".tmp")]
    assert rec.forget(["nope"]) == 0


def test_recorder_success_defaults():
    r = UsageRecord("q", calls=("a",), failed=("a",))
    assert r.relevant == ()


ids = st.text(alphabet="abcxyz/_", min_size=1, max_size=6)
texts = st.text(min_size=0, max_size=40).filter(lambda s: not any("\ud800" <= c <= "\udfff" for c in s))


@st.composite
def usage_records(draw):
    calls = draw(st.one_of(st.none(), st.lists(ids, max_size=5)))
    failed = draw(st.lists(st.sampled_from(calls), max_size=2)) if calls else []
    return UsageRecord(
        draw(texts),
        relevant=tuple(draw(st.lists(ids, max_size=4))),
        calls=None if calls is None else tuple(calls),
        failed=tuple(failed),
        success=draw(st.booleans()),
        ts=draw(st.one_of(st.none(), st.floats(0, 2e9))),
    )


@pytest.mark.fuzz
@FUZZ
@given(st.lists(usage_records(), max_size=8))
def test_generated_records_round_trip_through_jsonl(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("log") / "usage.jsonl"
    write_usage_log(records, path)
    assert read_usage_log(path).records == records
    assert [q.relevant for q in load_queries(path)] == [r.relevant for r in records]


HUGE_INT_TEXT = st.integers(min_value=309, max_value=6000).map(lambda digits: "1" + "0" * digits)


@pytest.mark.fuzz
@FUZZ
@given(digits=st.integers(min_value=309, max_value=4299))
def test_generated_timestamps_too_large_for_a_float_are_a_usage_log_error(digits):
    # math.isfinite(10**400) raised OverflowError
    with pytest.raises(UsageLogError, match="'ts' must be a number"):
        UsageRecord("q", relevant=("a",), ts=10**digits)


@pytest.mark.fuzz
@FUZZ
@given(big=HUGE_INT_TEXT, field=st.sampled_from(["ts", "x"]))
def test_generated_huge_integers_in_a_log_line_name_the_line_or_are_skipped(tmp_path_factory, big, field):
    # a 309+ digit ts raised OverflowError; a 4,300+ digit integer anywhere a bare ValueError from json.loads
    path = tmp_path_factory.mktemp("log") / "log.jsonl"
    good = json.dumps(UsageRecord("ok", relevant=("a",)).to_dict())
    path.write_text(f'{good}\n{{"query": "q", "relevant": ["a"], "{field}": {big}}}\n{good}\n', encoding="utf-8")
    if field == "x" and len(big) <= 4300:
        assert len(read_usage_log(path).records) == 3  # an unknown key is ignored; the number is fine
        return
    with pytest.raises(UsageLogError, match=r"log\.jsonl:2: "):
        read_usage_log(path)
    log = read_usage_log(path, on_error="skip")
    assert len(log.records) == 2 and log.n_skipped == 1 and "log.jsonl:2" in log.problems[0]
    recorder = UsageRecorder(path)  # forget keeps the line it cannot read, as it keeps other malformed lines
    assert recorder.forget(UsageRecord("ok", relevant=("a",)).id) == 2
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1


def test_a_log_path_with_a_nul_byte_is_a_usage_log_error(tmp_path):
    # open() raised a bare "ValueError: embedded null byte"
    with pytest.raises(UsageLogError, match="null byte"):
        read_usage_log(str(tmp_path / "a\x00b.jsonl"))
    with pytest.raises(UsageLogError, match="NUL byte"):
        write_usage_log([UsageRecord("q", relevant=("a",))], str(tmp_path / "a\x00b.jsonl"))
