"""No tool fits (issue 29 item 4): how often ``min_relevance`` correctly gives no tool when the tools that fit are
missing, against the Recall@5 it costs when they are there.

For each dev set (the bundled catalog and the six shared ones, dev split; at most ``--max-queries`` per set,
drawn with a fixed seed) the default pipeline is built once (ToolBench's vectors from ``--toolbench-engine``) and
its relevance model fitted once (``Engine.relevance_model``: label-free, pseudo-requests from the catalog's own
texts; its fit time is reported). Then:

- **normal**: every query searched with ``top_k=5`` and ``min_relevance=0`` (every result scored, none dropped);
  at a threshold ``t`` the results below ``t`` are dropped, as ``min_relevance=t`` does: *R@5 lost* is the mean
  Recall@5 without the option minus with it, in points; *emptied* is the share of queries left with no result;
- **gold removed**: each query's relevant APIs are removed from the catalog (``engine.remove``; the model is
  kept, they are a handful of APIs) and the query searched again; *correct no-tool* at ``t`` is the share of
  these queries for which no result reaches ``t``. The APIs are added back before the next query.

``--scope query`` reports the other rule one could build on the same probabilities (give no tool when the best
result is below ``t``, otherwise keep every result) next to the engine's per-result rule.

    OMP_NUM_THREADS=1 python benchmarks/no_tool_fits.py --data ../shared/data --cache-dir /tmp/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out /tmp/no_tool.json --md /tmp/no_tool.md
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from declared_chains import load_set, vectors  # noqa: E402  (sibling script)

from toolrerank_plugins.config import EngineConfig  # noqa: E402
from toolrerank_plugins.engine import Engine  # noqa: E402
from toolrerank_plugins.metrics import METRICS  # noqa: E402
from toolrerank_plugins.retrieval.relevance import RELEVANCE, RelevanceConfig  # noqa: E402

logger = logging.getLogger("no_tool_fits")
SETS = ("bundled", "api-bank", "restbench", "nestful", "seal-tools", "metatool", "toolbench")
THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _scored(results: Sequence[Any]) -> list[tuple[str, float]]:
    return [(r.id, float(r.stage_scores[RELEVANCE])) for r in results]


def _kept(scored: Sequence[tuple[str, float]], t: float, scope: str) -> list[str]:
    if scope == "query":
        return [i for i, _ in scored] if scored and max(p for _, p in scored) >= t else []
    return [i for i, p in scored if p >= t]


def run_set(
    name: str,
    data: Path,
    cache_dir: Path | None,
    toolbench: Path | None,
    max_queries: int,
    relevance: RelevanceConfig,
) -> dict[str, Any]:
    catalog, queries, base = load_set(name, data)
    queries = [q for q in queries if q.relevant and all(i in catalog for i in q.relevant)]
    if len(queries) > max_queries:
        pick = np.random.default_rng(0).choice(len(queries), max_queries, replace=False)
        queries = [queries[i] for i in sorted(pick)]
    engine = Engine.build(catalog, EngineConfig(), embedding_cache=vectors(base, catalog, cache_dir, toolbench))
    engine.relevance_config = relevance
    t = time.perf_counter()
    model = engine.relevance_model()
    fit_s = time.perf_counter() - t
    logger.info("%s: relevance model %s in %.1f s", name, model.to_dict(), fit_s)
    normal = []
    t = time.perf_counter()
    for q in queries:
        normal.append((q, _scored(engine.search(q.query, 5, min_relevance=0.0))))
    search_ms = 1000 * (time.perf_counter() - t) / max(1, len(queries))
    removed = []
    t = time.perf_counter()
    for q in queries:
        specs = [engine.catalog[i] for i in q.relevant]
        engine.remove([s.id for s in specs])
        try:
            removed.append(_scored(engine.search(q.query, 5, min_relevance=0.0)))
        finally:
            engine.add(specs)
    logger.info("%s: %d queries, gold removed in %.0f s", name, len(queries), time.perf_counter() - t)
    curves: dict[str, list[dict[str, float]]] = {}
    base_recall = [METRICS["recall"]([i for i, _ in s], q.relevant, 5) for q, s in normal]
    for scope in ("result", "query"):
        rows = []
        for th in THRESHOLDS:
            kept = [_kept(s, th, scope) for _, s in normal]
            recall = [METRICS["recall"](k, q.relevant, 5) for (q, _), k in zip(normal, kept)]
            rows.append(
                {
                    "threshold": th,
                    "correct_no_tool": round(100 * float(np.mean([not _kept(s, th, scope) for s in removed])), 1),
                    "recall@5_lost": round(100 * (float(np.mean(base_recall)) - float(np.mean(recall))), 1),
                    "emptied": round(100 * float(np.mean([not k for k in kept])), 1),
                    "results_kept": round(float(np.mean([len(k) for k in kept])), 2),
                }
            )
        curves[scope] = rows
    top_normal = [max((p for _, p in s), default=0.0) for _, s in normal]
    top_removed = [max((p for _, p in s), default=0.0) for s in removed]
    pos, neg = np.asarray(top_normal), np.asarray(top_removed)
    auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
    return {
        "set": name,
        "n_apis": len(catalog),
        "n_queries": len(queries),
        "recall@5": round(100 * float(np.mean(base_recall)), 1),
        "model": model.to_dict(),
        "fit_seconds": round(fit_s, 1),
        "search_ms_with_relevance": round(search_ms, 1),
        "best_relevance_mean": {"normal": round(float(pos.mean()), 3), "gold_removed": round(float(neg.mean()), 3)},
        "auc_best_relevance": round(auc, 3),
        "curves": curves,
    }


def markdown(results: Sequence[dict[str, Any]], scopes: Sequence[str]) -> str:
    lines = []
    for res in results:
        lines.append(
            f"\n{res['set']} ({res['n_apis']} APIs, {res['n_queries']} queries; R@5 {res['recall@5']}; model fit "
            f"{res['fit_seconds']} s, pseudo AUC {res['model'].get('pseudo_auc')}; AUC of the best result's "
            f"relevance, normal vs gold removed: {res['auc_best_relevance']})\n"
        )
        for scope in scopes:
            lines.append(
                f"| {scope} rule: min_relevance | "
                + " | ".join(f"{r['threshold']:g}" for r in res["curves"][scope])
                + " |"
            )
            lines.append("|---|" + "---|" * len(res["curves"][scope]))
            for key, label in (
                ("correct_no_tool", "gold removed: no tool (%)"),
                ("recall@5_lost", "normal: R@5 lost (points)"),
                ("emptied", "normal: no result (%)"),
                ("results_kept", "normal: results kept (of 5)"),
            ):
                lines.append(f"| {label} | " + " | ".join(f"{r[key]:g}" for r in res["curves"][scope]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--toolbench-engine", type=Path, default=None)
    ap.add_argument("--max-queries", type=int, default=300)
    ap.add_argument("--scope", nargs="+", default=["result"], choices=["result", "query"])
    ap.add_argument("--relevance", default="{}", help="RelevanceConfig as JSON (default: the library's)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    results = []
    for name in args.sets:
        relevance = RelevanceConfig.model_validate(json.loads(args.relevance))
        results.append(run_set(name, args.data, args.cache_dir, args.toolbench_engine, args.max_queries, relevance))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    text = markdown(results, args.scope)
    if args.md is not None:
        args.md.write_text(text, encoding="utf-8")
    print(text)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
