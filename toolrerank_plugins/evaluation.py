"""The evaluation harness behind ``toolrerank eval``: metrics per query group and overall, latency, throughput.

Output schema (``--output results.json``, ``schema_version`` 1)::

    {
      "schema_version": 1,
      "library_version": str,
      "catalog": {"source": str, "n_apis": int, "n_tools": int},
      "queries": {"source": str, "split": str|null, "n_evaluated": int, "n_skipped_no_relevant": int},
      "ks": [int, ...],
      "overall": {"recall@5": float, "ndcg@5": float, "sufficiency@5": float, "precision@5": float,
                  ..., "mmrr": float, "map": float, "n": int},          # means over queries, in [0, 1]
      "groups": {group_name: {same keys as overall}},
      "latency_ms": {"p50": float, "p95": float, "mean": float, "max": float},   # one query at a time
      "stage_latency_ms": {stage: {"p50": float, "p95": float}},
      "throughput_qps": {"sequential": float, "batch": float|null, "batch_size": int|null},
      "llm_usage": {"per_query_mean": {"llm_calls": float, "prompt_tokens": float, ...}, "total": {...}},
      "build_seconds": float|null,
      "config": EngineConfig as JSON,
      "per_query": [{"id": str, "group": str|null, "query": str, "relevant": [str],
                     "ranking": [str], "scores": [float], "metrics": {...}, "latency_ms": float}]
    }

MMRR and MAP are computed over the top ``max(ks)`` results.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolrerank_plugins._version import __version__
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.metrics import METRICS
from toolrerank_plugins.records import LabelledQuery

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_AT_K = ("recall", "ndcg", "sufficiency", "precision")


def query_metrics(ranking: Sequence[str], relevant: Sequence[str], ks: Sequence[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in ks:
        for m in _AT_K:
            out[f"{m}@{k}"] = METRICS[m](ranking, relevant, k)
    kmax = max(ks)
    out["mmrr"] = METRICS["mmrr"](ranking, relevant, kmax)
    out["map"] = METRICS["map"](ranking, relevant, kmax)
    return out


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    keys = rows[0].keys()
    out: dict[str, float] = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    out["n"] = len(rows)
    return out


def _pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0}
    a = np.asarray(values)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "mean": float(a.mean()),
        "max": float(a.max()),
    }


@dataclass
class EvalReport:
    ks: list[int]
    overall: dict[str, float]
    groups: dict[str, dict[str, float]]
    latency_ms: dict[str, float]
    stage_latency_ms: dict[str, dict[str, float]]
    throughput_qps: dict[str, Any]
    llm_usage: dict[str, Any]
    per_query: list[dict[str, Any]]
    config: dict[str, Any]
    catalog: dict[str, Any] = field(default_factory=dict)
    queries: dict[str, Any] = field(default_factory=dict)
    build_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "library_version": __version__,
            "catalog": self.catalog,
            "queries": self.queries,
            "ks": self.ks,
            "overall": self.overall,
            "groups": self.groups,
            "latency_ms": self.latency_ms,
            "stage_latency_ms": self.stage_latency_ms,
            "throughput_qps": self.throughput_qps,
            "llm_usage": self.llm_usage,
            "build_seconds": self.build_seconds,
            "config": self.config,
            "per_query": self.per_query,
        }

    def format_table(self, metrics: Sequence[str] = ("recall", "ndcg", "sufficiency")) -> str:
        """Plain-text table: one row per group and one overall, values in percent."""
        cols = [f"{m}@{k}" for m in metrics for k in self.ks] + ["mmrr", "map"]
        head = f"{'group':<18}{'n':>6}" + "".join(f"{c:>15}" for c in cols)
        lines = [head, "-" * len(head)]
        rows = sorted(self.groups.items()) + [("overall", self.overall)]
        for name, vals in rows:
            cells = "".join(f"{100 * vals.get(c, float('nan')):>15.1f}" for c in cols)
            lines.append(f"{name:<18}{int(vals.get('n', 0)):>6}" + cells)
        lat = self.latency_ms
        lines.append("")
        lines.append(
            f"latency per query (ms): p50 {lat['p50']:.1f}  p95 {lat['p95']:.1f}  mean {lat['mean']:.1f}; "
            f"throughput: {self.throughput_qps['sequential']:.1f} q/s sequential"
            + (
                f", {self.throughput_qps['batch']:.1f} q/s batched ({self.throughput_qps['batch_size']})"
                if self.throughput_qps.get("batch")
                else ""
            )
        )
        usage = self.llm_usage.get("per_query_mean") or {}
        if usage:
            lines.append("LLM usage per query: " + ", ".join(f"{k} {v:.2f}" for k, v in usage.items()))
        return "\n".join(lines)


def evaluate(
    engine: Engine,
    queries: Sequence[LabelledQuery],
    *,
    ks: Sequence[int] = (5, 10),
    batch_size: int | None = 32,
    warmup: int = 2,
) -> EvalReport:
    """Run every query through ``engine`` one at a time (latency), then in batches (throughput).

    Queries whose relevant ids are all missing from the catalog keep their missing ids (they count as
    misses); queries with an empty relevant list are skipped and counted. Metrics at each k come from one
    ``top_k=max(ks)`` search, unless a stage ranks by the caller's ``top_k`` (:attr:`Stage.uses_top_k`: the default
    pipeline's declared chains): then each smaller k is searched again with ``top_k=k``, what a caller asking for k
    APIs gets (latency is the ``max(ks)`` search's).
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    top_k = max(ks)
    per_k = any(getattr(stage, "uses_top_k", False) for stage in engine.stages)
    usable = [q for q in queries if q.relevant]
    skipped = len(queries) - len(usable)
    if skipped:
        logger.warning("skipping %d queries with no relevant APIs", skipped)
    for q in usable[:warmup]:  # model load and first-call costs are not query latency
        engine.search(q.query, top_k)
    per_query: list[dict[str, Any]] = []
    rows_by_group: dict[str, list[dict[str, float]]] = defaultdict(list)
    all_rows: list[dict[str, float]] = []
    latencies: list[float] = []
    stage_lat: dict[str, list[float]] = defaultdict(list)
    usage_tot: dict[str, float] = defaultdict(float)
    t_all = time.perf_counter()
    for q in usable:
        t = time.perf_counter()
        res = engine.search_detailed(q.query, top_k)
        ms = (time.perf_counter() - t) * 1000
        latencies.append(ms)
        for st, v in res.timings_ms.items():
            if st != "total":
                stage_lat[st].append(v)
        for tr in res.trace.values():
            for key, val in (tr.get("usage") or {}).items() if isinstance(tr, dict) else ():
                if isinstance(val, (int, float)):
                    usage_tot[key] += val
        ranking = [r.id for r in res.results]
        m = query_metrics(ranking, q.relevant, ks)
        for k in ks[:-1] if per_k else ():
            at_k = query_metrics([r.id for r in engine.search(q.query, k)], q.relevant, (k,))
            m.update({key: v for key, v in at_k.items() if key.endswith(f"@{k}")})
        all_rows.append(m)
        rows_by_group[q.group or "all"].append(m)
        per_query.append(
            {
                "id": q.id,
                "group": q.group,
                "query": q.query,
                "relevant": list(q.relevant),
                "ranking": ranking,
                "scores": [round(r.score, 6) for r in res.results],
                "metrics": m,
                "latency_ms": ms,
            }
        )
    seq_seconds = time.perf_counter() - t_all
    batch_qps = None
    if batch_size and usable:
        t = time.perf_counter()
        for i in range(0, len(usable), batch_size):
            engine.search_batch([q.query for q in usable[i : i + batch_size]], top_k)
        batch_qps = len(usable) / (time.perf_counter() - t)
    n = max(len(usable), 1)
    stage_pct = {k: _pct(v) for k, v in stage_lat.items()}
    return EvalReport(
        ks=list(ks),
        overall=_mean(all_rows),
        groups={g: _mean(r) for g, r in rows_by_group.items()},
        latency_ms=_pct(latencies),
        stage_latency_ms={k: {"p50": p["p50"], "p95": p["p95"]} for k, p in stage_pct.items()},
        throughput_qps={
            "sequential": len(usable) / seq_seconds if seq_seconds > 0 else 0.0,
            "batch": batch_qps,
            "batch_size": batch_size if batch_qps else None,
        },
        llm_usage={"per_query_mean": {k: v / n for k, v in usage_tot.items()}, "total": dict(usage_tot)},
        per_query=per_query,
        config=engine.config.model_dump(mode="json"),
        catalog={
            "source": engine.catalog.source,
            "n_apis": len(engine.catalog),
            "n_tools": len(engine.catalog.tools()),
        },
        queries={"n_evaluated": len(usable), "n_skipped_no_relevant": skipped},
    )
