from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Catalog, ConfigError, Engine, EngineConfig, ToolSpec
from toolrerank_plugins.stages import Stage, StageSpec, StageType, register_stage_type
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog


@pytest.fixture(params=["dense", "bm25", "hybrid"])
def engine(request: pytest.FixtureRequest) -> Engine:
    return Engine.build(tiny_catalog(), EngineConfig(retriever=request.param), embedder=FakeEmbedder())


def test_search_returns_ranked_records_with_stage_scores(engine: Engine) -> None:
    res = engine.search("send an email message to a recipient", top_k=3)
    assert [r.rank for r in res] == [1, 2, 3]
    assert res[0].tool.id == "Mail/PostBox/send_email"
    assert all(res[i].score >= res[i + 1].score for i in range(len(res) - 1))
    kind = engine.config.retriever
    assert kind in res[0].stage_scores
    if kind == "hybrid":
        assert {"dense", "bm25", "hybrid"} <= set(res[0].stage_scores)


def test_batch_and_async_twins_match_single(engine: Engine) -> None:
    queries = ["weather forecast in Oslo", "delete that email", "log in"]
    single = [[r.id for r in engine.search(q, 4)] for q in queries]
    batch = [[r.id for r in rs] for rs in engine.search_batch(queries, 4)]
    abatch = [[r.id for r in rs] for rs in asyncio.run(engine.asearch_batch(queries, 4))]
    aone = [r.id for r in asyncio.run(engine.asearch(queries[0], 4))]
    assert single == batch == abatch and aone == single[0]


def test_top_k_larger_than_catalog_and_bad_args(engine: Engine) -> None:
    assert len(engine.search("weather", top_k=100)) <= len(engine.catalog)
    assert engine.search_batch([], 3) == []
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        engine.search("x", top_k=0)
    with pytest.raises(TypeError, match="queries must be strings"):
        engine.search_batch([None], 3)  # type: ignore[list-item]


def test_empty_query_string_does_not_crash(engine: Engine) -> None:
    assert isinstance(engine.search("", top_k=3), list)


def test_empty_catalog_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="empty catalog"):
        Engine.build(Catalog([]), EngineConfig(retriever="bm25"))


def test_incremental_add_encodes_only_new_apis() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=emb)
    before = emb.texts_encoded
    new = [
        ToolSpec(
            id=f"Pay/Coin/transfer_{i}",
            name=f"transfer_{i}",
            description="transfer crypto coins to a wallet",
            tool="Coin",
            category="Pay",
        )
        for i in range(3)
    ]
    engine.add(new)
    assert emb.texts_encoded - before == 3
    top = engine.search("transfer crypto coins", top_k=3)
    assert {r.tool.tool for r in top} == {"Coin"}


def test_update_and_remove_keep_index_in_sync() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), EngineConfig(retriever="hybrid"), embedder=emb)
    before = emb.texts_encoded
    engine.update(
        [
            ToolSpec(
                id="Maps/GeoFind/geocode",
                name="geocode",
                description="translate pizza orders",
                tool="GeoFind",
                category="Maps",
            )
        ]
    )
    assert emb.texts_encoded - before == 1
    assert engine.search("translate pizza orders", 1)[0].id == "Maps/GeoFind/geocode"
    before = emb.texts_encoded
    engine.remove(["Maps/GeoFind/geocode"])
    assert emb.texts_encoded == before  # removal re-encodes nothing
    assert all(r.id != "Maps/GeoFind/geocode" for r in engine.search("translate pizza orders", 20))
    assert len(engine.dense) == len(engine.catalog) == len(engine.bm25)  # type: ignore[arg-type]


def test_hnsw_index_option_finds_the_same_top_hit() -> None:
    cfg = EngineConfig.model_validate({"retriever": "dense", "dense": {"index": "hnsw"}})
    engine = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    flat = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    q = "weather forecast for the coming days"
    assert engine.search(q, 1)[0].id == flat.search(q, 1)[0].id


def test_fp16_index_option_ranks_as_flat_within_rounding() -> None:
    cfg = EngineConfig(retriever="dense", dense={"index": "flat-fp16"})
    half = Engine.build(tiny_catalog(), cfg, embedder=FakeEmbedder())
    flat = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    for q in ("weather forecast for the coming days", "send an email", "translate pizza orders"):
        got, want = half.search(q, 5), flat.search(q, 5)
        assert [r.id for r in got] == [r.id for r in want]
        np.testing.assert_allclose([r.score for r in got], [r.score for r in want], atol=2e-3)


def test_config_rejects_unknown_fields_and_stage_types() -> None:
    with pytest.raises(ValueError, match="extra"):
        EngineConfig.model_validate({"retriever": "dense", "bogus": 1})
    cfg = EngineConfig(retriever="bm25", stages=[StageSpec(type="no_such_stage")])
    with pytest.raises(ConfigError, match="unknown stage type 'no_such_stage'; known types: .*toolrerank"):
        Engine.build(tiny_catalog(), cfg)


class _Reverse(Stage):
    name = "reverse"

    def run(self, query, candidates, ctx, trace):  # type: ignore[no-untyped-def]
        trace["n_in"] = len(candidates)
        return [c.with_stage(self.name, -c.rank) for c in reversed(candidates)]


def test_custom_stage_runs_records_trace_and_scores() -> None:
    from pydantic import BaseModel

    class Cfg(BaseModel):
        pass

    register_stage_type("test_reverse", StageType(Cfg, lambda cfg, engine, path: _Reverse()), replace=True)
    cfg = EngineConfig(retriever="bm25", depth=5, stages=[StageSpec(type="test_reverse")])
    engine = Engine.build(tiny_catalog(), cfg)
    plain = Engine.build(tiny_catalog(), EngineConfig(retriever="bm25")).search("weather in the city", 5)
    res = engine.search_detailed("weather in the city", top_k=2)
    assert res.trace["test_reverse"]["n_in"] == len(plain)
    assert [r.id for r in res.results] == [r.id for r in reversed(plain)][:2]
    assert [r.rank for r in res.results] == [1, 2]
    assert "bm25" in res.results[0].stage_scores and "test_reverse" in res.results[0].stage_scores
    assert set(res.timings_ms) >= {"first_stage", "test_reverse", "total"}


def test_bm25_add_tokenises_only_new_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever

    r = BM25Retriever()
    r.index(["a", "b"], ["alpha weather forecast", "send email message"])
    seen: list[int] = []
    original = BM25Retriever._tokenize

    def counting(self: BM25Retriever, texts):  # type: ignore[no-untyped-def]
        seen.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(BM25Retriever, "_tokenize", counting)
    r.add(["c"], ["book a flight ticket"])
    assert seen == [1]  # the add tokenised one text; the query below tokenises one more
    assert r.search(["flight"], 3)[0][0][0] == "c"
    r.remove(["c"])
    assert seen == [1, 1] and r.search(["flight"], 3) == [[]]


def test_bm25_over_a_catalog_of_stopwords_only_has_no_hits() -> None:
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever

    r = BM25Retriever()
    r.index(["a"], ["the of and"])
    assert r.search(["the weather"], 3) == [[]]


def test_bm25_ranks_equal_scores_in_catalog_order_and_drops_unmatched_apis() -> None:
    from toolrerank_plugins.retrieval.bm25 import BM25Retriever

    r = BM25Retriever()
    ids = ["e", "d", "c", "b", "a"]  # ids out of alphabetical order: catalog order, not the ids', breaks ties
    r.index(ids, ["weather report", "send email", "weather report", "weather report", "calendar"])
    hits = r.search(["weather", "weather email", "nothing shared"], 10)
    assert [h.id for h in hits[0]] == ["e", "c", "b"]
    assert len({h.score for h in hits[0]}) == 1 and hits[0][0].score > 0
    assert [h.id for h in hits[1]][1:] == ["e", "c", "b"] and hits[1][0].id == "d"  # 'email' is rarer
    assert hits[2] == []
    assert [h.id for h in r.search(["weather"], 2)[0]] == ["e", "c"]  # the cut keeps the first in catalog order


@pytest.mark.fuzz
@FUZZ
@given(
    scores=st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.5, 2.0, -1.0]), max_size=40),
    k=st.integers(1, 45),
)
def test_top_positive_is_the_k_best_positive_scores_ties_in_row_order(scores: list[float], k: int) -> None:
    import numpy as np

    from toolrerank_plugins.retrieval.bm25 import top_positive

    expected = sorted((i for i, v in enumerate(scores) if v > 0), key=lambda i: (-scores[i], i))[:k]
    rows, values = top_positive(np.array(scores, dtype=np.float32), k)
    assert rows == expected
    assert values == [scores[i] for i in expected]


class _AsyncReverse(_Reverse):
    name = "areverse"

    async def arun(self, query, candidates, ctx, trace):  # type: ignore[no-untyped-def]
        return self.run(query, candidates, ctx, trace)


def test_async_path_with_an_arun_stage_matches_the_sync_path() -> None:
    from pydantic import BaseModel

    class Cfg(BaseModel):
        pass

    register_stage_type("test_areverse", StageType(Cfg, lambda cfg, engine, path: _AsyncReverse()), replace=True)
    cfg = EngineConfig(retriever="bm25", depth=5, stages=[StageSpec(type="test_areverse")])
    engine = Engine.build(tiny_catalog(), cfg)
    queries = ["weather in the city", "send an email"]
    sync = engine.search_batch_detailed(queries, 3)
    asy = asyncio.run(engine.asearch_batch_detailed(queries, 3))
    assert [[r.id for r in s.results] for s in sync] == [[r.id for r in a.results] for a in asy]
    assert [s.trace for s in sync] == [a.trace for a in asy]
    specs = [engine.catalog["Mail/PostBox/send_email"], engine.catalog["Weather/SkyCast/forecast"]]
    assert [r.id for r in engine.rerank("q", specs)] == [r.id for r in asyncio.run(engine.arerank("q", specs))]
    with pytest.raises(TypeError, match="queries must be strings"):
        asyncio.run(engine.asearch_batch([None], 3))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        asyncio.run(engine.asearch("x", top_k=0))


def test_build_reuses_an_embedding_cache_and_encodes_only_misses() -> None:
    first = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=FakeEmbedder())
    assert first.dense is not None
    cache = first.dense.embedding_cache()
    cat = tiny_catalog()
    cat.update([ToolSpec(id="Maps/GeoFind/geocode", name="geocode", description="changed text", tool="GeoFind")])
    emb = FakeEmbedder()
    second = Engine.build(cat, EngineConfig(retriever="dense"), embedder=emb, embedding_cache=cache)
    assert emb.texts_encoded == 1  # only the changed API
    q = "weather forecast for the coming days"
    assert [r.id for r in second.search(q, 5)] == [r.id for r in first.search(q, 5)]
    emb_all = FakeEmbedder()
    third = Engine.build(tiny_catalog(), EngineConfig(retriever="dense"), embedder=emb_all, embedding_cache=cache)
    assert emb_all.texts_encoded == 0 and third.dense is not None
    assert (third.dense.embeddings == first.dense.embeddings).all()
