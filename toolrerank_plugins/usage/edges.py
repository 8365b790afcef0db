"""Co-usage edges: tools called in order for one request, by enough requests of the usage memory, become
weighted catalog edges (``type="co_usage"``, ``origin="usage"``) that TGR's graph and its prerequisite
expansion follow (mined with :func:`~toolrerank_plugins.graph.traces.mine_trace_edges`)."""

from __future__ import annotations

from collections import Counter

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.traces import mine_trace_edges
from toolrerank_plugins.records import Edge
from toolrerank_plugins.usage.memory import UsageMemory

#: ``origin`` of the co-usage edges :meth:`Engine.learn` adds to the catalog (TGR reads catalog edges).
USAGE_EDGE_ORIGIN = "usage"


def mine_co_usage_edges(memory: UsageMemory, catalog: Catalog, min_support: int) -> list[Edge]:
    """Tools called in order for one request by at least ``min_support`` requests, as catalog edges
    ``a -> b`` (b uses a first) weighted by ``support / uses of b`` (how often b's uses followed a); only
    edges between tools of ``catalog``."""
    mined = mine_trace_edges(memory.order, min_support=min_support, origin=USAGE_EDGE_ORIGIN)
    if not mined:
        return []
    support: Counter[tuple[str, str]] = Counter()
    for seq in memory.order:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for pos, t in enumerate(seq):
            first.setdefault(t, pos)
            last[t] = pos
        for a, fa in first.items():
            for b, lb in last.items():
                if a != b and fa < lb:
                    support[(a, b)] += 1
    uses = memory.tool_counts
    out = []
    for e in mined:
        if e.source in catalog and e.target in catalog:
            w = min(1.0, support[(e.source, e.target)] / max(uses[e.target], 1))
            out.append(Edge(e.source, e.target, type="co_usage", origin=USAGE_EDGE_ORIGIN, weight=round(w, 4)))
    return out
