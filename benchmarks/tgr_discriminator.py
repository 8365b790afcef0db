"""Train the TGR dependency discriminator with one benchmark held out, and report P/R/F1 per class on it.

For each held-out dataset H in (api-bank, nestful, seal-tools): train on the labelled edges (edges.jsonl)
and the JSON-Schema data-flow edges of the other two, test on H's labelled edges plus sampled negatives
(4 per edge, like the paper's API-Bank test set: 60/500/60). Each fold's model is saved under --out.

    python benchmarks/tgr_discriminator.py --data ../shared/data --out /work/runs/helper_tgr/disc
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path

from toolrerank_plugins.graph.discriminator import DependencyDiscriminator, TrainConfig, make_pairs
from toolrerank_plugins.graph.schema_deps import SchemaDependencyDetector
from toolrerank_plugins.loaders import load_catalog

DATASETS = ("api-bank", "nestful", "seal-tools")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--out", default="/work/runs/helper_tgr/disc")
    ap.add_argument("--holdout", nargs="*", default=list(DATASETS))
    ap.add_argument("--max-schema-edges", type=int, default=150, help="per training dataset")
    ap.add_argument("--finetune-negatives", type=float, default=4.0)
    ap.add_argument("--test-negatives", type=float, default=4.0)
    ap.add_argument("--max-length", type=int, default=160)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4, help="pretraining learning rate")
    ap.add_argument("--finetune-lr", type=float, default=5e-5)
    ap.add_argument("--head-lr", type=float, default=None, help="learning rate of the 3-class head (default: as above)")
    ap.add_argument("--max-pretrain", type=int, default=320, help="subsample the pretraining pairs (CPU budget)")
    ap.add_argument("--max-finetune", type=int, default=480, help="subsample the fine-tuning pairs")
    ap.add_argument("--results", default="/work/runs/helper_tgr/discriminator_results.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    catalogs = {d: load_catalog(Path(args.data) / d) for d in DATASETS}
    detector = SchemaDependencyDetector()
    schema_edges = {}
    for d, cat in catalogs.items():
        labelled = {(e.source, e.target) for e in cat.edges}
        edges = [e for e in detector.detect(cat) if (e.source, e.target) not in labelled]
        schema_edges[d] = edges[: args.max_schema_edges]
        logging.info(
            "%s: %d labelled edges, %d schema edges (kept %d)", d, len(labelled), len(edges), len(schema_edges[d])
        )
    results: dict[str, object] = {"args": vars(args), "folds": {}}
    for held in args.holdout:
        train_sets = [d for d in DATASETS if d != held]
        pretrain, finetune = [], []
        for i, d in enumerate(train_sets):
            cat = catalogs[d]
            edges = list(cat.edges) + schema_edges[d]
            pretrain += make_pairs(cat, edges, negatives_per_edge=1.0, seed=10 + i, source=d)
            finetune += make_pairs(cat, edges, negatives_per_edge=args.finetune_negatives, seed=20 + i, source=d)
        rng = random.Random(0)
        rng.shuffle(pretrain)
        rng.shuffle(finetune)
        pretrain, finetune = pretrain[: args.max_pretrain], finetune[: args.max_finetune]
        test = make_pairs(
            catalogs[held], catalogs[held].edges, negatives_per_edge=args.test_negatives, seed=99, source=held
        )
        cfg = TrainConfig(
            pretrain_epochs=args.epochs,
            finetune_epochs=args.epochs,
            max_length=args.max_length,
            torch_threads=args.threads,
            learning_rate=args.lr,
            finetune_learning_rate=args.finetune_lr,
            head_learning_rate=args.head_lr,
        )
        t0 = time.perf_counter()
        model = DependencyDiscriminator("default", device="cpu", max_length=args.max_length)
        model.fit(pretrain, finetune, cfg)
        train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        report = model.evaluate(test)
        eval_s = time.perf_counter() - t1
        model.save(out / f"holdout-{held}")
        fold = {
            "train_on": train_sets,
            "n_pretrain": len(pretrain),
            "n_finetune": len(finetune),
            "n_test": len(test),
            "test_class_counts": {k: sum(1 for p in test if p.label == k) for k in range(3)},
            "train_seconds": round(train_s, 1),
            "test_pairs_per_second": round(len(test) / max(eval_s, 1e-9), 1),
            "report": report,
            "model": str(out / f"holdout-{held}"),
        }
        results["folds"][held] = fold  # type: ignore[index]
        logging.info("held out %s: %s", held, json.dumps(fold))
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
