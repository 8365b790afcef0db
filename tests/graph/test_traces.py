from __future__ import annotations

import pytest

from toolrerank_plugins.graph.traces import edges_from_traces, mine_trace_edges, trace_support
from toolrerank_plugins.records import Edge

EDGES = [
    Edge("token", "delete", origin="derived"),
    Edge("search", "book"),
    Edge("book", "search"),
    Edge("token", "token"),
    Edge("geo", "weather"),
]


def _pairs(edges: list[Edge]) -> list[tuple[str, str]]:
    return [(e.source, e.target) for e in edges]


def test_only_edges_called_in_order_are_kept() -> None:
    traces = [["token", "x", "delete"], ["book", "search"]]
    assert _pairs(edges_from_traces(EDGES, traces)) == [("token", "delete"), ("book", "search")]


def test_edge_records_are_returned_unchanged() -> None:
    (kept,) = edges_from_traces(EDGES, [["token", "delete"]])
    assert kept is EDGES[0]
    assert kept.origin == "derived"


def test_repeated_calls_count_any_earlier_occurrence() -> None:
    # search is called both before and after book, so both directions are supported.
    support = trace_support(EDGES, [["search", "book", "search"]])
    assert support[("search", "book")] == 1
    assert support[("book", "search")] == 1


def test_self_loop_and_missing_api_are_not_supported() -> None:
    support = trace_support(EDGES, [["token", "token"], ["geo"], None, []])
    assert support[("token", "token")] == 0
    assert support[("geo", "weather")] == 0


def test_min_support_counts_traces_not_occurrences() -> None:
    traces = [["token", "delete", "token", "delete"], ["geo", "weather"], ["geo", "weather"]]
    assert _pairs(edges_from_traces(EDGES, traces, min_support=2)) == [("geo", "weather")]
    assert trace_support(EDGES, traces)[("token", "delete")] == 1


def test_traces_can_be_a_one_shot_iterator() -> None:
    traces = iter([["geo", "weather"]])
    assert _pairs(edges_from_traces(EDGES, traces)) == [("geo", "weather")]


def test_min_support_below_one_raises() -> None:
    with pytest.raises(ValueError, match="min_support"):
        edges_from_traces(EDGES, [], min_support=0)


def test_mined_edges_are_ordered_pairs_sorted_by_support() -> None:
    traces = [["geo", "weather", "book"], ["geo", "weather"], ["book", "geo"]]
    mined = mine_trace_edges(traces)
    assert _pairs(mined) == [("geo", "weather"), ("book", "geo"), ("geo", "book"), ("weather", "book")]
    assert {e.origin for e in mined} == {"trace"}
    assert _pairs(mine_trace_edges(traces, min_support=2)) == [("geo", "weather")]


def test_mined_edges_are_all_supported_and_skip_self_pairs() -> None:
    traces = [["a", "a", "b"], ["b", "c"], None]
    mined = mine_trace_edges(traces)
    assert ("a", "a") not in _pairs(mined)
    assert edges_from_traces(mined, traces) == mined
