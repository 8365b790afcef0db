"""benchmarks/faiss_one_vector.py: every index kind asked for is timed, for one and three vectors a search."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import faiss_one_vector as fov  # noqa: E402

pytest.importorskip("faiss")


def test_each_kind_is_the_index_the_dense_config_builds_and_is_timed() -> None:
    from toolrerank_plugins.retrieval.dense import DenseConfig, DenseRetriever
    from toolrerank_plugins.testing import FakeEmbedder

    for kind, value_bytes in (("flat", 4), ("flat-fp16", 2)):
        dense = DenseRetriever(DenseConfig(index=kind), embedder=FakeEmbedder(8))
        built = dense._make_index([], np.zeros((0, 8)), None)
        timed = fov._index(kind, 8)
        assert type(timed) is type(built) and timed.sa_code_size() == built.sa_code_size() == 8 * value_bytes
    raw = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    kinds = ("flat", "flat-fp16", "flat-auto", "flat-bfloat16")
    rows = fov.measure(raw, searches=3, pause_ms=0.0, k=5, kinds=kinds)
    assert {(r["index"], r["vectors_per_search"]) for r in rows} == {(kind, nq) for kind in kinds for nq in (1, 3)}
    assert all(r["search_p50_ms"] > 0 for r in rows)
    flat = fov._index("flat", 16)
    flat.add(raw)
    for kind in ("flat", "flat-auto", "flat-bfloat16"):  # all exact: the same rows as the flat index's own search
        index = fov._index(kind, 16)
        index.add(raw)
        rows_found = fov._searcher(kind, index)(raw[:3], 5, 1)[1]
        assert [set(r) for r in rows_found] == [set(r) for r in flat.search(raw[:3], 5)[1]]
