"""TGR retrieval quality: base dense vs +TGR with different graphs vs +expansion (paper Tables 2 and 5).

Every variant reuses the base engine's embeddings (no re-encoding), so rows differ only by the graph.
Graphs, and whether they leak the evaluation labels:

- ``schema``: JSON-Schema data flow only (no labels; no leakage).
- ``disc``: the discriminator trained with this dataset held out (benchmarks/tgr_discriminator.py), on
  pruned candidate pairs (no leakage: this dataset's edges were not seen in training).
- ``labelled``: the dataset's edges.jsonl. These edges were DERIVED FROM THE SAME dev queries that are
  evaluated (API-Bank, NESTFUL: all queries are dev), so this row is an upper bound with leakage, the
  analogue of the paper's TGR-m (manual graph), not a fair result.

    python benchmarks/tgr_eval.py --data ../shared/data --datasets api-bank nestful \
        --out /work/runs/helper_tgr/tgr_eval.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.evaluation import evaluate
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.stages import StageSpec

KEYS = ("recall@5", "recall@10", "ndcg@5", "ndcg@10", "sufficiency@5", "sufficiency@10")


def variants(
    dataset: str, disc_dir: Path | None, alphas: list[float], directions: list[str], graph_file: str | None = None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": "base dense", "graph": None, "params": None}]
    graphs: list[tuple[str, dict[str, Any]]] = [("schema", {"sources": ["schema"]})]
    model = disc_dir / f"holdout-{dataset}" if disc_dir else None
    if model is not None and (model / "discriminator.json").exists():
        graphs.append(("disc", {"sources": ["discriminator"], "discriminator_path": str(model)}))
    if graph_file:  # a prebuilt graph (`toolrerank graph build ... --out FILE`), e.g. a discriminator graph
        graphs.append((f"file {Path(graph_file).name}", {"sources": ["file"], "graph_file": graph_file}))
    graphs.append(("labelled (leaks dev labels)", {"sources": ["declared"]}))
    for gname, gparams in graphs:
        for direction in directions:
            for alpha in alphas:
                out.append(
                    {
                        "name": f"+TGR {gname} {direction} a={alpha}",
                        "graph": gname,
                        "params": {**gparams, "direction": direction, "alpha": alpha},
                    }
                )
        out.append(
            {
                "name": f"+expansion only ({gname})",
                "graph": gname,
                "params": {**gparams, "propagate": False, "expansion": {"enabled": True}},
            }
        )
        out.append(
            {
                "name": f"+TGR {gname} {directions[0]} a={alphas[0]} +expansion",
                "graph": gname,
                "params": {**gparams, "direction": directions[0], "alpha": alphas[0], "expansion": {"enabled": True}},
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--datasets", nargs="+", default=["api-bank", "nestful", "seal-tools"])
    ap.add_argument("--split", default="dev")
    ap.add_argument("--engine", action="append", default=[], help="DATASET=SAVED_ENGINE_DIR (e.g. ToolBench)")
    ap.add_argument("--disc", default="/work/runs/helper_tgr/disc", help="folder of holdout-<dataset> models")
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 1.0])
    ap.add_argument("--directions", nargs="+", default=["into_prerequisite", "symmetric"])
    ap.add_argument("--limit", type=int, default=0, help="evaluate only the first N queries")
    ap.add_argument("--graph-file", action="append", default=[], help="DATASET=GRAPH_JSON: also evaluate this graph")
    ap.add_argument("--only", nargs="*", help="only variants whose name contains one of these")
    ap.add_argument("--out", default="/work/runs/helper_tgr/tgr_eval.json")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids OpenMP spinning on a busy CPU)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engines = dict(e.split("=", 1) for e in args.engine)
    graph_files = dict(g.split("=", 1) for g in args.graph_file)
    results: dict[str, Any] = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    for ds in args.datasets:
        t = time.perf_counter()
        if ds in engines:
            base = Engine.load(engines[ds])
            catalog = base.catalog
        else:
            catalog = load_catalog(Path(args.data) / ds)
            base = Engine.build(catalog, pipeline_config("dense"))
        build_s = time.perf_counter() - t
        queries = load_queries(Path(args.data) / ds, split=args.split)
        if args.limit:
            queries = queries[: args.limit]
        assert base.dense is not None
        cache = base.dense.embedding_cache()
        rows = results.setdefault(ds, {"n_queries": len(queries), "n_apis": len(catalog), "rows": {}})
        rows["base_build_seconds"] = round(build_s, 1)
        disc_dir = Path(args.disc) if args.disc else None
        for v in variants(ds, disc_dir, args.alphas, args.directions, graph_files.get(ds)):
            if args.only and not any(o in v["name"] for o in args.only):
                continue
            t = time.perf_counter()
            if v["params"] is None:
                engine = base
                graph_stats = None
            else:
                stages = [StageSpec(type="tgr", params=v["params"])]
                cfg = pipeline_config("dense", stages=stages)
                engine = Engine.build(catalog, cfg, embedder=base.embedder, embedding_cache=cache)
                graph_stats = engine.stages[0].graph.stats()  # type: ignore[attr-defined]
            index_s = time.perf_counter() - t
            rep = evaluate(engine, queries, ks=(5, 10), batch_size=None)
            row = {k: round(100 * rep.overall[k], 1) for k in KEYS}
            row.update(
                {
                    "graph": v["graph"],
                    "params": v["params"],
                    "graph_stats": graph_stats,
                    "index_seconds": round(index_s, 2),
                    "latency_ms": rep.to_dict().get("latency_ms"),
                    "groups": {g: {k: round(100 * m[k], 1) for k in KEYS} for g, m in rep.groups.items()},
                }
            )
            rows["rows"][v["name"]] = row
            logging.info("%s | %s | %s", ds, v["name"], {k: row[k] for k in KEYS})
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
