"""The bundled default catalog: the demo's data and a small evaluation set."""

from __future__ import annotations

from collections import Counter

from toolrerank_plugins import Engine, EngineConfig, default_catalog_path, load_catalog, load_queries
from toolrerank_plugins.evaluation import evaluate


def test_sizes_meet_the_spec() -> None:
    cat = load_catalog(default_catalog_path())
    assert len(cat) >= 200
    assert len(cat.tools()) >= 25
    assert len(cat.categories()) >= 8
    assert len(cat.edges) >= 30
    queries = load_queries(default_catalog_path())
    assert len(queries) >= 60
    groups = Counter(q.group for q in queries)
    assert groups["single"] >= 20 and groups["multi"] >= 20


def test_queries_reference_real_apis_and_groups_match_the_hierarchy() -> None:
    cat = load_catalog(default_catalog_path())
    for q in load_queries(default_catalog_path()):
        assert q.relevant and all(r in cat for r in q.relevant), q.id
        n_tools = len({cat[r].tool_key for r in q.relevant})
        assert (n_tools == 1) == (q.group == "single"), q.id


def test_real_json_schemas_and_dependency_chains() -> None:
    cat = load_catalog(default_catalog_path())
    typed = sum(
        1
        for s in cat
        for p in s.parameters.get("properties", {}).values()
        if p.get("type") in {"string", "integer", "number", "boolean", "array", "object"}
    )
    assert typed >= 200
    # at least one chain of three: a -> b -> c
    succ: dict[str, set[str]] = {}
    for e in cat.edges:
        succ.setdefault(e.source, set()).add(e.target)
    assert any(succ.get(b) for targets in succ.values() for b in targets)


def test_bm25_finds_most_relevant_apis_in_the_top_10() -> None:
    engine = Engine.build(load_catalog(default_catalog_path()), EngineConfig(retriever="bm25"))
    report = evaluate(engine, load_queries(default_catalog_path()), ks=(10,), batch_size=None)
    assert report.overall["recall@10"] > 0.5
