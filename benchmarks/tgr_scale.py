"""Graph construction at ToolBench scale: build time, candidate pairs and edges at 5k / 20k / 47k APIs.

Subsets are whole tools drawn at random (seed 0) until the size is reached. Per size it times:
the schema graph (zero-training source, what the ``tgr`` stage builds by default), and candidate-pair
pruning for the discriminator (same tool + faiss kNN + schema-compatible pairs). Embeddings come from a
saved engine (``--engine``) when given, else from the hashing FakeEmbedder (pruning cost does not depend
on the values; pair choice does). Discriminator scoring is timed on a sample of pairs and the full-graph
scoring time is *extrapolated* from that rate (reported as such).

    python benchmarks/tgr_scale.py --data ../shared/data --sizes 5000 20000 47000 \
        --out /work/runs/helper_tgr/tgr_scale.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.builder import GraphBuildConfig, PruningConfig, build_graph, candidate_pairs
from toolrerank_plugins.loaders import load_catalog
from toolrerank_plugins.records import ToolSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000, 47000])
    ap.add_argument("--engine", help="saved ToolBench engine (its embeddings are used for kNN pruning)")
    ap.add_argument("--knn", type=int, default=5)
    ap.add_argument("--discriminator", help="trained discriminator: time scoring on a sample of pairs")
    ap.add_argument("--sample-pairs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for discriminator scoring")
    ap.add_argument("--out", default="/work/runs/helper_tgr/tgr_scale.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    t = time.perf_counter()
    emb_all: np.ndarray | None = None
    if args.engine:
        from toolrerank_plugins.engine import Engine

        engine = Engine.load(args.engine)
        full = engine.catalog
        assert engine.dense is not None
        emb_all, ids_all = engine.dense.embeddings, engine.dense.ids
        emb_source = f"engine {args.engine}"
    else:
        full = load_catalog(Path(args.data) / "toolbench", with_edges=False)
        ids_all = full.ids
        emb_source = "FakeEmbedder(128) hashing embeddings (no engine given)"
    load_s = time.perf_counter() - t
    row_of = {tid: i for i, tid in enumerate(ids_all)}
    tools = sorted(full.tools().items())
    random.Random(0).shuffle(tools)
    results: dict[str, Any] = {
        "n_catalog": len(full),
        "load_seconds": round(load_s, 1),
        "embeddings": emb_source,
        "knn": args.knn,
        "sizes": {},
    }
    disc = None
    if args.discriminator:
        import torch

        from toolrerank_plugins.graph.discriminator import DependencyDiscriminator

        torch.set_num_threads(args.threads)
        results["discriminator"] = args.discriminator
        results["threads"] = args.threads
        disc = DependencyDiscriminator.load(args.discriminator, device="cpu")
    for n in args.sizes:
        specs: list[ToolSpec] = []
        for _, apis in tools:
            if len(specs) >= n:
                break
            specs.extend(apis)
        cat = Catalog(specs[:n] if n < len(full) else specs, source=f"toolbench[{n}]")
        ids = cat.ids
        if emb_all is not None:
            emb = emb_all[[row_of[i] for i in ids]]
        else:
            from toolrerank_plugins.render import render_tool
            from toolrerank_plugins.testing import FakeEmbedder

            emb = FakeEmbedder(128).encode([render_tool(s) for s in cat])
        timings: dict[str, float] = {}
        t = time.perf_counter()
        g = build_graph(cat, GraphBuildConfig(sources=["declared", "schema"]), timings=timings)
        schema_s = time.perf_counter() - t
        t = time.perf_counter()
        pairs = candidate_pairs(cat, emb, ids, PruningConfig(knn=args.knn))
        pairs_s = time.perf_counter() - t
        row: dict[str, Any] = {
            "n_apis": len(cat),
            "schema_graph_seconds": round(schema_s, 2),
            "schema_graph_timings": {k: round(v, 2) for k, v in timings.items()},
            "schema_edges": g.n_edges,
            "connected_fraction": round(g.stats()["connected_fraction"], 3),
            "candidate_pairs": len(pairs),
            "candidate_pairs_seconds": round(pairs_s, 2),
            "all_pairs": len(cat) * (len(cat) - 1) // 2,
        }
        if disc is not None:
            from toolrerank_plugins.graph.discriminator import pair_text

            sample = random.Random(1).sample(pairs, min(args.sample_pairs, len(pairs)))
            row["load_average_before"] = round(os.getloadavg()[0], 2)
            t = time.perf_counter()
            disc.predict_proba([(pair_text(cat[a]), pair_text(cat[b])) for a, b in sample])
            score_s = time.perf_counter() - t
            rate = len(sample) / score_s
            row["discriminator_sample_pairs"] = len(sample)
            row["discriminator_sample_seconds"] = round(score_s, 1)
            # The 1-minute load average before and after scoring: the rate depends on what else runs.
            row["load_average_after"] = round(os.getloadavg()[0], 2)
            row["discriminator_pairs_per_second"] = round(rate, 1)
            row["discriminator_full_scoring_seconds_extrapolated"] = round(len(pairs) / rate, 0)
        results["sizes"][str(n)] = row
        logging.info("%d APIs: %s", n, row)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
