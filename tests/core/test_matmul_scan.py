"""A flat index searched as ``DenseConfig(scan="auto")`` or ``scan="bfloat16"`` searches it: the exact top k, ordered
by score then row, whatever else the call searches and whichever way the candidates were found (one float32 torch
matrix product for several vectors, faiss's own search otherwise; with ``bfloat16`` one bfloat16 product)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests._fuzz import FUZZ
from toolrerank_plugins import Engine
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import FakeEmbedder, tiny_catalog

faiss = pytest.importorskip("faiss")
torch = pytest.importorskip("torch")
from toolrerank_plugins.retrieval import dense as dense_module  # noqa: E402
from toolrerank_plugins.retrieval.dense import exact_search  # noqa: E402


def _index(stored: np.ndarray) -> Any:
    index = faiss.IndexFlatIP(stored.shape[1])
    index.add(np.ascontiguousarray(stored, dtype=np.float32))
    return index


def _reference(stored: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top k by the float64 score, ties by row: each product exact in float64, summed as numpy sums a row (a
    BLAS product sums in another order, which can differ in the last bit)."""
    scores = (stored.astype(np.float64) * query.astype(np.float64)).sum(axis=1)
    rows = np.lexsort((np.arange(len(stored)), -scores))[:k]
    return scores[rows], rows


#: stored vectors, query vectors (1-5) and k: any finite float32 values (subnormals, repeats: exact ties)
_CASES = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        hnp.arrays(np.float32, (n, 6), elements=st.floats(-1e3, 1e3, width=32)),
        hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.just(6)), elements=st.floats(-1e3, 1e3, width=32)),
        st.integers(1, n),
    )
)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The candidate path each exact_search call took."""
    taken: list[str] = []
    for name in ("_matmul_candidates", "_faiss_candidates", "_bfloat16_candidates"):
        real = getattr(dense_module, name)

        def recording(*args: Any, _real: Any = real, _name: str = name) -> Any:
            taken.append(_name.strip("_").split("_")[0])
            return _real(*args)

        monkeypatch.setattr(dense_module, name, recording)
    return taken


def test_the_exact_top_k_ties_by_row_and_each_query_as_if_alone(paths: list[str]) -> None:
    rng = np.random.default_rng(3)
    stored = rng.standard_normal((3000, 48)).astype(np.float32)
    stored[2000:2040] = stored[7]  # forty copies of one row: ties far past k + the margin
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    queries = np.concatenate([stored[[7, 100]], rng.standard_normal((3, 48)).astype(np.float32)])
    index = _index(stored)
    found = exact_search(index, queries, 25, 1)
    assert found is not None and paths == ["matmul"]
    scores, rows = found
    assert scores.shape == rows.shape == (5, 25)
    for i, q in enumerate(queries):
        want_scores, want_rows = _reference(stored, q, 25)
        assert rows[i].tolist() == want_rows.tolist()
        np.testing.assert_allclose(scores[i], want_scores, rtol=0, atol=1e-12)
        alone = exact_search(index, queries[i : i + 1], 25, 1)  # one vector: faiss's candidates
        assert alone is not None and alone[1][0].tolist() == rows[i].tolist()
        assert alone[0][0].tolist() == scores[i].tolist()  # bit for bit: how it was found does not matter
    assert paths == ["matmul"] + ["faiss"] * 5
    assert rows[0].tolist()[:25] == [7, *range(2000, 2024)]  # the copies tie with row 7: lowest rows first
    faiss_scores, faiss_rows = index.search(queries, 25)
    for i in range(1, 5):  # the same rows as faiss's own search (which orders ties its own way)
        assert set(faiss_rows[i]) == set(rows[i])
        np.testing.assert_allclose(faiss_scores[i], scores[i], atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True])
@FUZZ
@given(_CASES)
def test_generated_vectors_give_the_reference_top_k_both_ways(
    bf16: bool, case: tuple[np.ndarray, np.ndarray, int]
) -> None:
    """Any finite vectors, near-ties and exact ties (hypothesis repeats values), zero vectors, subnormals, any k;
    each query alone (faiss's candidates; with ``bf16`` a bfloat16 product) and all in one call (the matrix product
    where there are several)."""
    stored, queries, k = case
    index = _index(stored)
    together = exact_search(index, queries, k, 1, bfloat16=bf16)
    assert together is not None
    for i, q in enumerate(queries):
        want_scores, want_rows = _reference(stored, q, k)
        alone = exact_search(index, queries[i : i + 1], k, 1, bfloat16=bf16)
        assert alone is not None
        for scores, rows in ((together[0][i], together[1][i]), (alone[0][0], alone[1][0])):
            assert rows.tolist() == want_rows.tolist()
            np.testing.assert_allclose(scores, want_scores, rtol=1e-12, atol=1e-9)


def test_faiss_finds_the_candidates_where_the_product_cannot(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    stored = rng.standard_normal((200, 8)).astype(np.float32)
    index = _index(stored)
    queries = rng.standard_normal((3, 8)).astype(np.float32)
    want = exact_search(index, queries, 5, 1)
    assert want is not None and paths == ["matmul"]
    many = np.repeat(queries, 22, axis=0)  # 66 vectors: past MATMUL_MAX_QUERIES
    got = exact_search(index, many, 5, 1)
    assert got is not None and paths[-1] == "faiss" and (got[1][::22] == want[1]).all()
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # products may round to bfloat16: the bound does not hold
    try:
        got = exact_search(index, queries, 5, 1)
    finally:
        torch.set_float32_matmul_precision(before)
    assert got is not None and paths[-1] == "faiss" and (got[0] == want[0]).all() and (got[1] == want[1]).all()
    monkeypatch.delitem(sys.modules, "torch")  # a process that never loaded torch does not load it for a search
    got = exact_search(index, queries, 5, 1)
    assert got is not None and paths[-1] == "faiss" and (got[0] == want[0]).all() and (got[1] == want[1]).all()
    assert "torch" not in sys.modules
    assert exact_search(index, np.full((1, 8), np.nan, dtype=np.float32), 3, 1) is None  # faiss's search stands
    assert exact_search(index, queries, 201, 1) is None  # k past the index: faiss's search pads with -1


@pytest.mark.parametrize("scan", ["auto", "bfloat16", "faiss"])
def test_the_retriever_scans_as_its_config_says(scan: str, paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    emb = FakeEmbedder()
    engine = Engine.build(tiny_catalog(), pipeline_config("dense", dense={"scan": scan}), embedder=emb)
    dense = engine.first_stage
    calls: list[tuple[int, bool]] = []
    real = dense_module.exact_search

    def recording(index: Any, vectors: np.ndarray, k: int, n_threads: int, *, bfloat16: bool = False) -> Any:
        calls.append((n_threads, bfloat16))
        return real(index, vectors, k, n_threads, bfloat16=bfloat16)

    monkeypatch.setattr(dense_module, "exact_search", recording)
    vectors = emb.encode(["send an email", "weather forecast", "find a hotel"])
    many = dense.search_vectors(vectors, 4)  # type: ignore[attr-defined]
    one = dense.search_vectors(vectors[1:2], 4)  # type: ignore[attr-defined]
    assert one == many[1:2]  # the same hits and scores, alone or beside other queries (either way)
    before = faiss.omp_get_max_threads()
    assert (calls, paths) == {
        "auto": ([(before, False), (1, False)], ["matmul", "faiss"]),
        "bfloat16": ([(before, True), (1, True)], ["bfloat16", "bfloat16"]),
        "faiss": ([], []),
    }[scan]
    ranked = {tuple(h.id for h in hits) for hits in many}
    for other in ("auto", "bfloat16", "faiss"):
        monkeypatch.setattr(dense.config, "scan", other)  # type: ignore[attr-defined]
        assert {tuple(h.id for h in hits) for hits in dense.search_vectors(vectors, 4)} == ranked  # type: ignore[attr-defined]


def test_a_bfloat16_product_gives_the_exact_top_k(paths: list[str]) -> None:
    """Candidates from a bfloat16 product (rounded inputs, float32 sums, a rounded result) within its bound of the
    k-th: the same rows and float64 scores as the reference and as the float32 scan, ties by row, one vector alone
    or in a call of several."""
    rng = np.random.default_rng(11)
    stored = rng.standard_normal((4000, 64)).astype(np.float32)
    stored[3000:3030] = stored[9]  # thirty copies of one row
    stored[3100:3140] = stored[9] + 1e-4 * rng.standard_normal((40, 64))  # forty near-copies: in bfloat16 as close
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    queries = np.concatenate([stored[[9, 500]], rng.standard_normal((4, 64)).astype(np.float32)])
    index = _index(stored)
    found = exact_search(index, queries, 60, 1, bfloat16=True)
    assert found is not None and paths == ["bfloat16"]
    float32 = exact_search(index, queries, 60, 1)
    assert float32 is not None and paths == ["bfloat16", "matmul"]
    for i, q in enumerate(queries):
        want_scores, want_rows = _reference(stored, q, 60)
        assert found[1][i].tolist() == want_rows.tolist() == float32[1][i].tolist()
        np.testing.assert_allclose(found[0][i], want_scores, rtol=0, atol=1e-12)
        alone = exact_search(index, queries[i : i + 1], 60, 1, bfloat16=True)
        assert alone is not None and alone[1][0].tolist() == found[1][i].tolist()
        assert alone[0][0].tolist() == found[0][i].tolist() == float32[0][i].tolist()  # bit for bit
    assert paths == ["bfloat16", "matmul"] + ["bfloat16"] * 6
    near, same = set(range(3100, 3140)), [9, *range(3000, 3030)]
    top = found[1][0].tolist()
    assert set(top) < near | set(same) and [r for r in top if r in same] == same  # copies tie: by row


@pytest.mark.parametrize(("bf16", "path"), [(True, "bfloat16"), (False, "matmul")])
def test_near_ties_the_rounding_reorders(bf16: bool, path: str, paths: list[str]) -> None:
    """Rows whose parts cancel (+a, -a) but for a small step per row: their scores lie near 0 and differ by far
    less than the rounding of each part (bfloat16: 2^-9 at 0.3; float32: sums of 0.3s rounded at 2^-25), so the
    approximate order near the k-th is a shuffle of the true one, and only candidates within the bound of the k-th
    keep every true top-k row (a bound of zero loses some; for bfloat16 an eighth of it too)."""
    rng = np.random.default_rng(4)
    n, h = 400, 4
    part = 0.3 + rng.uniform(0, 1e-2 if bf16 else 1e-5, (n, h))
    stored = np.concatenate([part, -part], axis=1)
    stored[:, h:] += (np.arange(n) * (1e-5 if bf16 else 1e-9) / h)[:, None]  # the true order: by row, highest last
    stored = stored.astype(np.float32)
    queries = np.ones((2, 2 * h), dtype=np.float32)
    found = exact_search(_index(stored), queries, 10, 1, bfloat16=bf16)
    assert found is not None and paths == [path]
    for i in range(2):
        assert found[1][i].tolist() == _reference(stored, queries[i], 10)[1].tolist()


def test_bfloat16_falls_back_as_the_float32_scan_does(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """More than 64 vectors, or torch not loaded: faiss's candidates; vectors long enough for a score to overflow:
    faiss's own search (None)."""
    rng = np.random.default_rng(2)
    stored = rng.standard_normal((300, 16)).astype(np.float32)
    index = _index(stored)
    queries = rng.standard_normal((2, 16)).astype(np.float32)
    want = exact_search(index, queries, 5, 1, bfloat16=True)
    assert want is not None and paths == ["bfloat16"]
    got = exact_search(index, np.repeat(queries, 33, axis=0), 5, 1, bfloat16=True)  # 66 vectors
    assert got is not None and paths[-1] == "faiss" and (got[1][::33] == want[1]).all()
    assert exact_search(index, queries * np.float32(1e30), 5, 1, bfloat16=True) is None and len(paths) == 2
    monkeypatch.delitem(sys.modules, "torch")
    got = exact_search(index, queries, 5, 1, bfloat16=True)
    assert got is not None and paths[-1] == "faiss" and (got[0] == want[0]).all() and "torch" not in sys.modules


def test_a_bfloat16_engine_follows_catalog_changes() -> None:
    """Every change builds a new index, and the bfloat16 copy is kept per index: after an add, an update and a
    removal the bfloat16 engine still finds exactly what the float32 one does, scores included."""
    from toolrerank_plugins.records import ToolSpec

    engines = {
        scan: Engine.build(tiny_catalog(), pipeline_config("dense", dense={"scan": scan}), embedder=FakeEmbedder())
        for scan in ("auto", "bfloat16")
    }
    queries = ["log in and change my email", "weather forecast for tomorrow", "end the session"]

    def found(engine: Engine) -> list[list[tuple[str, float]]]:
        return [[(t.id, t.score) for t in engine.search(q, top_k=5)] for q in queries]

    changes = [
        ("add", [ToolSpec("Auth/Keyring/reset", "reset", "Reset a forgotten password by email", tool="Keyring")]),
        ("update", [ToolSpec("Auth/Keyring/logout", "logout", "Show the weather of the session", tool="Keyring")]),
        ("remove", ["Auth/Keyring/login"]),
    ]
    before = len(dense_module._BF16_ROWS)
    assert found(engines["bfloat16"]) == found(engines["auto"])
    for op, arg in changes:
        for engine in engines.values():
            getattr(engine, op)(arg)
        assert found(engines["bfloat16"]) == found(engines["auto"])
    assert len(dense_module._BF16_ROWS) >= before + 1  # a copy for the live index (old ones go with their index)
    ids = {t.id for t in engines["bfloat16"].search("reset a forgotten password", top_k=3)}
    assert "Auth/Keyring/reset" in ids and "Auth/Keyring/login" not in ids


def test_each_index_has_its_own_bfloat16_copy() -> None:
    """Two live indexes of the same size: each search reads its own index's copy (a copy of the other's would
    give the other's candidates)."""
    rng = np.random.default_rng(8)
    first, second = (rng.standard_normal((500, 16)).astype(np.float32) for _ in range(2))
    a, b = _index(first), _index(second)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    for stored, index in ((first, a), (second, b), (first, a)):
        found = exact_search(index, queries, 7, 1, bfloat16=True)
        assert found is not None
        for i, q in enumerate(queries):
            assert found[1][i].tolist() == _reference(stored, q, 7)[1].tolist()
    assert dense_module._BF16_ROWS[a][1].shape == dense_module._BF16_ROWS[b][1].shape == (500, 16)
