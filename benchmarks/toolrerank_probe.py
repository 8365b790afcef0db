"""Probe a trained reranker: mean score of relevant vs irrelevant first-stage candidates, and relevant APIs
in the top 5 before and after reranking the first stage's top 10 (train and dev queries of ToolBench).

    python benchmarks/toolrerank_probe.py --engine /work/runs/engines/toolbench-bm25 \
        --model /work/runs/lead/ce/ce-all-3ep --data ../shared/data --queries 40
"""

from __future__ import annotations

import argparse

import numpy as np

from toolrerank_plugins import Engine, load_queries
from toolrerank_plugins.rerank.cross_encoder import load_reranker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--queries", type=int, default=40, help="first N queries of each split")
    ap.add_argument("--depth", type=int, default=10)
    args = ap.parse_args()
    engine, reranker = Engine.load(args.engine), load_reranker(args.model)
    for split in ("train", "dev"):
        pos: list[float] = []
        neg: list[float] = []
        hits_first = hits_rerank = 0
        for q in load_queries(f"{args.data}/toolbench", split=split)[: args.queries]:
            cands = engine.search(q.query, args.depth)
            scores = reranker.score(q.query, [engine.render(c.tool) for c in cands])
            rel = set(q.relevant)
            for c, s in zip(cands, scores):
                (pos if c.id in rel else neg).append(s)
            order = np.argsort(-np.asarray(scores), kind="stable")
            hits_first += len(rel & {c.id for c in cands[:5]})
            hits_rerank += len(rel & {cands[i].id for i in order[:5]})
        print(
            f"{split}: mean score relevant {np.mean(pos):.3f} (n={len(pos)}) vs irrelevant {np.mean(neg):.3f} "
            f"(n={len(neg)}); relevant in top 5: first stage {hits_first}, reranked {hits_rerank}"
        )


if __name__ == "__main__":
    main()
