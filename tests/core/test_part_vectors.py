"""``DenseConfig(part_vectors="word-map")``: a message's requests get mapped word vectors instead of encodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine, EngineConfig, PersistenceError
from toolrerank_plugins._workers import SpareThreads
from toolrerank_plugins.retrieval.dense import DenseConfig, DenseRetriever, _PartMap
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

MESSAGE = "Send the email message to a recipient about the email. Additionally, tell me the weather forecast"
REQUESTS = ["Send the email message to a recipient about the email", "tell me the weather forecast"]


def _config(retriever: str, *, word_map: bool = True, parallel: bool = True, weight: float = 0.5) -> EngineConfig:
    dense = {"part_vectors": "word-map" if word_map else "encoder", "part_query_weight": weight}
    return EngineConfig(
        retriever=retriever,
        parallel_requests=parallel,
        dense=dense,
        stages=[{"type": "multi_intent", "params": {}}],
    )


def _dense(engine: Engine) -> DenseRetriever:
    first = engine.first_stage
    part = first if isinstance(first, DenseRetriever) else first._vector_part()  # type: ignore[attr-defined]
    assert isinstance(part, DenseRetriever)
    return part


def _ranking(engine: Engine, query: str = MESSAGE) -> list[tuple[str, float]]:
    return [(h.id, round(h.score, 9)) for h in engine.search(query, top_k=6)]


@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_mapped_requests_are_not_encoded_and_need_no_spare_thread(
    retriever: str, one_spare: SpareThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    searches: list[tuple[int, int]] = []
    search_vectors = DenseRetriever._search_vectors

    def recording(self: DenseRetriever, vectors: np.ndarray, depth: int, *, at_least: int = 1) -> Any:
        searches.append((len(vectors), at_least))
        return search_vectors(self, vectors, depth, at_least=at_least)

    monkeypatch.setattr(DenseRetriever, "_search_vectors", recording)
    rankings = []
    for parallel in (True, False):
        emb = FakeEmbedder()
        engine = Engine.build(tiny_catalog(), _config(retriever, parallel=parallel), embedder=emb)
        assert _dense(engine).maps_parts()
        calls, texts, words = emb.calls, emb.texts_encoded, emb.word_texts
        searches.clear()
        rankings.append(_ranking(engine))
        assert searches == [(1 + len(REQUESTS), 2)]  # every vector in one search, on both cores
        assert (emb.calls - calls, emb.texts_encoded - texts) == (1, 1)  # the message alone
        assert emb.word_texts - words == len(REQUESTS)
        assert not any(t.startswith("toolrerank-spare") for t in emb.threads)
    assert rankings[0] == rankings[1] and rankings[0]
    encoded = Engine.build(tiny_catalog(), _config(retriever, word_map=False), embedder=FakeEmbedder())
    assert not _dense(encoded).maps_parts()


def _expected_part_vectors(engine: Engine, emb: FakeEmbedder, weight: float) -> np.ndarray:
    """The map solved here from the catalog's texts and vectors, applied to the requests, mixed with the message."""
    dense = _dense(engine)
    texts = [engine.render(engine.catalog[i]) for i in dense.ids]
    x = np.hstack([emb.word_vectors(texts).astype(np.float64), np.ones((len(texts), 1))])
    w = np.linalg.solve(x.T @ x + _PartMap.RIDGE * np.eye(x.shape[1]), x.T @ dense.embeddings.astype(np.float64))
    words = emb.word_vectors(REQUESTS)
    mapped = words @ w[:-1] + w[-1]
    mapped /= np.linalg.norm(mapped, axis=1, keepdims=True)
    mixed = mapped + weight * emb.encode([MESSAGE])
    return mixed / np.linalg.norm(mixed, axis=1, keepdims=True)


@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0])
def test_each_request_is_searched_with_its_mapped_word_vector_plus_the_weighted_message_vector(weight: float) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("dense", weight=weight), embedder=emb)
    dense = _dense(engine)
    want = _expected_part_vectors(engine, emb, weight)
    _, by_part = dense.search_with_parts([MESSAGE], [REQUESTS], 6)
    got = dense.query_vectors(REQUESTS)  # the vectors the search used (kept for the stages)
    np.testing.assert_allclose(got, want, atol=1e-5)
    searched = [[(h.id, round(h.score, 5)) for h in hits] for hits in by_part[0]]
    assert searched == [[(h.id, round(h.score, 5)) for h in hits] for hits in dense.search_vectors(want, 6)]


def test_the_map_of_a_grown_index_is_that_of_one_index_of_all_its_texts() -> None:
    catalog = tiny_catalog()
    ids = list(catalog.ids)
    texts = [f"{catalog[i].name} {catalog[i].description}" for i in ids]
    config = DenseConfig(part_vectors="word-map")
    whole = DenseRetriever(config, embedder=FakeEmbedder())
    whole.index(ids, texts)
    grown = DenseRetriever(config, embedder=FakeEmbedder())
    grown.index(ids[:3], texts[:3])
    before = grown._part_map
    grown.add(ids[3:], texts[3:])
    assert before is not None and grown._part_map is not None and grown._part_map is not before
    np.testing.assert_allclose(grown._part_map.weights(), whole._part_map.weights(), atol=1e-5)  # type: ignore[union-attr]
    copy = grown.copy()
    grown.update(ids[:1], ["a new text for the first tool"])  # the old text stays in the statistics
    assert grown._part_map is not copy._part_map and grown._part_map.xtx[-1, -1] == len(ids) + 1  # type: ignore[union-attr]
    grown.remove(ids[:2])
    assert grown.maps_parts() and copy.maps_parts()
    plain = DenseRetriever(DenseConfig(), embedder=FakeEmbedder())
    plain.index(ids, texts)
    assert plain._part_map is None and not plain.maps_parts()
    plain.add(["extra"], ["one more"])  # an index built without a map does not start one on add
    assert plain._part_map is None


def test_the_map_is_saved_loaded_and_checked(tmp_path: Path) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), _config("hybrid"), embedder=emb)
    saved = engine.save(tmp_path / "e")
    map_file = next(saved.rglob("part_map.npy"))
    loaded = Engine.load(saved, embedder=FakeEmbedder())
    assert _dense(loaded).maps_parts() and _ranking(loaded) == _ranking(engine)
    np.testing.assert_array_equal(_dense(loaded)._part_map.to_array(), _dense(engine)._part_map.to_array())  # type: ignore[union-attr]
    # an index saved without a map over the same folder leaves no stale one behind
    _dense(loaded)._part_map = None
    _dense(loaded).save(map_file.parent.parent)
    assert not map_file.exists()
    _dense(engine).save(map_file.parent.parent)
    for bad in (np.zeros((3, 3)), np.full((129, 257), np.nan), np.zeros((129, 257), dtype=np.int64)):
        np.save(map_file, bad)
        with pytest.raises(PersistenceError, match="part_map.npy"):
            DenseRetriever.load(map_file.parent.parent, DenseConfig(part_vectors="word-map"), embedder=FakeEmbedder())
    map_file.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(PersistenceError, match="part_map.npy"):
        DenseRetriever.load(map_file.parent.parent, DenseConfig(part_vectors="word-map"), embedder=FakeEmbedder())


class _NoWords:
    """An encoder without word vectors (another backend)."""

    def __init__(self) -> None:
        self.inner = FakeEmbedder()

    def __getattr__(self, name: str) -> Any:
        if name == "word_vectors":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_an_encoder_without_word_vectors_encodes_the_requests(one_spare: SpareThreads) -> None:
    emb = _NoWords()
    engine = Engine.build(tiny_catalog(), _config("hybrid"), embedder=emb)  # type: ignore[arg-type]
    assert not _dense(engine).maps_parts()
    texts = emb.inner.texts_encoded
    plain = Engine.build(tiny_catalog(), _config("hybrid", word_map=False), embedder=FakeEmbedder())
    assert _ranking(engine) == _ranking(plain)
    assert emb.inner.texts_encoded - texts == 1 + len(REQUESTS)


def test_a_loaded_map_with_an_encoder_without_word_vectors_encodes_the_requests(tmp_path: Path) -> None:
    engine = Engine.build(tiny_catalog(), _config("dense"), embedder=FakeEmbedder())
    emb = _NoWords()
    loaded = Engine.load(engine.save(tmp_path / "e"), embedder=emb)  # type: ignore[arg-type]
    assert _dense(loaded).maps_parts()
    plain = Engine.build(tiny_catalog(), _config("dense", word_map=False), embedder=FakeEmbedder())
    assert _ranking(loaded) == _ranking(plain)
    assert emb.inner.texts_encoded >= 1 + len(REQUESTS)


@FUZZ
@given(parts=st.lists(st.text(max_size=40), min_size=1, max_size=4), query=st.text(max_size=60))
def test_any_request_text_gets_a_finite_unit_vector(parts: list[str], query: str) -> None:
    dense = _dense(_ENGINE)
    vectors = dense._mapped_part_vectors([parts], dense.encode_queries([query]))
    assert vectors is not None and vectors.shape == (len(parts), dense.embedder.dimension)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


_ENGINE = Engine.build(tiny_catalog(), _config("dense"), embedder=FakeEmbedder())


def test_the_query_weight_is_checked() -> None:
    from toolrerank_plugins import ConfigError

    with pytest.raises((ConfigError, ValueError), match="part_query_weight"):
        EngineConfig(dense={"part_query_weight": -1})
    with pytest.raises((ConfigError, ValueError), match="part_vectors"):
        EngineConfig(dense={"part_vectors": "static"})
