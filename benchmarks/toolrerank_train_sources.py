"""Train a reranker from a chosen mix of data sources (per-source query and negative counts).

`toolrerank train reranker` uses one negative count for every source; this script is for the data-source
experiments in docs/benchmarks/toolrerank.md (what ToolBench labels, other benchmarks' labels and catalog
pseudo-queries each add), where ToolBench's 230 queries get more negatives than the large sources::

    python benchmarks/toolrerank_train_sources.py --out /work/runs/lead/ce/X \
        --source ../shared/data/toolbench 230 12 --source ../shared/data/seal-tools 400 4 \
        --engine ../shared/data/toolbench=/work/runs/engines/toolbench-hybrid --first-stage hybrid \
        --num-layers 6 --max-length 256
"""

from __future__ import annotations

import argparse
import json
import logging

from toolrerank_plugins.rerank.sources import collect_pairs, engine_map, source_loader
from toolrerank_plugins.rerank.training import TrainingSource, train_cross_encoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", nargs=3, action="append", default=[], metavar=("DIR", "QUERIES", "NEGATIVES"))
    ap.add_argument("--pseudo", nargs=2, action="append", default=[], metavar=("DIR", "APIS"))
    ap.add_argument("--mask-description", action="store_true", help="pseudo pairs: APIs rendered without descriptions")
    ap.add_argument("--engine", action="append", default=[], help="DATA_DIR=SAVED_ENGINE_DIR")
    ap.add_argument("--first-stage", default="bm25", choices=["bm25", "dense", "hybrid"])
    ap.add_argument("--rrf-k", type=int, default=5, help="hybrid RRF constant for a loaded engine's first stage")
    ap.add_argument("--negative-depth", type=int, default=30)
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--head-lr", type=float, default=None, help="learning rate of the scoring head (default: --lr)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    load = source_loader("train", engine_map(args.engine), args.first_stage)

    def source(d: str) -> TrainingSource:  # a loaded engine's first stage, with this run's RRF constant
        src = load(d)
        cfg = src.engine.config
        src.engine.config = cfg.model_copy(
            update={"retriever": args.first_stage, "hybrid": cfg.hybrid.model_copy(update={"rrf_k": args.rrf_k})}
        )
        return src

    pairs, seen, recipe = collect_pairs(
        source,
        [(d, int(n_q), int(n_neg)) for d, n_q, n_neg in args.source],
        [(d, int(n_apis), 4) for d, n_apis in args.pseudo],
        negative_depth=args.negative_depth,
        seed=args.seed,
        mask_description=args.mask_description,
    )
    facts = train_cross_encoder(
        pairs,
        args.out,
        seen_tools=sorted(seen),
        max_length=args.max_length,
        batch_size=args.batch_size,
        epochs=args.epochs,
        lr=args.lr,
        head_lr=args.head_lr,
        threads=args.threads,
        num_layers=args.num_layers,
        seed=args.seed,
        extra_meta={"sources": recipe, "first_stage": args.first_stage, "split": "train"},
    )
    print(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
