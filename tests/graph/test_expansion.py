from __future__ import annotations

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.expansion import ExpansionConfig, expand_prerequisites
from toolrerank_plugins.graph.tool_graph import ToolGraph
from toolrerank_plugins.records import Edge, ScoredTool, ToolSpec, renumber

IDS = ("delete", "other1", "other2", "token", "validate", "x")


def _setup(edges: list[Edge]) -> tuple[Catalog, ToolGraph]:
    cat = Catalog([ToolSpec(i, i, i) for i in IDS])
    g = ToolGraph.empty(cat)
    g.add_edges(edges)
    return cat, g


def _ranking(cat: Catalog, ids: list[str]) -> list[ScoredTool]:
    return renumber([ScoredTool(cat[i], 1.0 - 0.1 * n, 0, {"dense": 1.0 - 0.1 * n}) for n, i in enumerate(ids)])


def _ids(items: list[ScoredTool]) -> list[str]:
    return [s.id for s in items]


def test_prerequisite_inserted_right_after_dependent_primary_stays_first() -> None:
    cat, g = _setup([Edge("token", "delete")])
    out, ins = expand_prerequisites(
        _ranking(cat, ["delete", "other1", "other2"]), g, cat, ExpansionConfig(enabled=True)
    )
    assert _ids(out) == ["delete", "token", "other1", "other2"]
    assert ins == [
        {
            "id": "token",
            "prerequisite_of": "delete",
            "from_rank": None,
            "to_rank": 2,
            "origin": "labelled",
            "weight": 1.0,
        }
    ]
    assert out[1].score == out[0].score  # non-increasing scores


def test_lower_ranked_prerequisite_moves_up_and_higher_one_stays() -> None:
    cat, g = _setup([Edge("token", "delete"), Edge("other1", "other2")])
    out, ins = expand_prerequisites(
        _ranking(cat, ["delete", "other1", "other2", "token"]), g, cat, ExpansionConfig(enabled=True)
    )
    assert _ids(out) == ["delete", "token", "other1", "other2"]
    assert [i["from_rank"] for i in ins] == [4]


def test_limits_weight_origin_and_disabled() -> None:
    cat, g = _setup([Edge("token", "delete", weight=0.4), Edge("validate", "other1"), Edge("x", "other2")])
    base = _ranking(cat, ["delete", "other1", "other2"])
    assert _ids(expand_prerequisites(base, g, cat, ExpansionConfig())[0]) == _ids(base)  # disabled by default
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, max_inserted=1))
    assert _ids(out) == ["delete", "other1", "validate", "other2"]  # weight 0.4 < 0.5 skipped; cap 1
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, origins=["declared"]))
    assert _ids(out) == _ids(base)
    out, _ = expand_prerequisites(base, g, cat, ExpansionConfig(enabled=True, window=1, min_weight=0.3))
    assert _ids(out) == ["delete", "token", "other1", "other2"]


def test_cycle_does_not_loop() -> None:
    cat, g = _setup([Edge("delete", "token"), Edge("token", "delete")])
    out, _ = expand_prerequisites(
        _ranking(cat, ["delete", "other1"]), g, cat, ExpansionConfig(enabled=True, max_inserted=5)
    )
    assert _ids(out) == ["delete", "token", "other1"]
