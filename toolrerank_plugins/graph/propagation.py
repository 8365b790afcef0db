"""Graph-based tool encoding: the paper's parameter-free convolution, with explicit direction and a blend.

``X' = D_r^-1/2 (A + I) D_c^-1/2 X`` where row ``i`` of ``A`` lists the APIs whose embeddings flow into
API ``i``; ``D_r`` / ``D_c`` are the row / column sums of ``A + I``. For a symmetric ``A`` this is exactly
the paper's Eq. 3 (Kipf & Welling without weights). The paper leaves the direction open, so it is a choice:

- ``into_prerequisite``: a prerequisite absorbs its dependents (``GetUserToken`` takes in ``DeleteAccount``),
  so a query about the dependent also finds the prerequisite. This is what the paper's case study shows.
- ``into_dependent``: a dependent absorbs its prerequisites.
- ``symmetric``: both (``A`` + ``A^T``), the paper's undirected reading.

The result is blended with the original, ``(1 - alpha) X + alpha X'``, and re-normalised to unit length
(retrieval is cosine / inner product); ``alpha = 1`` is the paper's pure convolution, ``alpha = 0`` is off.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from toolrerank_plugins._extras import require
from toolrerank_plugins.graph.tool_graph import ToolGraph

Direction = Literal["into_prerequisite", "into_dependent", "symmetric"]


def adjacency(graph: ToolGraph, ids: list[str], direction: Direction, *, weighted: bool = False) -> Any:
    """Sparse ``A`` (rows receive from columns) over ``ids`` in that order; APIs absent from the graph are
    isolated (their row is only the self loop later)."""
    sp = require("scipy.sparse")
    pos = {tid: i for i, tid in enumerate(ids)}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for u, v, d in graph.graph.edges(data=True):
        iu, iv = pos.get(u), pos.get(v)
        if iu is None or iv is None:
            continue
        w = float(d.get("weight", 1.0)) if weighted else 1.0
        if direction in ("into_prerequisite", "symmetric"):
            rows.append(iu)
            cols.append(iv)
            vals.append(w)
        if direction in ("into_dependent", "symmetric"):
            rows.append(iv)
            cols.append(iu)
            vals.append(w)
    n = len(ids)
    a = sp.csr_matrix((np.asarray(vals, dtype=np.float32), (rows, cols)), shape=(n, n))
    # Duplicates (symmetric + a 2-cycle) are summed by scipy; weights are probabilities, so cap at 1.
    if a.nnz:
        a.data = np.minimum(a.data, 1.0)
    return a


def normalised_operator(a: Any) -> Any:
    """``D_r^-1/2 (A + I) D_c^-1/2`` as a sparse matrix."""
    sp = require("scipy.sparse")
    n = a.shape[0]
    m = (a + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
    dr = np.asarray(m.sum(axis=1)).ravel()
    dc = np.asarray(m.sum(axis=0)).ravel()
    return sp.diags(1.0 / np.sqrt(dr)) @ m @ sp.diags(1.0 / np.sqrt(dc))


def propagate(
    embeddings: np.ndarray,
    graph: ToolGraph,
    ids: list[str],
    *,
    direction: Direction = "into_prerequisite",
    alpha: float = 0.5,
    weighted: bool = False,
) -> np.ndarray:
    """Graph-encoded embeddings (same shape, unit rows) for ``ids``.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> cat = tiny_catalog()
        >>> g = ToolGraph.empty(cat); _ = g.add_edges(cat.edges)
        >>> x = np.eye(len(cat), dtype=np.float32)
        >>> out = propagate(x, g, cat.ids, alpha=1.0)
        >>> bool(out[0, 1] > 0), bool(out[1, 0] == 0)   # login took in update_email, not the reverse
        (True, True)
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if embeddings.shape[0] != len(ids):
        raise ValueError(f"{embeddings.shape[0]} embeddings for {len(ids)} ids")
    if alpha == 0.0 or graph.n_edges == 0 or len(ids) == 0:
        return embeddings
    a = adjacency(graph, ids, direction, weighted=weighted)
    if a.nnz == 0:
        return embeddings
    conv = np.asarray(normalised_operator(a) @ embeddings, dtype=np.float32)
    out = (1.0 - alpha) * embeddings + alpha * conv
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(out / norms, dtype=np.float32)
