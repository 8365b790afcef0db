"""Dependency edges backed by logged call traces (what an agent's call logs say about a candidate graph).

A call trace is the ordered list of API ids one task called. An edge ``source -> target`` (*target
depends on source*) is *supported* by a trace when both APIs occur in it and ``source`` is called before
``target`` (at some pair of positions; repeats allowed). Keeping only supported edges turns a candidate graph
(declared, mined or labelled) into the part that logged usage confirms, and lets a benchmark build the graph
from *other* queries' traces than the ones it evaluates (no label leakage). :func:`mine_trace_edges` builds a
graph from traces alone (every pair called in order; co-occurrence, not verified data flow).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toolrerank_plugins.records import Edge

TRACE_ORIGIN = "trace"


def _first_last(trace: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for pos, api in enumerate(trace):
        first.setdefault(api, pos)
        last[api] = pos
    return first, last


def trace_support(edges: Iterable[Edge], traces: Iterable[Sequence[str] | None]) -> dict[tuple[str, str], int]:
    """How many traces support each edge (``(source, target)`` -> count; every edge listed, zeros included).

    A trace supports ``source -> target`` when ``source`` is called before ``target`` somewhere in it: the
    first call of ``source`` precedes the last call of ``target``. Self-loops are never supported.
    ``None`` traces (queries without gold calls) are skipped.

    Example:
        >>> from toolrerank_plugins.records import Edge
        >>> trace_support([Edge("login", "pay"), Edge("pay", "login")], [["login", "pay"], ["login"]])
        {('login', 'pay'): 1, ('pay', 'login'): 0}
    """
    edge_list = list(edges)
    counts = {(e.source, e.target): 0 for e in edge_list}
    for trace in traces:
        if not trace:
            continue
        first, last = _first_last(trace)
        for source, target in counts:
            if source != target and source in first and target in last and first[source] < last[target]:
                counts[(source, target)] += 1
    return counts


def edges_from_traces(
    edges: Iterable[Edge], traces: Iterable[Sequence[str] | None], *, min_support: int = 1
) -> list[Edge]:
    """The edges (in their given order, records unchanged) supported by at least ``min_support`` traces.

    Args:
        edges: candidate dependency edges (e.g. ``catalog.edges``).
        traces: ordered API-id call sequences, one per logged task (``LabelledQuery.calls``).
        min_support: minimum number of supporting traces (>= 1).

    Raises:
        ValueError: ``min_support`` is below 1 (every edge would be kept, traces or not).

    Example:
        >>> from toolrerank_plugins.records import Edge
        >>> edges = [Edge("login", "pay"), Edge("search", "book")]
        >>> [(e.source, e.target) for e in edges_from_traces(edges, [["login", "pay"], ["book", "search"]])]
        [('login', 'pay')]
    """
    if min_support < 1:
        raise ValueError(f"min_support must be >= 1 (got {min_support}); to keep every edge, do not filter")
    edge_list = list(edges)
    support = trace_support(edge_list, traces)
    return [e for e in edge_list if support[(e.source, e.target)] >= min_support]


def mine_trace_edges(
    traces: Iterable[Sequence[str] | None], *, min_support: int = 1, origin: str = TRACE_ORIGIN
) -> list[Edge]:
    """Every ordered pair ``a -> b`` called in that order by at least ``min_support`` traces, as edges.

    The graph a user with call logs but no dependency labels would have: co-occurrence in order, not
    verified data flow (two independent APIs called in one task become an edge too; a pair called in both
    orders gives both directions). Supported in the sense of :func:`trace_support`, so
    ``edges_from_traces(mine_trace_edges(t), t)`` keeps every mined edge. Edges are sorted by
    (-support, source, target); ``weight`` stays 1.0.

    Example:
        >>> [(e.source, e.target) for e in mine_trace_edges([["login", "pay", "login"], ["login", "pay"]])]
        [('login', 'pay'), ('pay', 'login')]
    """
    if min_support < 1:
        raise ValueError(f"min_support must be >= 1 (got {min_support})")
    counts: dict[tuple[str, str], int] = {}
    for trace in traces:
        if not trace:
            continue
        first, last = _first_last(trace)
        for a, fa in first.items():
            for b, lb in last.items():
                if a != b and fa < lb:
                    counts[(a, b)] = counts.get((a, b), 0) + 1
    kept = sorted((pair for pair, n in counts.items() if n >= min_support), key=lambda p: (-counts[p], p))
    return [Edge(a, b, type="trace", origin=origin) for a, b in kept]
