"""The PostgreSQL + pgvector backend against a real server (tests/postgres/conftest.py): the same rankings as in
memory, workers that find the catalog without encoding it, transactions, following other processes' commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins import Engine, EngineConfig, default_catalog_path, load_catalog
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.loaders import load_queries
from toolrerank_plugins.pipelines import known_pipelines, pipeline_config
from toolrerank_plugins.postgres import connect_engine, postgres_config
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


class CountingEmbedder(FakeEmbedder):
    """A FakeEmbedder that counts the texts it encoded."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded = 0

    def encode(self, texts: Any, **kwargs: Any) -> np.ndarray:
        self.encoded += len(texts)
        return super().encode(texts, **kwargs)


def _ids(engine: Engine, queries: list[str], k: int = 5) -> list[list[str]]:
    return [[r.id for r in res] for res in engine.search_batch(queries, k)]


def test_build_search_and_a_worker_that_starts_later(pg_pool: Any, table: str) -> None:
    emb = CountingEmbedder()
    cfg = postgres_config(table=table)
    engine = Engine.build(tiny_catalog(), cfg, embedder=emb, resources={"postgres": pg_pool})
    assert set(engine.first_stage.parts) == {"pgvector", "pg_bm25"}
    memory = Engine.build(tiny_catalog(), EngineConfig(), embedder=FakeEmbedder())  # the same pipeline in memory
    queries = ["send an email message", "what is the weather in Paris tomorrow", "log in and change my e-mail"]
    assert _ids(engine, queries) == _ids(memory, queries)

    worker_emb = CountingEmbedder()
    worker = connect_engine(pg_pool, table=table, embedder=worker_emb)
    assert worker.catalog.ids == engine.catalog.ids and worker.config == cfg
    assert _ids(worker, queries) == _ids(engine, queries)
    assert worker_emb.encoded <= 2 * len(queries)  # the queries only (and their requests): no API text


def test_changes_are_transactions_that_other_engines_follow(pg_pool: Any, table: str) -> None:
    cfg = postgres_config(table=table, poll_interval=0.0)
    writer = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(), resources={"postgres": pg_pool})
    reader = connect_engine(pg_pool, table=table, embedder=FakeEmbedder())
    pizza = [
        ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza for delivery", tool="Pizza"),
        ToolSpec(id="Food/Pizza/track", name="track_pizza", description="track my pizza delivery", tool="Pizza"),
    ]
    writer.add(pizza)
    assert {r.id for r in reader.search("order a pizza delivery", 2)} == {"Food/Pizza/order", "Food/Pizza/track"}
    assert reader.catalog.ids == writer.catalog.ids
    writer.update([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a calzone", tool="Pizza")])
    writer.remove(["Food/Pizza/track"])
    top = reader.search("calzone", 1)[0]
    assert top.id == "Food/Pizza/order" and top.tool.description == "order a calzone"
    assert "Food/Pizza/track" not in reader.catalog
    # a change made on the reader's (now older) snapshot follows the store first, then commits
    writer.add([ToolSpec(id="Food/Pizza/menu", name="pizza_menu", description="the pizza menu")])
    reader.remove(["Food/Pizza/order"])
    assert "Food/Pizza/menu" in reader.catalog and writer.search("calzone", 1)[0].id != "Food/Pizza/order"
    assert connect_engine(pg_pool, table=table, embedder=FakeEmbedder()).catalog.ids == writer.catalog.ids


def test_a_failed_change_commits_nothing(pg_pool: Any, table: str) -> None:
    cfg = postgres_config(table=table)
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(), resources={"postgres": pg_pool})
    before = connect_engine(pg_pool, table=table, embedder=FakeEmbedder()).catalog.ids
    with pytest.raises(Exception):  # noqa: B017 - an invalid spec fails inside the change
        engine.add([ToolSpec(id="x", name="x"), ToolSpec(id="x", name="again")])
    assert connect_engine(pg_pool, table=table, embedder=FakeEmbedder()).catalog.ids == before == engine.catalog.ids


def test_saved_folder_loads_with_the_pool_and_catches_up(pg_pool: Any, table: str, tmp_path: Path) -> None:
    cfg = postgres_config(table=table, poll_interval=0.0)
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(), resources={"postgres": pg_pool})
    path = engine.save(tmp_path / "e")
    assert "postgresql://" not in (path / "current.json").read_text()
    engine.add([ToolSpec(id="Food/Pizza/order", name="order_pizza", description="order a pizza")])
    back = Engine.load(path, embedder=FakeEmbedder(), resources={"postgres": pg_pool})
    assert "Food/Pizza/order" not in back.catalog  # the saved snapshot...
    assert back.search("order a pizza", 1)[0].id == "Food/Pizza/order"  # ...follows the store on its first search
    with pytest.raises(ConfigError, match="need a connection"):
        Engine.load(path, embedder=FakeEmbedder())


def test_graph_propagation_is_refused_with_the_reason(pg_pool: Any, table: str) -> None:
    propagating = pipeline_config("dense", stages=[{"type": "tgr", "params": {"propagate": True}}])
    cfg = postgres_config(propagating, table=table)
    with pytest.raises(ConfigError, match="propagate: false"):
        Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder(), resources={"postgres": pg_pool})


NON_LLM = [p for p in known_pipelines() if not any(s in p for s in ("querygen", "qta", "feedback"))]


@pytest.mark.model
@pytest.mark.slow
def test_every_non_llm_preset_ranks_the_bundled_catalog_as_in_memory(pg_pool: Any, table: str) -> None:
    from toolrerank_plugins.encoders import SentenceTransformerEmbedder

    catalog = load_catalog(default_catalog_path())
    queries = [q.query for q in load_queries(default_catalog_path())]
    embedder = SentenceTransformerEmbedder("default")
    cache = Engine.build(catalog, pipeline_config("dense"), embedder=embedder).first_stage.embedding_cache()
    differ = {}
    for n, name in enumerate(NON_LLM):
        memory = pipeline_config(name)
        # graph propagation re-indexes vectors, which the store cannot: those presets are compared without it
        stages = [{**s.model_dump(), "params": {**s.params, "propagate": False}} if s.type == "tgr" else s.model_dump()
                  for s in memory.stages]
        memory = pipeline_config(name, stages=stages)
        index = "hnsw" if memory.dense.index == "hnsw" else "exact"
        pg = postgres_config(memory, table=f"{table}_{n}", index=index)
        # word-mapped requests need the in-memory index's map; the store encodes them (DenseConfig.part_vectors)
        memory = pipeline_config(name, stages=stages, dense={**memory.dense.model_dump(), "part_vectors": "encoder"})
        mem_engine = Engine.build(catalog, memory, embedder=embedder, embedding_cache=cache)
        pg_engine = Engine.build(catalog, pg, embedder=embedder, embedding_cache=cache, resources={"postgres": pg_pool})
        got, want = _ids(pg_engine, queries, 10), _ids(mem_engine, queries, 10)
        if got != want:
            differ[name] = sum(g != w for g, w in zip(got, want))
    assert differ == {}
