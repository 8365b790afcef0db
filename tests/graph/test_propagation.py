from __future__ import annotations

import numpy as np
import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.propagation import adjacency, propagate
from toolrerank_plugins.graph.tool_graph import ToolGraph
from toolrerank_plugins.records import Edge, ToolSpec


def _chain() -> tuple[ToolGraph, list[str]]:
    cat = Catalog([ToolSpec(x, x, x) for x in ("validate", "login", "update", "other")])
    g = ToolGraph.empty(cat)
    g.add_edges([Edge("validate", "login"), Edge("login", "update")])  # update depends on login ...
    return g, cat.ids


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("direction", "expected"),
    [
        ("into_prerequisite", {(0, 1), (1, 2)}),  # row receives from column: validate <- login, login <- update
        ("into_dependent", {(1, 0), (2, 1)}),
        ("symmetric", {(0, 1), (1, 2), (1, 0), (2, 1)}),
    ],
)
def test_adjacency_direction(direction: str, expected: set[tuple[int, int]]) -> None:
    g, ids = _chain()
    a = adjacency(g, ids, direction).tocoo()  # type: ignore[arg-type]
    assert set(zip(a.row.tolist(), a.col.tolist())) == expected


def test_symmetric_full_propagation_is_the_paper_formula() -> None:
    g, ids = _chain()
    rng = np.random.default_rng(0)
    x = _unit(rng.normal(size=(4, 8)).astype(np.float32))
    a = np.zeros((4, 4), dtype=np.float32)
    for u, v in [(0, 1), (1, 2)]:
        a[u, v] = a[v, u] = 1
    m = a + np.eye(4, dtype=np.float32)
    d = np.diag(1 / np.sqrt(m.sum(1)))
    expected = _unit(d @ m @ d @ x)
    out = propagate(x, g, ids, direction="symmetric", alpha=1.0)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_alpha_zero_is_identity_and_blend_keeps_unit_rows() -> None:
    g, ids = _chain()
    x = _unit(np.random.default_rng(1).normal(size=(4, 8)).astype(np.float32))
    assert propagate(x, g, ids, alpha=0.0) is x
    out = propagate(x, g, ids, alpha=0.3)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out[3], x[3], atol=1e-6)  # isolated node unchanged
    assert not np.allclose(out[0], x[0])


def test_prerequisite_moves_towards_dependent() -> None:
    g, ids = _chain()
    x = np.eye(4, dtype=np.float32)
    out = propagate(x, g, ids, direction="into_prerequisite", alpha=0.5)
    assert out[1, 2] > 0  # login took in update
    assert out[2, 1] == 0  # update unchanged by login
    np.testing.assert_allclose(out[2], x[2])


def test_ids_not_in_graph_and_cycles_are_fine() -> None:
    cat = Catalog([ToolSpec(x, x, x) for x in ("a", "b")])
    g = ToolGraph.empty(cat)
    g.add_edges([Edge("a", "b"), Edge("b", "a")])
    x = np.eye(3, dtype=np.float32)
    out = propagate(x, g, ["a", "b", "new"], direction="symmetric", alpha=1.0)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[2], x[2])


def test_bad_arguments() -> None:
    g, ids = _chain()
    with pytest.raises(ValueError, match="alpha"):
        propagate(np.eye(4, dtype=np.float32), g, ids, alpha=1.5)
    with pytest.raises(ValueError, match="embeddings for"):
        propagate(np.eye(3, dtype=np.float32), g, ids)
