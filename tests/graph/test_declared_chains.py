"""Declared dependencies followed to the end with a budget scaled to the caller's top_k (issue 29 item 3)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.graph.builder import build_graph
from toolrerank_plugins.graph.expansion import ExpansionConfig, chain_budget, expand_prerequisites
from toolrerank_plugins.graph.tool_graph import CATALOG_ORIGIN, ToolGraph
from toolrerank_plugins.records import Edge, ScoredTool, ToolSpec, renumber
from toolrerank_plugins.stages import Stage, StageContext, StageSpec, StageType, register_stage_type

CHAIN = ("find_workspace", "list_projects", "list_boards", "list_tasks", "delete_task")
OTHERS = tuple(f"other{i}" for i in range(12))


def _catalog(origin: str = "labelled", extra: tuple[Edge, ...] = ()) -> Catalog:
    specs = [ToolSpec(i, i, i.replace("_", " ")) for i in (*CHAIN, *OTHERS)]
    edges = [Edge(a, b, origin=origin) for a, b in zip(CHAIN, CHAIN[1:])]
    return Catalog(specs, edges=[*edges, *extra])


def _graph(cat: Catalog) -> ToolGraph:
    return build_graph(cat)


def _ranking(cat: Catalog, ids: list[str]) -> list[ScoredTool]:
    return renumber([ScoredTool(cat[i], 1.0 - 0.01 * n, 0, {"first": 1.0 - 0.01 * n}) for n, i in enumerate(ids)])


def _ids(items: list[ScoredTool]) -> list[str]:
    return [s.id for s in items]


# chains at every top_k (the mechanism); the default follows them from top_k 10 up (test_below_chain_min_top_k...)
CHAINS = ExpansionConfig(
    enabled=True, window=2, max_inserted=2, min_weight=1.0, declared_chains=True, chain_min_top_k=1
)


def test_graph_keeps_the_catalog_origin_of_declared_edges(tmp_path: Any) -> None:
    g = _graph(_catalog(extra=(Edge("other0", "other1", origin="derived"),)))
    assert g.graph.edges["list_tasks", "delete_task"][CATALOG_ORIGIN] == "labelled"
    assert g.graph.edges["other0", "other1"][CATALOG_ORIGIN] == "derived"
    assert g.graph.edges["other0", "other1"]["origin"] == "declared"
    g.save(tmp_path / "g.json")
    assert ToolGraph.load(tmp_path / "g.json").graph.edges["other0", "other1"][CATALOG_ORIGIN] == "derived"


def test_chain_followed_to_the_end_after_the_kept_targets() -> None:
    cat = _catalog()
    ranking = _ranking(cat, ["delete_task", *OTHERS])
    out, ins = expand_prerequisites(ranking, _graph(cat), cat, CHAINS, top_k=10)
    # top_k 10: the first 5 keep their ranks, the whole chain (4 hops) takes ranks 6-9, nearest first
    assert _ids(out)[:10] == [
        "delete_task",
        *OTHERS[:4],
        "list_tasks",
        "list_boards",
        "list_projects",
        "find_workspace",
        OTHERS[4],
    ]
    assert [(i["id"], i["depth"], i["for"], i["chain"]) for i in ins] == [
        ("list_tasks", 1, "delete_task", True),
        ("list_boards", 2, "delete_task", True),
        ("list_projects", 3, "delete_task", True),
        ("find_workspace", 4, "delete_task", True),
    ]
    scores = [r.score for r in out]
    assert scores == sorted(scores, reverse=True)
    # today's rule (no declared_chains) inserts the direct prerequisite only
    plain = CHAINS.model_copy(update={"declared_chains": False})
    assert _ids(expand_prerequisites(ranking, _graph(cat), cat, plain, top_k=10)[0])[:3] == [
        "delete_task",
        "list_tasks",
        "other0",
    ]


def test_budget_scales_with_top_k() -> None:
    cat = _catalog()
    ranking = _ranking(cat, ["delete_task", *OTHERS])
    out4, _ = expand_prerequisites(ranking, _graph(cat), cat, CHAINS, top_k=4)
    assert _ids(out4)[:4] == ["delete_task", "other0", "list_tasks", "list_boards"]
    out1, ins1 = expand_prerequisites(ranking, _graph(cat), cat, CHAINS, top_k=1)
    assert ins1 == [] and _ids(out1) == _ids(ranking)
    assert chain_budget(CHAINS, 7) == (7, 3, 4)
    assert chain_budget(CHAINS.model_copy(update={"chain_share": 0.4}), 10) == (10, 4, 6)


def test_below_chain_min_top_k_declared_edges_keep_the_direct_rule() -> None:
    cat = _catalog()
    ranking = _ranking(cat, ["delete_task", *OTHERS])
    default = ExpansionConfig(**next(s for s in EngineConfig().stages if s.type == "tgr").params["expansion"])
    assert default.declared_chains and default.chain_min_top_k == 10  # the default pipeline follows them from 10
    out5, ins5 = expand_prerequisites(ranking, _graph(cat), cat, default, top_k=5)
    assert _ids(out5)[:3] == ["delete_task", "list_tasks", "other0"] and [i["id"] for i in ins5] == ["list_tasks"]
    assert "chain" not in ins5[0]
    out10, ins10 = expand_prerequisites(ranking, _graph(cat), cat, default, top_k=10)
    assert [i["id"] for i in ins10] == ["list_tasks", "list_boards", "list_projects", "find_workspace"]
    assert all(i["chain"] for i in ins10)
    # no top_k given: chain_top_k (10) is assumed
    assert [i["id"] for i in expand_prerequisites(ranking, _graph(cat), cat, default)[1]] == [i["id"] for i in ins10]


@pytest.mark.parametrize("top_k", range(1, 13))
def test_a_target_never_leaves_the_top_half(top_k: int) -> None:
    cat = _catalog(extra=(Edge("other7", "other1"), Edge("other8", "other7"), Edge("other9", "other2")))
    ranking = _ranking(cat, ["other1", "delete_task", "other2", "other3", "other4", "other5", "other6"])
    out, _ = expand_prerequisites(ranking, _graph(cat), cat, CHAINS, top_k=top_k)
    half = max(1, top_k // 2)
    assert _ids(out)[:half] == _ids(ranking)[:half]


def test_derived_and_usage_edges_keep_the_direct_rule() -> None:
    for origin in ("derived", "usage"):
        cat = _catalog(origin=origin)
        ranking = _ranking(cat, ["delete_task", *OTHERS])
        out, ins = expand_prerequisites(ranking, _graph(cat), cat, CHAINS, top_k=10)
        assert _ids(out)[:3] == ["delete_task", "list_tasks", "other0"]  # direct, right after, one hop
        assert [i["id"] for i in ins] == ["list_tasks"] and "chain" not in ins[0]
    # ... unless chain_origins names them
    cat = _catalog(origin="derived")
    wide = CHAINS.model_copy(update={"chain_origins": ["labelled", "derived"]})
    ins = expand_prerequisites(_ranking(cat, ["delete_task", *OTHERS]), _graph(cat), cat, wide, top_k=10)[1]
    assert [i["id"] for i in ins] == ["list_tasks", "list_boards", "list_projects", "find_workspace"]


def test_chain_depth_and_order() -> None:
    cat = _catalog(extra=(Edge("other9", "other0"),))
    ranking = _ranking(cat, ["delete_task", "other0", *OTHERS[1:]])
    shallow = CHAINS.model_copy(update={"chain_depth": 2})
    assert [i["id"] for i in expand_prerequisites(ranking, _graph(cat), cat, shallow, top_k=10)[1]] == [
        "list_tasks",
        "list_boards",
        "other9",
    ]
    by_depth = CHAINS.model_copy(update={"chain_order": "depth"})
    ins = expand_prerequisites(ranking, _graph(cat), cat, by_depth, top_k=10)[1]
    assert [i["id"] for i in ins][:2] == ["list_tasks", "other9"]  # every target's direct prerequisite first


class _Seen(BaseModel):
    pass


class _RecordTopK(Stage):
    name = "record_top_k"

    def run(
        self, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]
    ) -> list[ScoredTool]:
        trace["top_k"] = ctx.top_k
        return candidates


register_stage_type("record_top_k_test", StageType(_Seen, lambda cfg, ctx, path: _RecordTopK()), replace=True)


def _engine(stages: list[StageSpec]) -> Engine:
    bm25 = {"tokenizer": "identifiers", "stemmer": "english"}  # the BM25 this test's matches were written for
    return Engine.build(_catalog(), EngineConfig(retriever="bm25", bm25=bm25, stages=stages))


def test_stage_context_gives_the_callers_top_k() -> None:
    engine = _engine([StageSpec(type="record_top_k_test")])
    ctx = engine.context
    assert ctx.top_k is None
    assert engine.search_detailed("delete a task", top_k=3).trace["record_top_k_test"]["top_k"] == 3
    assert [r.trace["record_top_k_test"]["top_k"] for r in engine.search_batch_detailed(["task", "board"], 7)] == [7, 7]
    assert asyncio.run(engine.asearch_detailed("delete a task", top_k=4)).trace["record_top_k_test"]["top_k"] == 4
    assert ctx.top_k is None  # reset after each search


def test_rerank_passes_its_top_k(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int | None] = []
    original = _RecordTopK.run

    def run(self: _RecordTopK, query: str, candidates: list[ScoredTool], ctx: StageContext, trace: dict[str, Any]):  # type: ignore[no-untyped-def]
        seen.append(ctx.top_k)
        return original(self, query, candidates, ctx, trace)

    monkeypatch.setattr(_RecordTopK, "run", run)
    engine = _engine([StageSpec(type="record_top_k_test")])
    specs = [engine.catalog[i] for i in CHAIN]
    engine.rerank("delete a task", specs, top_k=2)
    engine.rerank("delete a task", specs)
    asyncio.run(engine.arerank("delete a task", specs, top_k=5))
    assert seen == [2, None, 5]


def test_tgr_stage_scales_with_the_search_top_k() -> None:
    expansion = {"enabled": True, "window": 2, "max_inserted": 2, "min_weight": 1.0, "declared_chains": True}
    engine = _engine([StageSpec(type="tgr", params={"propagate": False, "expansion": expansion})])
    query = "delete task"
    res = engine.search_detailed(query, top_k=10)
    assert res.results[0].id == "delete_task"
    assert res.trace["tgr"]["declared_chains"] == {"top_k": 10, "targets_kept": 5, "prerequisite_ranks": 5}
    # BM25 finds only delete_task and list_tasks: the rest of the chain comes from the declared edges
    assert [r.id for r in res.results] == list(reversed(CHAIN))
    small = engine.search_detailed(query, top_k=4)  # below chain_min_top_k (10): the direct rule
    assert small.trace["tgr"]["declared_chains"] == {"top_k": 4, "off_below_top_k": 10}
    assert [r.id for r in small.results][:2] == ["delete_task", "list_tasks"]
    assert [e["id"] for e in small.trace["tgr"]["expanded"]] == ["list_tasks"]
    every = {**expansion, "chain_min_top_k": 1}
    engine = _engine([StageSpec(type="tgr", params={"propagate": False, "expansion": every})])
    small = engine.search_detailed(query, top_k=4)
    assert small.trace["tgr"]["declared_chains"]["targets_kept"] == 2
    assert [r.id for r in small.results] == ["delete_task", "list_tasks", "list_boards", "list_projects"]


def test_evaluate_searches_each_k_when_a_stage_reads_top_k() -> None:
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.records import LabelledQuery

    expansion = {"enabled": True, "window": 2, "max_inserted": 2, "min_weight": 1.0, "declared_chains": True}
    engine = _engine([StageSpec(type="tgr", params={"propagate": False, "expansion": expansion})])
    assert engine.stages[0].uses_top_k
    queries = [LabelledQuery("q1", "delete task", ["delete_task", "list_tasks", "list_boards"])]
    report = evaluate(engine, queries, ks=(3, 10), batch_size=None, warmup=0)
    at3 = [r.id for r in engine.search("delete task", top_k=3)]
    at10 = [r.id for r in engine.search("delete task", top_k=10)]
    row = report.per_query[0]
    assert row["ranking"] == at10 and at10[:3] != at3  # the pipeline ranks by top_k here
    expected = len(set(at3) & set(queries[0].relevant)) / 3
    assert report.overall["recall@3"] == pytest.approx(expected)
    assert report.overall["recall@10"] == pytest.approx(1.0)
    # without declared chains one top_k=10 search gives every k
    plain = _engine([StageSpec(type="tgr", params={"propagate": False, "expansion": {"enabled": True}})])
    assert not plain.stages[0].uses_top_k
