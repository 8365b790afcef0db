"""Grid search of the ToolRerank knobs on a dev split (paper Table 2), cheap because scores are cached.

The first stage runs once per query; cross-encoder scores are memoised per ``(query, text)``
(:class:`~toolrerank_plugins.rerank.cross_encoder.CachedReranker`), and the grid is split the way the
method is: ``tau_s`` only changes single-tool queries and ``(tau_m, n)`` only multi-tool ones, so for each
``(m_s, m_u)`` the two are optimised separately (exactly the same optimum as the full product grid).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolrerank_plugins.metrics import METRICS
from toolrerank_plugins.records import LabelledQuery, ScoredTool

if TYPE_CHECKING:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.rerank.stage import ToolRerankStage

logger = logging.getLogger(__name__)

PAPER_GRID: dict[str, list[Any]] = {
    "m_s": [10, 30, 50],
    "m_u": [10, 30, 50],
    "tau_s": [0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    "tau_m": [0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    "n": [2, 3, 4],
}


@dataclass
class Prepared:
    """Dev queries with their first-stage candidates and macro-average weights."""

    queries: list[LabelledQuery]
    candidates: list[list[ScoredTool]]
    weights: list[float]


def prepare(engine: Engine, queries: Sequence[LabelledQuery], depth: int, *, macro: bool = True) -> Prepared:
    """Run the first stage once (``depth`` candidates per query). ``macro``: groups weigh equally."""
    qs = list(queries)
    cands = engine.retrieve([q.query for q in qs], depth)
    counts: dict[str | None, int] = defaultdict(int)
    for q in qs:
        counts[q.group] += 1
    if macro:
        weights = [1.0 / (len(counts) * counts[q.group]) for q in qs]
    else:
        weights = [1.0 / len(qs)] * len(qs)
    return Prepared(qs, cands, weights)


def run_config(
    stage: ToolRerankStage, engine: Engine, prep: Prepared, params: dict[str, Any], indices: Sequence[int] | None = None
) -> list[list[str]]:
    """Rankings (ids) of the stage with ``params`` on the prepared queries."""
    old = stage.config
    stage.config = old.model_copy(update=params)
    try:
        idx = range(len(prep.queries)) if indices is None else indices
        return [
            [c.id for c in stage.run(prep.queries[i].query, list(prep.candidates[i]), engine.context, {})] for i in idx
        ]
    finally:
        stage.config = old


def metric_values(
    rankings: Sequence[Sequence[str]], queries: Sequence[LabelledQuery], metric: str, k: int
) -> list[float]:
    fn = METRICS[metric]
    return [fn(list(r), q.relevant, k) for r, q in zip(rankings, queries)]


def tune(
    stage: ToolRerankStage,
    engine: Engine,
    prep: Prepared,
    grid: dict[str, list[Any]] | None = None,
    *,
    metric: str = "recall",
) -> dict[str, Any]:
    """Best params over ``grid`` (default :data:`PAPER_GRID`) by weighted mean ``metric@k``.

    Returns ``{"params", "objective", "by_truncation": [...], "metric", "k"}``.
    """
    grid = {**PAPER_GRID, **(grid or {})}
    k = stage.config.top_k
    types = [stage.classify(q.query) for q in prep.queries]
    single = [i for i, t in enumerate(types) if t == "single"]
    multi = [i for i, t in enumerate(types) if t == "multi"]
    other = [i for i, t in enumerate(types) if t is None]
    w = prep.weights

    def weighted(idx: list[int], params: dict[str, Any]) -> float:
        if not idx:
            return 0.0
        ranks = run_config(stage, engine, prep, params, idx)
        vals = metric_values(ranks, [prep.queries[i] for i in idx], metric, k)
        return float(sum(w[i] * v for i, v in zip(idx, vals)))

    rows = []
    best: dict[str, Any] | None = None
    # not in the paper's grid: an optional first-stage interpolation axis (ToolRerankConfig.first_stage_weight)
    weights = grid.get("first_stage_weight", [stage.config.first_stage_weight])
    for w_first, m_s, m_u in ((w_, s_, u_) for w_ in weights for s_ in grid["m_s"] for u_ in grid["m_u"]):
        base = {"m_s": m_s, "m_u": m_u} | ({"first_stage_weight": w_first} if "first_stage_weight" in grid else {})
        s_best = max(((weighted(single, {**base, "tau_s": t}), t) for t in grid["tau_s"]), key=lambda x: x[0])
        m_best = max(
            ((weighted(multi, {**base, "tau_m": tm, "n": n}), tm, n) for tm in grid["tau_m"] for n in grid["n"]),
            key=lambda x: x[0],
        )
        rest = weighted(other, base)
        total = s_best[0] + m_best[0] + rest
        params = {**base, "tau_s": s_best[1], "tau_m": m_best[1], "n": m_best[2]}
        rows.append({"params": params, "objective": total})
        logger.info("w=%s m_s=%s m_u=%s -> %.4f (%s)", w_first, m_s, m_u, total, params)
        if best is None or total > best["objective"]:
            best = {"params": params, "objective": total}
    assert best is not None
    return {
        "params": best["params"],
        "objective": best["objective"],
        "metric": f"{metric}@{k}",
        "n_single": len(single),
        "n_multi": len(multi),
        "n_none": len(other),
        "by_truncation": rows,
    }
