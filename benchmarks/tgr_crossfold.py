"""TGR with a leak-free trace graph: K-fold cross-validation over the dev queries (NESTFUL, API-Bank).

The labelled graph (``edges.jsonl``) of API-Bank and NESTFUL was derived from the gold call traces of the
very dev queries that are evaluated, so ``benchmarks/tgr_eval.py``'s ``labelled`` rows leak. Here each
query is evaluated by a graph that never saw it, the graph a user with logged agent traces would have:

- queries are split into K folds by ``sha256(query id) % K`` (deterministic, no seed);
- fold f's graph keeps the edges of ``edges.jsonl`` *supported* by the gold ``calls`` of the queries in
  the other folds (source and target both called, source first; ``toolrerank_plugins.graph.traces``),
  passed to the ``tgr`` stage as declared edges (a catalog copy holding only those edges);
- fold f's queries are evaluated with base dense, +TGR (library defaults: ``into_prerequisite``,
  alpha 0.5), +expansion, +TGR+expansion; per-query metrics are pooled over the folds, so every query
  is evaluated exactly once;
- nested rows choose (direction, alpha) per fold on the *training folds' queries* only, by best S@5
  (ties: R@5, then grid order, defaults first), two ways: ``fold graph`` (the brief's protocol: training
  queries scored with fold f's graph, which was built from those same queries' traces, so the choice is
  made in-sample) and ``inner CV`` (each training fold g scored with the graph of the folds other than
  f and g, so the choice is made on queries the graph did not see);
- the grid rows (every direction x alpha, pooled over folds) are NOT selected; they are shown for reference;
- ``mined trace graph`` rows drop ``edges.jsonl`` altogether: fold f's graph is every ordered pair of APIs
  called in that order by some other-fold query (``mine_trace_edges``). The filtered graph above still
  takes its *candidate* edges from ``edges.jsonl``, whose data-flow annotation covers all queries; the
  mined graph uses nothing but other queries' call orders.

Query embeddings are computed once and memoised (the base encoder is deterministic), so the many engine
builds re-use both API and query embeddings; every row runs through ``Engine.search`` and ``evaluate``.

    OMP_NUM_THREADS=1 python benchmarks/tgr_crossfold.py --data ../shared/data --datasets nestful api-bank \
        --out /work/runs/s2/tgr/tgr_crossfold.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from first_stage_quality import QueryCacheEmbedder  # sibling script (benchmarks/ is on sys.path when run)

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.evaluation import evaluate
from toolrerank_plugins.graph.traces import edges_from_traces, mine_trace_edges
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import Edge, LabelledQuery
from toolrerank_plugins.stages import StageSpec

KEYS = ("recall@5", "recall@10", "ndcg@5", "ndcg@10", "sufficiency@5", "sufficiency@10")
DEFAULT = ("into_prerequisite", 0.5)  # TGRConfig defaults (toolrerank_plugins/graph/stage.py)
PerQuery = dict[str, dict[str, float]]  # query id -> metrics


def fold_of(query_id: str, k: int) -> int:
    return int(hashlib.sha256(query_id.encode("utf-8")).hexdigest(), 16) % k


class Runner:
    """Builds TGR engines over one catalog with a given edge list, re-using the base engine's embeddings."""

    def __init__(self, catalog: Catalog, queries: list[LabelledQuery]) -> None:
        self.catalog = catalog
        self.base = Engine.build(catalog, pipeline_config("dense"))
        assert self.base.dense is not None
        # one batched encode of every query, shared by all engines and folds (API vectors: embedding_cache)
        self.memo = QueryCacheEmbedder(self.base.dense.embedder)
        self.memo.prime([q.query for q in queries])
        self.base.dense.embedder = self.memo
        self.cache = self.base.dense.embedding_cache()
        self.builds = 0

    def engine(self, edges: list[Edge], params: dict[str, Any]) -> Engine:
        cat = Catalog(list(self.catalog), edges=edges, source=self.catalog.source)
        cfg = pipeline_config("dense", stages=[StageSpec(type="tgr", params=params)])
        self.builds += 1
        return Engine.build(cat, cfg, embedder=self.memo, embedding_cache=self.cache)

    def run(self, edges: list[Edge] | None, params: dict[str, Any] | None, queries: list[LabelledQuery]) -> PerQuery:
        engine = self.base if params is None or edges is None else self.engine(edges, params)
        rep = evaluate(engine, queries, ks=(5, 10), batch_size=None, warmup=0)
        return {r["id"]: r["metrics"] for r in rep.per_query}


def tgr_params(direction: str, alpha: float, *, propagate: bool = True, expansion: bool = False) -> dict[str, Any]:
    return {
        "sources": ["declared"],
        "direction": direction,
        "alpha": alpha,
        "propagate": propagate,
        "expansion": {"enabled": expansion},
    }


def mean(per_query: PerQuery, ids: list[str]) -> dict[str, float]:
    return {k: float(np.mean([per_query[i][k] for i in ids])) for k in KEYS}


def pick(scores: list[tuple[tuple[str, float], dict[str, float]]]) -> tuple[str, float]:
    """Best S@5, ties by R@5, then grid order (the grid starts with the defaults)."""
    best = max(range(len(scores)), key=lambda j: (scores[j][1]["sufficiency@5"], scores[j][1]["recall@5"], -j))
    return scores[best][0]


def summarise(rows: dict[str, PerQuery], ids: list[str], rng_seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    base = rows["base dense"]
    base_mean = mean(base, ids)
    rng = np.random.default_rng(rng_seed)
    boot = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    out: dict[str, Any] = {}
    for name, pq in rows.items():
        m = mean(pq, ids)
        row: dict[str, Any] = {k: round(100 * v, 1) for k, v in m.items()}
        row["delta"] = {k: round(100 * (m[k] - base_mean[k]), 1) for k in KEYS}
        d = np.array([pq[i]["sufficiency@5"] - base[i]["sufficiency@5"] for i in ids])
        row["s5_queries_improved"] = int((d > 0).sum())
        row["s5_queries_worsened"] = int((d < 0).sum())
        lo, hi = np.percentile(d[boot].mean(axis=1), [2.5, 97.5])
        row["s5_delta_ci95"] = [round(100 * float(lo), 1), round(100 * float(hi), 1)]
        out[name] = row
    return out


def run_dataset(data: Path, ds: str, split: str, k: int, grid: list[tuple[str, float]], nested: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    catalog = load_catalog(data / ds)
    edges = catalog.edges
    queries = [q for q in load_queries(data / ds, split=split) if q.relevant]
    by_fold: dict[int, list[LabelledQuery]] = {f: [] for f in range(k)}
    for q in queries:
        by_fold[fold_of(q.id, k)].append(q)
    runner = Runner(catalog, queries)
    edge_pairs = {(e.source, e.target) for e in edges}

    def traces(excluded: set[int]) -> list[tuple[str, ...] | None]:
        return [q.calls for f, qs in by_fold.items() if f not in excluded for q in qs]

    def graph(excluded: set[int]) -> list[Edge]:
        return edges_from_traces(edges, traces(excluded))

    def select(f: int, fold_graph: list[Edge], expansion: bool, inner_cv: bool) -> tuple[str, float]:
        train = [g for g in range(k) if g != f]
        scores = []
        for direction, alpha in grid:
            params = tgr_params(direction, alpha, expansion=expansion)
            pooled: PerQuery = {}
            if inner_cv:
                for g in train:
                    pooled.update(runner.run(graph({f, g}), params, by_fold[g]))
            else:
                pooled.update(runner.run(fold_graph, params, [q for g in train for q in by_fold[g]]))
            scores.append(((direction, alpha), mean(pooled, list(pooled))))
        return pick(scores)

    rows: dict[str, PerQuery] = {}
    reference: dict[str, PerQuery] = {}
    folds: list[dict[str, Any]] = []
    rows["base dense"] = runner.run(None, None, queries)
    d0, a0 = DEFAULT
    main_variants = {
        f"+TGR defaults ({d0} a={a0})": tgr_params(d0, a0),
        "+expansion only": tgr_params(d0, a0, propagate=False, expansion=True),
        f"+TGR defaults ({d0} a={a0}) +expansion": tgr_params(d0, a0, expansion=True),
    }
    mined_variants = {
        f"mined trace graph: +TGR defaults ({d0} a={a0})": tgr_params(d0, a0),
        "mined trace graph: +expansion only": tgr_params(d0, a0, propagate=False, expansion=True),
    }
    for f in range(k):
        fq = by_fold[f]
        fold_graph = graph({f})
        info: dict[str, Any] = {
            "fold": f,
            "n_queries": len(fq),
            "n_train_queries": len(queries) - len(fq),
            "edges_kept": len(fold_graph),
            "apis_touched": len({e.source for e in fold_graph} | {e.target for e in fold_graph}),
            "mined_edges": 0,
            "selected": {},
        }
        for name, params in main_variants.items():
            rows.setdefault(name, {}).update(runner.run(fold_graph, params, fq))
        mined = mine_trace_edges(traces({f}))
        info["mined_edges"] = len(mined)
        info["mined_edges_in_edges_jsonl"] = len({(e.source, e.target) for e in mined} & edge_pairs)
        for name, params in mined_variants.items():
            rows.setdefault(name, {}).update(runner.run(mined, params, fq))
        for direction, alpha in grid:
            name = f"+TGR {direction} a={alpha} (not selected, shown for reference)"
            reference.setdefault(name, {}).update(runner.run(fold_graph, tgr_params(direction, alpha), fq))
        if nested:
            for expansion in (False, True):
                for inner_cv in (False, True):
                    how = "inner CV on training folds" if inner_cv else "training folds, fold graph"
                    name = f"+TGR nested ({how})" + (" +expansion" if expansion else "")
                    direction, alpha = select(f, fold_graph, expansion, inner_cv)
                    info["selected"][name] = {"direction": direction, "alpha": alpha}
                    rows.setdefault(name, {}).update(
                        runner.run(fold_graph, tgr_params(direction, alpha, expansion=expansion), fq)
                    )
                    logging.info("%s fold %d | %s -> %s a=%s", ds, f, name, direction, alpha)
        folds.append(info)
        logging.info("%s fold %d: %d queries, %d/%d edges kept", ds, f, len(fq), len(fold_graph), len(edges))
    # the leaky full labelled graph through the same code path, for comparison with tgr_eval.py
    leaky: dict[str, PerQuery] = {"base dense": rows["base dense"]}
    for direction, alpha in [DEFAULT, ("symmetric", 0.5)]:
        leaky[f"+TGR full labelled graph, leaks ({direction} a={alpha})"] = runner.run(
            edges, tgr_params(direction, alpha), queries
        )
    ids = [q.id for q in queries]
    assert all(set(pq) == set(ids) for pq in rows.values()), "every query must be evaluated exactly once"
    return {
        "n_queries": len(queries),
        "n_apis": len(catalog),
        "n_edges": len(edges),
        "k": k,
        "grid": [list(g) for g in grid],
        "edges_supported_by_all_queries": len(graph(set())),
        "folds": folds,
        "rows": summarise(rows, ids),
        "reference_rows": summarise({"base dense": rows["base dense"], **reference}, ids),
        "leaky_rows": summarise(leaky, ids),
        "per_query_sufficiency@5": {name: {i: pq[i]["sufficiency@5"] for i in ids} for name, pq in rows.items()},
        "engine_builds": runner.builds,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--datasets", nargs="+", default=["nestful", "api-bank"])
    ap.add_argument("--split", default="dev")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--directions", nargs="+", default=["into_prerequisite", "symmetric", "into_dependent"])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--no-nested", action="store_true", help="skip the nested (direction, alpha) selection")
    ap.add_argument("--out", default="/work/runs/s2/tgr/tgr_crossfold.json")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids OpenMP spinning on a busy CPU)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    grid = [(d, a) for d in args.directions for a in args.alphas]
    grid.sort(key=lambda g: g != DEFAULT)  # defaults first: they win ties
    results: dict[str, Any] = {}
    for ds in args.datasets:
        results[ds] = run_dataset(Path(args.data), ds, args.split, args.folds, grid, not args.no_nested)
        for name, row in results[ds]["rows"].items():
            print(f"{ds:9} {name:60} S@5 {row['sufficiency@5']:5.1f} ({row['delta']['sufficiency@5']:+.1f})")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
