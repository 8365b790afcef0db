"""ToolRerank benchmark: first stages vs Rerank-m vs ToolRerank, ablations, classifier accuracy.

Usage (see docs/benchmarks/toolrerank.md for the exact commands and the measured numbers)::

    python benchmarks/toolrerank_eval.py --bench toolbench --model DIR --classifier DIR \
        --engine /work/runs/engines/toolbench-hybrid --tune --out /work/runs/toolrerank/eval_toolbench.json

Cross-encoder scores are cached per (query, text) within the run, so every configuration sees exactly
the same scores; latency is measured separately (benchmarks/toolrerank_latency.py) without any cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.metrics import METRICS
from toolrerank_plugins.records import LabelledQuery
from toolrerank_plugins.rerank.classifier import QueryTypeClassifier, query_type
from toolrerank_plugins.rerank.cross_encoder import CachedReranker, load_reranker
from toolrerank_plugins.rerank.stage import ToolRerankConfig, ToolRerankStage
from toolrerank_plugins.rerank.tune import PAPER_GRID, Prepared, prepare, run_config, tune
from toolrerank_plugins.retrieval.hybrid import first_stage_from_parts

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
METRIC_NAMES = ("recall", "ndcg", "sufficiency")


def subsample(qs: list[LabelledQuery], n: int | None, salt: str) -> list[LabelledQuery]:
    if not n or len(qs) <= n:
        return qs
    return sorted(qs, key=lambda q: hashlib.sha256(f"{salt}:{q.id}".encode()).hexdigest())[:n]


def scores_for(rankings: list[list[str]], qs: list[LabelledQuery], k: int = 5) -> dict[str, Any]:
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for r, q in zip(rankings, qs):
        row = {f"{m}@{k}": METRICS[m](r, q.relevant, k) for m in METRIC_NAMES}
        row["recall@50"] = METRICS["recall"](r, q.relevant, 50)
        groups[q.group or "all"].append(row)
    out: dict[str, Any] = {}
    for g, rows in sorted(groups.items()):
        out[g] = {key: 100 * sum(r[key] for r in rows) / len(rows) for key in rows[0]} | {"n": len(rows)}
    keys = [k_ for k_ in next(iter(out.values())) if k_ != "n"]
    out["macro"] = {key: sum(v[key] for g, v in out.items()) / len(groups) for key in keys}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--bench", required=True)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=0, help="deterministic subsample of the dev queries")
    ap.add_argument("--engine", default=None, help="saved engine (hybrid gives dense+bm25+hybrid first stages)")
    ap.add_argument("--first-stages", nargs="+", default=["bm25"])
    ap.add_argument("--rerank-first-stage", default=None, help="first stage to rerank (default: best R@50)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--classifier", default=None)
    ap.add_argument("--tune", action="store_true", help="grid-search the knobs on these queries")
    ap.add_argument("--params", default=None, help="best.json from `toolrerank tune` / an earlier run")
    ap.add_argument("--depth", type=int, default=50, help="first-stage depth (m values above it are skipped)")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--rrf-k", type=int, default=None, help="override a loaded engine's hybrid RRF constant")
    ap.add_argument(
        "--first-stage-weights",
        type=float,
        nargs="*",
        default=None,
        help="tune/ablate ToolRerankConfig.first_stage_weight over these values (not in the paper; default: 0 only)",
    )
    ap.add_argument("--score-cache", default=None, help="JSON file of cross-encoder scores to reuse/extend")
    ap.add_argument(
        "--backend", default="torch", choices=["torch", "onnx", "onnx-int8"], help="what runs the cross-encoder"
    )
    ap.add_argument("--max-length", type=int, default=None, help="pair length (default: the model's training length)")
    ap.add_argument(
        "--variants",
        default=None,
        help='JSON object {"name": {param: value}}: each evaluated as the tuned/--params settings with these changed',
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(2)
    t_all = time.perf_counter()
    root = Path(args.data) / args.bench
    qs = subsample(load_queries(root, split=args.split), args.limit, args.bench)
    result: dict[str, Any] = {"bench": args.bench, "split": args.split, "n_queries": len(qs)}

    engines: dict[str, Engine] = {}
    if args.engine:
        base = Engine.load(args.engine)
        if args.rrf_k is not None:
            base.config = base.config.model_copy(
                update={"hybrid": base.config.hybrid.model_copy(update={"rrf_k": args.rrf_k})}
            )
        catalog = base.catalog
        for kind in args.first_stages:
            # a view of the same indexes with this first stage (the hybrid one fuses with the rrf_k above)
            cfg = base.config.model_copy(update={"retriever": kind})
            engines[kind] = Engine.from_parts(catalog, cfg, first_stage_from_parts(kind, base.first_stage.parts, cfg))
    else:
        catalog = load_catalog(root)
        for kind in args.first_stages:
            engines[kind] = Engine.build(catalog, EngineConfig(retriever=kind))  # type: ignore[arg-type]

    preps: dict[str, Prepared] = {}
    result["first_stage"] = {}
    for kind, eng in engines.items():
        t = time.perf_counter()
        preps[kind] = prepare(eng, qs, args.depth)
        result["first_stage"][kind] = scores_for([[c.id for c in cs] for cs in preps[kind].candidates], qs)
        result["first_stage"][kind]["seconds"] = time.perf_counter() - t
        print(kind, json.dumps(result["first_stage"][kind]["macro"]))
    pick = args.rerank_first_stage or max(preps, key=lambda k: result["first_stage"][k]["macro"]["recall@50"])
    result["reranked_first_stage"] = pick
    eng, prep = engines[pick], preps[pick]

    reranker = (
        CachedReranker(load_reranker(args.model, backend=args.backend, device="cpu", max_length=args.max_length))
        if args.model
        else None
    )
    result["backend"], result["max_length"] = args.backend, args.max_length
    cache_file = Path(args.score_cache) if args.score_cache else None
    scorer_id = {"model": str(Path(args.model).resolve()) if args.model else None, "backend": args.backend,
                 "max_length": args.max_length}
    if reranker is not None and cache_file is not None and cache_file.exists():
        # scores of this model for (query, text) pairs from an earlier run of this script (same model)
        saved = json.loads(cache_file.read_text())
        if {k: saved.get(k, {"backend": "torch"}.get(k)) for k in scorer_id} != scorer_id:
            raise SystemExit(f"{cache_file} holds scores of another scorer ({saved.get('model')})")
        reranker._cache.update({tuple(k.split("\x00", 1)): v for k, v in saved["scores"].items()})
    classifier = QueryTypeClassifier.load(args.classifier, eng.embedder) if args.classifier else None
    oracle = root / "queries.jsonl"
    stage = ToolRerankStage(
        ToolRerankConfig(model_path=args.model, classification="oracle", oracle_queries=str(oracle)),
        eng.context,
        reranker=reranker,  # type: ignore[arg-type]
        classifier=classifier,
    )
    seen = stage.seen_tools(eng.context)
    result["seen_share_of_relevant"] = {}
    for g in sorted({q.group or "all" for q in qs}):
        rel = [r for q in qs if (q.group or "all") == g for r in q.relevant if r in catalog]
        result["seen_share_of_relevant"][g] = 100 * sum(catalog[r].tool_key in seen for r in rel) / max(1, len(rel))
    print("seen share", json.dumps(result["seen_share_of_relevant"]))

    if classifier is not None:
        gold = [query_type(q, catalog) for q in qs]
        pred = classifier.predict([q.query for q in qs])
        result["classifier_accuracy"] = 100 * sum(a == b for a, b in zip(gold, pred)) / len(qs)
        result["classifier_n_multi_gold"] = gold.count("multi")
        print("classifier accuracy", result["classifier_accuracy"])

    def evaluate(params: dict[str, Any]) -> dict[str, Any]:
        return scores_for(run_config(stage, eng, prep, params), qs)

    t = time.perf_counter()
    runs: dict[str, Any] = {}
    ms = [m for m in (10, 30, 50) if m <= args.depth]
    for m in ms:
        runs[f"Rerank-{m}"] = evaluate({"m_s": m, "m_u": m, "classification": "none"})
        print(f"Rerank-{m}", json.dumps(runs[f"Rerank-{m}"]["macro"]))
    result["score_seconds_rerank"] = time.perf_counter() - t
    if reranker is not None and cache_file is not None:
        scores = {"\x00".join(k): v for k, v in reranker._cache.items()}
        cache_file.write_text(json.dumps(scorer_id | {"scores": scores}))

    cls_mode = "classifier" if classifier is not None else "oracle"
    if args.params:
        best = {k: v for k, v in json.loads(Path(args.params).read_text())["params"].items()}
        best["m_s"], best["m_u"] = min(best["m_s"], args.depth), min(best["m_u"], args.depth)
    elif args.tune:
        t = time.perf_counter()
        stage.config = stage.config.model_copy(update={"classification": cls_mode})
        grid = {**PAPER_GRID, "m_s": ms, "m_u": ms}
        if args.first_stage_weights:
            grid["first_stage_weight"] = args.first_stage_weights
        tuned = tune(stage, eng, prep, grid)
        best = tuned["params"]
        result["tuning"] = {k: v for k, v in tuned.items()} | {"seconds": time.perf_counter() - t}
    else:
        best = {"m_s": 10, "m_u": 30, "tau_s": 0.8, "tau_m": 0.8, "n": 2}
    result["params"] = best
    print("params", best)
    runs["ToolRerank"] = evaluate({**best, "classification": cls_mode})
    print("ToolRerank", json.dumps(runs["ToolRerank"]["macro"]))
    w_best = best.get("first_stage_weight", 0.0)
    if reranker is not None and w_best > 0:  # the fair baseline for a fused ToolRerank: fused Rerank-m
        for m in ms:
            name = f"Rerank-{m} fused w={w_best}"
            runs[name] = evaluate({"m_s": m, "m_u": m, "classification": "none", "first_stage_weight": w_best})
            print(name, json.dumps(runs[name]["macro"]))
    ab: dict[str, Any] = {}
    pairs = [(10, 50), (10, 30), (30, 50), (10, 10), (30, 30), (50, 50), (50, 10), (30, 10), (50, 30)]
    for m_s, m_u in [] if args.no_ablations else [p for p in pairs if max(p) <= args.depth]:
        ab[f"m_s={m_s},m_u={m_u}"] = evaluate({**best, "m_s": m_s, "m_u": m_u, "classification": cls_mode})
    for mode in () if args.no_ablations else ("none", "single", "multi", "oracle"):
        ab[f"classification={mode}"] = evaluate({**best, "classification": mode})
    if not args.no_ablations:
        ab["extended=off"] = evaluate({**best, "classification": cls_mode, "extended": False})
        ab["extended=seen+unseen"] = evaluate({**best, "classification": cls_mode, "extend_seen": True})
        ab["similarity=tool_only"] = evaluate({**best, "classification": cls_mode, "similarity": "tool_only"})
        for w in args.first_stage_weights or []:
            ab[f"first_stage_weight={w}"] = evaluate({**best, "classification": cls_mode, "first_stage_weight": w})
    for name, change in json.loads(args.variants).items() if args.variants else ():
        ab[name] = evaluate({**best, "classification": cls_mode, **change})
        print(name, json.dumps(ab[name]["macro"]))
    result["runs"] = runs
    result["ablations"] = ab
    if reranker is not None:
        result["pairs_scored"] = reranker.pairs_scored
        if cache_file is not None:
            scores = {"\x00".join(k): v for k, v in reranker._cache.items()}
            cache_file.write_text(json.dumps(scorer_id | {"scores": scores}))
    result["seconds"] = time.perf_counter() - t_all
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("wrote", args.out, f"({result['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
