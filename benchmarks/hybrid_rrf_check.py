"""Re-check the hybrid RRF constant on ToolBench dev with a saved hybrid engine (old default 60 vs current).

python benchmarks/hybrid_rrf_check.py --engine /work/runs/engines/toolbench-hybrid --data ../shared/data
"""

from __future__ import annotations

import argparse

from toolrerank_plugins import Engine, load_queries
from toolrerank_plugins.evaluation import evaluate
from toolrerank_plugins.retrieval.hybrid import HybridConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", required=True, help="saved hybrid engine over the ToolBench corpus")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--rrf-k", type=int, nargs="+", default=[60, HybridConfig(fusion="rrf").rrf_k])
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # one thread is much faster on a shared, oversubscribed CPU
    engine = Engine.load(args.engine)
    if engine.config.retriever != "hybrid":
        raise SystemExit(f"{args.engine} is a {engine.config.retriever} engine; need a hybrid one")
    queries = load_queries(f"{args.data}/toolbench", split=args.split)
    for k in args.rrf_k:
        engine.config.hybrid.rrf_k = k
        report = evaluate(engine, queries, ks=(5, 10), batch_size=None)
        vals = {m: round(100 * report.overall[m], 1) for m in ("recall@5", "recall@10", "ndcg@5", "sufficiency@5")}
        print(f"rrf_k {k}: {vals}  p50 {report.latency_ms['p50']:.1f} ms")


if __name__ == "__main__":
    main()
