"""First-stage retrieval quality: BM25, dense and hybrid on the shared benchmarks, through the eval harness.

Every number comes from :func:`toolrerank_plugins.evaluation.evaluate` (the harness behind
``toolrerank eval``), and every row of the markdown table carries the ``toolrerank eval`` command that
reproduces it.

ToolBench (47k APIs) is not re-encoded: the prebuilt engines ``<engines-dir>/toolbench-{bm25,dense,hybrid}``
(written by ``Engine.save``) are loaded. The other catalogs are small and are built here (each catalog is
encoded once: the hybrid engine's embeddings seed the dense engine through ``embedding_cache``).

``--tune-hybrid`` also sweeps :class:`~toolrerank_plugins.retrieval.hybrid.HybridConfig` (weights, RRF k,
fusion depth) on ToolBench *train* queries only, with the core's own ``rrf_fuse`` over the engine's own dense
and BM25 rankings, picks the best train Recall@5 and reports it on dev, then re-checks the pick through
``evaluate``.

Usage::

    python benchmarks/first_stage_quality.py --data ../shared/data \
        --out /work/runs/bench/first_stage_quality.json --tune-hybrid
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.encoders import Embedder
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.evaluation import EvalReport, evaluate, query_metrics
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.retrieval.hybrid import HybridConfig, first_stage_from_parts, rrf_fuse

logger = logging.getLogger("first_stage_quality")

#: This script measures textbook reciprocal-rank fusion (the "hybrid" preset), not the default's z-score fusion.
RRF: dict[str, Any] = {"fusion": "rrf", "confidence_weighted": False}

RETRIEVERS = ("bm25", "dense", "hybrid")
#: dataset folder -> split evaluated (None = every split in queries.jsonl).
DATASETS: dict[str, str | None] = {
    "toolbench": None,  # train + dev (the only two splits shipped)
    "seal-tools": "dev",
    "metatool": "dev",
    "api-bank": "dev",
    "restbench": "dev",
    "nestful": "dev",
}
KS = (5, 10)
#: equal-weight RRF constants always reported next to the tuned pick (candidates for a robust default).
EQUAL_WEIGHT_K = (1, 5, 10, 20, 30)
METRIC_COLS = ("recall@5", "recall@10", "ndcg@5", "ndcg@10", "sufficiency@5", "sufficiency@10")


class QueryCacheEmbedder:
    """The engine's bi-encoder, with query vectors computed up front in batches.

    Quality does not depend on how a query vector was computed, but ``evaluate`` encodes queries one at a time
    (it measures latency), which on a 2-core machine shared by many workers costs ~0.5 s per query. Priming
    the cache with one batched ``encode`` makes dense and hybrid share one encode per query. Rankings are
    checked against the uncached path on a sample (``cache_check`` in the JSON). Latencies from this script
    are therefore not reported; ``first_stage_speed.py`` measures speed.
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.cache: dict[str, np.ndarray] = {}
        self.enabled = True

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def prime(self, texts: Sequence[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            for t, v in zip(todo, self.inner.encode(todo, batch_size=64), strict=True):
                self.cache[t] = v

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        if self.enabled and texts and all(t in self.cache for t in texts):
            return np.stack([self.cache[t] for t in texts]).astype(np.float32)
        return self.inner.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar)


def _cache_check(engine: Engine, embedder: QueryCacheEmbedder, queries: Sequence[LabelledQuery], n: int) -> int:
    """How many of the first ``n`` queries rank the same top 10 with and without the primed query cache."""
    same = 0
    for q in queries[:n]:
        cached = [r.id for r in engine.search(q.query, 10)]
        embedder.enabled = False
        try:
            plain = [r.id for r in engine.search(q.query, 10)]
        finally:
            embedder.enabled = True
        same += cached == plain
    return same


def _subset(report: EvalReport, ids: set[str]) -> dict[str, float]:
    """Mean metrics over the per-query rows whose id is in ``ids`` (same as running eval on that subset)."""
    rows = [r["metrics"] for r in report.per_query if r["id"] in ids]
    if not rows:
        return {"n": 0}
    out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    out["n"] = len(rows)
    return out


def _eval_cmd(
    data: str, dataset: str, retriever: str, split: str | None, group: str | None, engines_dir: str | None
) -> str:
    if engines_dir is not None:
        cmd = f"toolrerank eval --engine {engines_dir}/{dataset}-{retriever}"
        cmd += f" --queries {data}/{dataset}/queries.jsonl"
    else:
        cmd = f"toolrerank eval --catalog {data}/{dataset} --pipeline {retriever}"
    if split:
        cmd += f" --split {split}"
    if group:
        cmd += f" --group {group}"
    return cmd + " --k 5 10 --batch-size 0"


def _engines_for(
    dataset: str,
    data: Path,
    engines_dir: Path | None,
    retrievers: Sequence[str],
    embedder: Embedder,
    save_dir: Path | None,
) -> tuple[dict[str, Engine], dict[str, float | None]]:
    """Load the prebuilt engines (ToolBench) or build them (small catalogs: one encode for dense+hybrid)."""
    engines: dict[str, Engine] = {}
    build_s: dict[str, float | None] = {}
    if engines_dir is not None and not all((engines_dir / f"{dataset}-{r}").is_dir() for r in retrievers):
        logger.warning("%s: no prebuilt engines under %s; building them here", dataset, engines_dir)
        engines_dir = None
    if engines_dir is not None:
        for r in retrievers:
            t = time.perf_counter()
            engines[r] = Engine.load(engines_dir / f"{dataset}-{r}", embedder=embedder)
            build_s[r] = None
            logger.info("%s: loaded %s engine in %.1fs", dataset, r, time.perf_counter() - t)
        return engines, build_s
    catalog = load_catalog(data / dataset)
    cache = None
    saved = save_dir / f"{dataset}-hybrid" if save_dir is not None else None
    if saved is not None and saved.is_dir():  # an earlier run of this script: reuse its embeddings
        cache = Engine.load(saved, embedder=embedder).dense.embedding_cache()  # type: ignore[union-attr]
        logger.info("%s: reusing document embeddings from %s", dataset, saved)
    order = sorted(retrievers, key=lambda r: r != "hybrid")  # hybrid first: its embeddings seed dense
    for r in order:
        t = time.perf_counter()
        engines[r] = Engine.build(
            catalog,
            pipeline_config(r),
            embedder=embedder,
            embedding_cache=cache,
        )
        build_s[r] = time.perf_counter() - t
        if engines[r].dense is not None and cache is None:
            cache = engines[r].dense.embedding_cache()  # type: ignore[union-attr]
            if saved is not None and r == "hybrid":
                engines[r].save(saved, overwrite=True)
        logger.info("%s: built %s engine in %.1fs", dataset, r, build_s[r])
    return engines, build_s


def run_quality(
    data: Path,
    datasets: Sequence[str],
    retrievers: Sequence[str],
    engines_dir: Path | None,
    limit: int,
    embedder: QueryCacheEmbedder,
    save_dir: Path | None,
    check_n: int,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Engine]], dict[str, int]]:
    rows: list[dict[str, Any]] = []
    kept: dict[str, dict[str, Engine]] = {}
    checks: dict[str, int] = {}
    for ds in datasets:
        split = DATASETS[ds]
        queries = load_queries(data / ds, split=split)
        if limit:
            queries = queries[:limit]
        use_dir = engines_dir if ds == "toolbench" else None
        engines, build_s = _engines_for(ds, data, use_dir, retrievers, embedder, save_dir)
        if "dense" in retrievers or "hybrid" in retrievers:
            t = time.perf_counter()
            embedder.prime([q.query for q in queries])
            logger.info("%s: %d query vectors in %.1fs (batched)", ds, len(queries), time.perf_counter() - t)
            if check_n:
                eng = engines.get("dense") or engines["hybrid"]
                checks[ds] = _cache_check(eng, embedder, queries, check_n)
                logger.info("%s: cache check %d/%d identical top-10", ds, checks[ds], min(check_n, len(queries)))
        if all(b is not None for b in build_s.values()):
            use_dir = None  # built here: the equivalent command builds from the catalog too
        by_split: dict[str, set[str]] = {}
        for q in queries:
            by_split.setdefault(q.split or "none", set()).add(q.id)
        for r in retrievers:
            t = time.perf_counter()
            rep = evaluate(engines[r], queries, ks=KS, batch_size=None)
            eval_s = time.perf_counter() - t
            logger.info("%s %s: %d queries in %.1fs", ds, r, len(queries), eval_s)
            edir = str(use_dir) if use_dir is not None else None
            split_name = split or "+".join(sorted(by_split))
            base = {
                "dataset": ds,
                "retriever": r,
                "n_apis": len(engines[r].catalog),
                "build_seconds": build_s[r],
                "eval_seconds": eval_s,
                "latency_ms": rep.latency_ms,
            }
            rows.append(
                {
                    **base,
                    "split": split_name,
                    "group": "overall",
                    "metrics": rep.overall,
                    "command": _eval_cmd(str(data), ds, r, split, None, edir),
                }
            )
            if split is None and len(by_split) > 1:  # per split (ToolBench train / dev)
                for sp, ids in sorted(by_split.items()):
                    rows.append(
                        {
                            **base,
                            "split": sp,
                            "group": "overall",
                            "metrics": _subset(rep, ids),
                            "command": _eval_cmd(str(data), ds, r, sp, None, edir),
                        }
                    )
            if len(rep.groups) > 1:
                for g, m in sorted(rep.groups.items()):
                    rows.append(
                        {
                            **base,
                            "split": split_name,
                            "group": g,
                            "metrics": m,
                            "command": _eval_cmd(str(data), ds, r, split, g, edir),
                        }
                    )
        kept[ds] = engines
    return rows, kept, checks


# -- hybrid tuning ------------------------------------------------------------------------------
def _first_stage_runs(engine: Engine, queries: Sequence[LabelledQuery], depth: int) -> tuple[list[Any], list[Any]]:
    assert engine.dense is not None and engine.bm25 is not None
    texts = [q.query for q in queries]
    dense, bm25 = [], []
    for i in range(0, len(texts), 32):
        dense += engine.dense.search(texts[i : i + 32], depth)
        bm25 += engine.bm25.search(texts[i : i + 32], depth)
    return dense, bm25


def _fused_metrics(
    dense: list[Any],
    bm25: list[Any],
    queries: Sequence[LabelledQuery],
    cfg: HybridConfig,
    top_k: int = 10,
) -> dict[str, float]:
    """Exactly what ``Engine._first_stage`` does for a hybrid engine (depth = max(top_k, candidates))."""
    deep = max(top_k, cfg.candidates)
    rows = []
    for dh, bh, q in zip(dense, bm25, queries, strict=True):
        fused = rrf_fuse([(dh[:deep], cfg.dense_weight), (bh[:deep], cfg.bm25_weight)], rrf_k=cfg.rrf_k, top_k=top_k)
        rows.append(query_metrics([t for t, _ in fused], q.relevant, KS))
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def tune_hybrid(engine: Engine, queries: Sequence[LabelledQuery], train_limit: int = 0) -> dict[str, Any]:
    """Grid over HybridConfig on a dataset's train split (ToolBench by default); report the pick on dev."""
    train = [q for q in queries if q.split == "train" and q.relevant]
    if train_limit:
        train = train[:train_limit]
    dev = [q for q in queries if q.split == "dev" and q.relevant]
    depth = 300
    t = time.perf_counter()
    d_train, b_train = _first_stage_runs(engine, train, depth)
    d_dev, b_dev = _first_stage_runs(engine, dev, depth)
    logger.info("tuning: first-stage runs for %d+%d queries in %.1fs", len(train), len(dev), time.perf_counter() - t)

    def single(hits: list[Any], qs: Sequence[LabelledQuery]) -> dict[str, float]:
        rows = [query_metrics([t for t, _ in h[:10]], q.relevant, KS) for h, q in zip(hits, qs, strict=True)]
        return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}

    grid = []
    for ratio in (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, float("inf")):  # bm25_weight / dense_weight
        dw, bw = (0.0, 1.0) if ratio == float("inf") else (1.0, ratio)
        for rrf_k in (1, 5, 10, 20, 30, 60, 100):
            for cand in (10, 20, 50, 100, 200, 300):
                cfg = HybridConfig(**RRF, dense_weight=dw, bm25_weight=bw, rrf_k=rrf_k, depth=cand)
                grid.append((cfg, _fused_metrics(d_train, b_train, train, cfg)))
    # Best train Recall@5; ties broken by Recall@10 then NDCG@10 (train only: dev is never looked at here).
    grid.sort(key=lambda x: (-x[1]["recall@5"], -x[1]["recall@10"], -x[1]["ndcg@10"]))
    best_cfg = grid[0][0]
    default = HybridConfig(**RRF)
    top = []
    for cfg, m_train in grid[:15]:
        top.append({"config": cfg.model_dump(), "train": m_train, "dev": _fused_metrics(d_dev, b_dev, dev, cfg)})
    equal = [HybridConfig(**RRF, rrf_k=k, depth=c) for k in EQUAL_WEIGHT_K for c in (50, 100)]
    return {
        "equal_weights": [
            {
                "config": c.model_dump(),
                "train": _fused_metrics(d_train, b_train, train, c),
                "dev": _fused_metrics(d_dev, b_dev, dev, c),
            }
            for c in equal
        ],
        "n_train": len(train),
        "n_dev": len(dev),
        "grid_size": len(grid),
        "default": {
            "config": default.model_dump(),
            "train": _fused_metrics(d_train, b_train, train, default),
            "dev": _fused_metrics(d_dev, b_dev, dev, default),
        },
        "dense": {"train": single(d_train, train), "dev": single(d_dev, dev)},
        "bm25": {"train": single(b_train, train), "dev": single(b_dev, dev)},
        "best_on_train": best_cfg.model_dump(),
        "top_on_train": top,
        "grid": [{"config": c.model_dump(), "train": m} for c, m in grid],
    }


def cross_check(
    engines: dict[str, dict[str, Engine]],
    data: Path,
    configs: Sequence[dict[str, Any]],
    limit: int,
    tuned_on: str,
) -> dict[str, Any]:
    """Dev metrics of the given HybridConfigs on the other datasets (a generalisation check, not tuning)."""
    out: dict[str, Any] = {}
    for ds, engs in engines.items():
        if ds == tuned_on or "hybrid" not in engs:
            continue
        qs = [q for q in load_queries(data / ds, split=DATASETS[ds]) if q.relevant]
        if limit:
            qs = qs[:limit]
        dense, bm25 = _first_stage_runs(engs["hybrid"], qs, 300)
        out[ds] = {
            "n": len(qs),
            "dense": _fused_metrics(dense, bm25, qs, HybridConfig(dense_weight=1.0, bm25_weight=0.0)),
            "bm25": _fused_metrics(dense, bm25, qs, HybridConfig(dense_weight=0.0, bm25_weight=1.0)),
            "configs": [{"config": c, "dev": _fused_metrics(dense, bm25, qs, HybridConfig(**c))} for c in configs],
        }
    return out


def verify_with_harness(engine: Engine, queries: Sequence[LabelledQuery], cfg: dict[str, Any]) -> dict[str, float]:
    """Dev metrics of a hybrid engine with HybridConfig ``cfg``, through ``evaluate`` (not the simulation)."""
    config = engine.config.model_copy(update={"hybrid": HybridConfig(**cfg)})
    # the same retrievers (nothing re-encoded) fused with ``cfg``; ``engine`` itself is not changed
    variant = Engine.from_parts(
        engine.catalog, config, first_stage_from_parts("hybrid", engine.first_stage.parts, config)
    )
    dev = [q for q in queries if q.split == "dev"]
    return evaluate(variant, dev, ks=KS, batch_size=None).overall


# -- output ---------------------------------------------------------------------------------------
def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    head = "| dataset | split | group | n | retriever | " + " | ".join(METRIC_COLS) + " | command |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        m = r["metrics"]
        cells = " | ".join(f"{100 * m[c]:.1f}" for c in METRIC_COLS)
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['group']} | {int(m['n'])} | {r['retriever']} | {cells} "
            f"| `{r['command']}` |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--data", default="../shared/data", help="shared data folder")
    p.add_argument("--out", default="/work/runs/bench/first_stage_quality.json", help="JSON results")
    p.add_argument("--markdown", help="also write the markdown table here (default: <out>.md)")
    p.add_argument("--engines-dir", default="/work/runs/engines", help="holds toolbench-{bm25,dense,hybrid}")
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--retrievers", nargs="+", default=list(RETRIEVERS), choices=list(RETRIEVERS))
    p.add_argument("--limit", type=int, default=0, help="only the first N queries per dataset (smoke runs)")
    p.add_argument("--tune-hybrid", action="store_true", help="sweep HybridConfig on ToolBench train, report dev")
    p.add_argument("--tune-dataset", default="toolbench", help="dataset whose train split tunes the hybrid")
    p.add_argument("--tune-train-limit", type=int, default=0, help="only the first N train queries (0: all)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 copes best with an overloaded CPU)")
    p.add_argument(
        "--save-engines",
        default="/work/runs/bench/engines",
        help="keep the small catalogs' hybrid engines here and reuse their embeddings on reruns ('' to skip)",
    )
    p.add_argument("--check", type=int, default=10, help="queries checked with and without the query cache")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    t0 = time.perf_counter()
    from toolrerank_plugins.encoders import SentenceTransformerEmbedder

    embedder = QueryCacheEmbedder(SentenceTransformerEmbedder("default", device="cpu"))
    save_dir = Path(args.save_engines) if args.save_engines else None
    rows, engines, checks = run_quality(
        data, args.datasets, args.retrievers, Path(args.engines_dir), args.limit, embedder, save_dir, args.check
    )
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "argv": sys.argv,
        "ks": list(KS),
        "rows": rows,
        "cache_check": {"n": args.check, "identical_top10": checks},
        "load_avg_end": list(os.getloadavg()),
    }
    tds = args.tune_dataset
    if args.tune_hybrid and tds in engines and "hybrid" in engines[tds]:
        eng = engines[tds]["hybrid"]
        queries = load_queries(data / tds, split=("train", "dev"))
        tuning = tune_hybrid(eng, queries, args.tune_train_limit)
        tuning["tuned_on"] = tds
        tuning["harness_dev_best"] = verify_with_harness(eng, queries, tuning["best_on_train"])
        tuning["harness_dev_default"] = verify_with_harness(eng, queries, HybridConfig(**RRF).model_dump())
        # The default, the train top 15, and equal-weight RRF at several k (candidates for a new default).
        configs = [HybridConfig(**RRF).model_dump()] + [t["config"] for t in tuning["top_on_train"]]
        configs += [c["config"] for c in tuning["equal_weights"]]
        tuning["other_datasets_dev"] = cross_check(engines, data, configs, args.limit, tds)
        result["hybrid_tuning"] = tuning
        b = tuning["best_on_train"]
        logger.info(
            "hybrid pick on train: %s -> dev R@5 %.3f (default %.3f, dense %.3f, bm25 %.3f)",
            b,
            tuning["harness_dev_best"]["recall@5"],
            tuning["harness_dev_default"]["recall@5"],
            tuning["dense"]["dev"]["recall@5"],
            tuning["bm25"]["dev"]["recall@5"],
        )
    result["total_seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    md = markdown_table(rows)
    Path(args.markdown or str(out.with_suffix(".md"))).write_text(md + "\n", encoding="utf-8")
    sys.stdout.write(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
