from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.graph.builder import build_graph
from toolrerank_plugins.graph.tool_graph import GraphError
from toolrerank_plugins.persistence import version_dir
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.stages import StageSpec
from toolrerank_plugins.testing import FakeEmbedder

from .conftest import _params


def _engine(cat: Catalog, retriever: str = "dense", **params: object) -> Engine:
    cfg = EngineConfig(retriever=retriever, stages=[StageSpec(type="tgr", params=params)])  # type: ignore[arg-type]
    return Engine.build(cat, cfg, embedder=FakeEmbedder(64))


def test_propagation_is_installed_at_index_time(bank: Catalog) -> None:
    engine = _engine(bank, alpha=0.5)
    assert engine.dense is not None and engine.dense.doc_transform is not None
    raw, idx = engine.dense.embeddings, engine.dense.indexed_embeddings()
    row = {t: i for i, t in enumerate(engine.dense.ids)}
    assert not np.allclose(raw[row["GetUserToken"]], idx[row["GetUserToken"]])  # took in its dependents
    np.testing.assert_allclose(raw[row["Weather"]], idx[row["Weather"]], atol=1e-6)  # no edges
    # The prerequisite now scores higher for a query about its dependent than without TGR.
    plain = Engine.build(bank, pipeline_config("dense"), embedder=FakeEmbedder(64))
    q = "delete the user account"
    s_tgr = {r.id: r.score for r in engine.search(q, top_k=6)}["GetUserToken"]
    s_plain = {r.id: r.score for r in plain.search(q, top_k=6)}["GetUserToken"]
    assert s_tgr > s_plain


def test_expansion_adds_prerequisite_after_primary(bank: Catalog) -> None:
    engine = _engine(bank, alpha=0.0, expansion={"enabled": True})
    res = engine.search_detailed("delete the user account", top_k=3)
    assert [r.id for r in res.results[:2]] == ["DeleteAccount", "GetUserToken"]
    assert res.trace["tgr"]["expanded"][0]["prerequisite_of"] == "DeleteAccount"


def test_save_load_round_trip(bank: Catalog, tmp_path: Path) -> None:
    engine = _engine(bank, expansion={"enabled": True})
    before = [r.id for r in engine.search("open a bank account", top_k=4)]
    engine.save(tmp_path / "eng")
    assert (version_dir(tmp_path / "eng") / "stages" / "00-tgr" / "graph.json").exists()
    back = Engine.load(tmp_path / "eng", embedder=FakeEmbedder(64))
    assert [r.id for r in back.search("open a bank account", top_k=4)] == before
    assert back.stages[0].graph.n_edges == engine.stages[0].graph.n_edges  # type: ignore[attr-defined]


def test_incremental_add_and_remove(bank: Catalog) -> None:
    engine = _engine(bank)
    stage = engine.stages[0]
    engine.add(
        [
            ToolSpec(
                "Transfer",
                "Transfer",
                "Transfer money between accounts",
                category="Bank",
                parameters=_params("token", "amount"),
            )
        ]
    )
    assert ("GetUserToken", "Transfer") not in {(e.source, e.target) for e in stage.graph.edges()}  # type: ignore[attr-defined]
    stage = engine.stages[0]  # copy-on-write: a change gives the engine new stage objects
    assert ("GetUserToken", "Transfer") in {(e.source, e.target) for e in stage.graph.edges()}  # type: ignore[attr-defined]
    assert "Transfer" in [r.id for r in engine.search("transfer money", top_k=2)]
    engine.remove(["GetUserToken"])
    stage = engine.stages[0]
    assert "GetUserToken" not in stage.graph  # type: ignore[attr-defined]
    assert stage.graph.n_edges == 1  # type: ignore[attr-defined]  # OpenAccount -> QueryBalance remains
    stage.graph.check_catalog(engine.catalog)  # type: ignore[attr-defined]


def test_graph_file_from_another_catalog_version_is_rejected(bank: Catalog, tmp_path: Path) -> None:
    path = build_graph(bank).save(tmp_path / "g.json")
    other = bank.copy()
    other.remove(["Weather"])
    with pytest.raises(GraphError, match="different catalog version"):
        _engine(other, sources=["file"], graph_file=str(path))
    engine = _engine(bank, sources=["file"], graph_file=str(path))  # the right catalog works
    assert engine.stages[0].graph.n_edges == 4  # type: ignore[attr-defined]


def test_saved_graph_swapped_for_another_catalog_is_rejected(bank: Catalog, tmp_path: Path) -> None:
    engine = _engine(bank)
    engine.save(tmp_path / "eng")
    other = bank.copy()
    other.remove(["Weather"])
    build_graph(other).save(version_dir(tmp_path / "eng") / "stages" / "00-tgr" / "graph.json")
    with pytest.raises(GraphError, match="different catalog version"):
        Engine.load(tmp_path / "eng", embedder=FakeEmbedder(64), verify=False)


def test_config_errors(bank: Catalog) -> None:
    with pytest.raises(ConfigError, match="needs a dense or hybrid"):
        _engine(bank, retriever="bm25")
    eng = _engine(bank, retriever="bm25", propagate=False, expansion={"enabled": True})  # expansion only is fine
    assert eng.search("delete the user account", top_k=2)[1].id == "GetUserToken"
    with pytest.raises(ConfigError, match="discriminator_path"):
        _engine(bank, sources=["discriminator"])
    with pytest.raises(ConfigError, match="not serialisable"):
        _engine(bank, sources=["llm"])
    with pytest.raises(ConfigError, match="graph_file"):
        _engine(bank, sources=["file"])
    with pytest.raises(ConfigError, match="invalid params"):
        _engine(bank, direction="sideways")


def test_catalog_of_one_api() -> None:
    cat = Catalog([ToolSpec("solo", "solo", "the only api", parameters=_params("token"))])
    engine = _engine(cat, expansion={"enabled": True})
    assert [r.id for r in engine.search("anything", top_k=5)] == ["solo"]


def test_async_matches_sync(bank: Catalog) -> None:
    import asyncio

    engine = _engine(bank, expansion={"enabled": True})
    q = "delete the user account"
    assert [r.id for r in asyncio.run(engine.asearch(q, top_k=3))] == [r.id for r in engine.search(q, top_k=3)]


def test_incremental_update_of_an_edited_api(bank: Catalog) -> None:
    engine = _engine(bank)
    graph = engine.stages[0].graph  # type: ignore[attr-defined]
    assert ("GetUserToken", "DeleteAccount") in {(e.source, e.target) for e in graph.edges()}
    engine.update(
        [
            ToolSpec(
                "DeleteAccount",
                "DeleteAccount",
                "Delete the account by e-mail link",
                category="Account",
                parameters=_params("email_link"),
            )
        ]
    )
    assert ("GetUserToken", "DeleteAccount") in {(e.source, e.target) for e in graph.edges()}  # copy-on-write
    graph = engine.stages[0].graph  # type: ignore[attr-defined]
    assert ("GetUserToken", "DeleteAccount") not in {(e.source, e.target) for e in graph.edges()}
    assert "DeleteAccount" in graph
    graph.check_catalog(engine.catalog)


def test_closure_expansion_through_the_engine_with_declared_edges_from_a_catalog_folder(tmp_path: Path) -> None:
    """edges.jsonl in the catalog folder = the user's declared edges; closure pulls in the whole chain."""
    import json

    from toolrerank_plugins.loaders import load_catalog

    tools = [
        {"id": "report", "name": "report", "description": "monthly expense report of a department"},
        {"id": "account", "name": "account", "description": "look up the ledger account"},
        {"id": "token", "name": "token", "description": "obtain an access token"},
        {"id": "login", "name": "login", "description": "sign in with username and password"},
        {"id": "weather", "name": "weather", "description": "weather forecast for a city"},
        {"id": "hotel", "name": "hotel", "description": "search hotels in a city"},
    ]
    edges = [("account", "report"), ("token", "account"), ("login", "token")]
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (tmp_path / "edges.jsonl").write_text(
        "".join(
            json.dumps({"source": s, "target": t, "type": "data_flow", "origin": "derived"}) + "\n" for s, t in edges
        )
    )
    cat = load_catalog(tmp_path)
    q = "expense report of my department"
    direct = _engine(cat, retriever="bm25", propagate=False, expansion={"enabled": True})
    assert [r.id for r in direct.search(q, top_k=4)][:2] == ["report", "account"]
    closure = {"enabled": True, "mode": "closure", "max_depth": 3, "max_inserted": 3, "max_per_result": 3}
    engine = _engine(cat, retriever="bm25", propagate=False, expansion=closure)
    res = engine.search_detailed(q, top_k=4)
    assert [r.id for r in res.results] == ["report", "account", "token", "login"]
    assert [(e["id"], e["depth"], e["origin"]) for e in res.trace["tgr"]["expanded"]] == [
        ("account", 1, "declared"),
        ("token", 2, "declared"),
        ("login", 3, "declared"),
    ]
    engine.save(tmp_path / "eng")
    back = Engine.load(tmp_path / "eng")
    assert [r.id for r in back.search(q, top_k=4)] == ["report", "account", "token", "login"]
