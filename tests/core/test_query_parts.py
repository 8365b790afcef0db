"""Sub-queries a stage asks for (``Stage.query_parts``) are searched in the query's own first-stage call."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from toolrerank_plugins import Engine, EngineConfig
from toolrerank_plugins.retrieval.bm25 import BM25Retriever
from toolrerank_plugins.retrieval.dense import DenseConfig, DenseRetriever
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

MESSAGE = "Send the email message to a recipient about the email. Additionally, tell me the weather forecast"
REQUESTS = ["Send the email message to a recipient about the email", "tell me the weather forecast"]


def _config(retriever: str, **multi_intent: Any) -> EngineConfig:
    return EngineConfig(retriever=retriever, stages=[{"type": "multi_intent", "params": multi_intent}])


def _ranking(engine: Engine, query: str = MESSAGE) -> list[tuple[str, float]]:
    return [(h.id, round(h.score, 9)) for h in engine.search(query, top_k=8)]


def test_requests_are_searched_in_the_first_stage_call_of_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine.build(tiny_catalog(), _config("bm25"))
    calls: list[list[str]] = []
    search = BM25Retriever.search

    def counting(self: BM25Retriever, queries: Any, depth: int) -> Any:
        calls.append(list(queries))
        return search(self, queries, depth)

    monkeypatch.setattr(BM25Retriever, "search", counting)
    detailed = engine.search_detailed(MESSAGE, top_k=5)
    assert calls == [[MESSAGE, *REQUESTS]]  # one call; the stage's ctx.retrieve found its requests there
    assert detailed.trace["multi_intent"]["requests"] == REQUESTS


def test_prefetched_requests_rank_exactly_as_retrieving_them_again(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine.build(tiny_catalog(), _config("bm25"))
    batched = _ranking(engine)
    from toolrerank_plugins.rerank import intents

    monkeypatch.setattr(intents.MultiIntentStage, "query_parts", lambda self, query: None)
    assert _ranking(engine) == batched


def test_a_single_request_message_is_one_plain_search() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("hybrid"), embedder=emb)
    before = emb.calls
    engine.search("weather forecast for Oslo", top_k=3)
    assert emb.calls == before + 1


def test_message_and_its_requests_are_each_encoded_once() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("dense"), embedder=emb)
    calls, texts = emb.calls, emb.texts_encoded
    engine.search(MESSAGE, top_k=3)
    # two calls (messages, then requests: one batch would pad each request to the message's length)
    assert (emb.calls, emb.texts_encoded) == (calls + 2, texts + 1 + len(REQUESTS))


def test_pooled_message_is_encoded_once_and_searched_with_the_mean_of_its_requests() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("dense", pooled=True), embedder=emb)
    calls, texts = emb.calls, emb.texts_encoded
    engine.search(MESSAGE, top_k=3)
    assert (emb.calls, emb.texts_encoded) == (calls + 1, texts + len(REQUESTS))  # the message is not encoded

    dense = DenseRetriever(DenseConfig(), embedder=FakeEmbedder())
    cat = tiny_catalog()
    dense.index(cat.ids, [f"{s.name}: {s.description}" for s in cat])
    whole, parts = dense.search_with_parts([MESSAGE], [REQUESTS], 5, pooled=True)
    vectors = dense.embedder.encode(REQUESTS)
    mean = (vectors * np.asarray([len(r) for r in REQUESTS], dtype=np.float32)[:, None]).sum(axis=0)
    assert whole == dense.search_vectors((mean / np.linalg.norm(mean))[None, :], 5)
    assert parts == [dense.search(REQUESTS, 5)]
    assert np.allclose(dense.query_vectors([MESSAGE])[0], mean / np.linalg.norm(mean))  # stages see that vector


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_unpooled_parts_give_the_rankings_of_separate_searches(retriever: str) -> None:
    engine = Engine.build(tiny_catalog(), _config(retriever), embedder=FakeEmbedder())
    first = engine.first_stage
    whole, parts = first.search_with_parts([MESSAGE, "weather"], [REQUESTS, ()], 6)
    assert whole == first.search([MESSAGE, "weather"], 6)
    assert parts == [first.search(REQUESTS, 6), []]


@pytest.mark.parametrize("pooled", [False, True])
def test_async_search_matches_sync_with_prefetched_requests(pooled: bool) -> None:
    engine = Engine.build(tiny_catalog(), _config("hybrid", pooled=pooled), embedder=FakeEmbedder())
    queries = [MESSAGE, "weather forecast for Oslo", "tell me the weather. Also send an email to Bob"]
    sync = [[(h.id, round(h.score, 9)) for h in r] for r in engine.search_batch(queries, top_k=6)]
    got = asyncio.run(engine.asearch_batch(queries, top_k=6))
    assert [[(h.id, round(h.score, 9)) for h in r] for r in got] == sync


def test_lexical_requests_cost_no_encoding_and_rank_as_bm25_alone() -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("hybrid", requests_by="lexical"), embedder=emb)
    calls, texts = emb.calls, emb.texts_encoded
    detailed = engine.search_detailed(MESSAGE, top_k=3)
    assert (emb.calls, emb.texts_encoded) == (calls + 1, texts + 1)  # the message only
    assert detailed.trace["multi_intent"]["requests"] == REQUESTS

    first = engine.first_stage
    whole, parts = first.search_with_parts([MESSAGE, "weather"], [REQUESTS, ()], 6, lexical=True)
    assert whole == first.search([MESSAGE, "weather"], 6)  # the message is searched by both retrievers
    bm25 = first.parts["bm25"].search(REQUESTS, 6)
    assert [[(h.id, h.score) for h in r] for r in parts[0]] == [[(h.id, h.score) for h in r] for r in bm25]
    assert parts[1] == []
    assert all(set(h.scores) == {"bm25"} for r in parts[0] for h in r)


def test_lexical_requests_on_a_dense_first_stage_are_searched_by_it() -> None:
    engine = Engine.build(tiny_catalog(), _config("dense", requests_by="lexical"), embedder=FakeEmbedder())
    first = engine.first_stage
    whole, parts = first.search_with_parts([MESSAGE], [REQUESTS], 6, lexical=True)
    assert parts == [first.search(REQUESTS, 6)]  # no lexical part: the flag changes nothing
