"""Iteration-aware training of the retriever (Xu et al., Sec. 4.3) with a SIMULATED LLM's feedback as the signal.

For each dev set with a train split: the ``iterative_feedback`` stage runs over the train queries on a dense
engine (the bundled MiniLM, the retriever being trained) with :class:`toolrerank_plugins.testing.SimulatedLLM`
of quality ``--p`` as the LLM (:func:`toolrerank_plugins.llm.datagen.generate_feedback_traces`); the traces train
the bi-encoder (:func:`toolrerank_plugins.llm.feedback_training.train_feedback_retriever`, the paper's joint
loss, alpha 1, one hard negative from each round's top 10); then, on the same dev sample as
``benchmarks/llm_quality.py`` (seeded, ``--sample``), four pipelines:

* ``default`` — the untrained default pipeline (the baseline);
* ``default, trained encoder`` — the same with the trained encoder (no LLM stage, queries unprefixed);
* ``default + feedback`` — the default with the ``iterative_feedback`` stage first (simulated LLM at ``--p``);
* ``default + feedback, trained encoder`` — the same with the trained encoder: the stage prefixes its queries with
  "Iteration t: " as the paper does (the folder's ``toolrerank_feedback.json`` switches it on).

CPU-sized: at most ``--train-queries`` train queries and ``--max-steps`` steps per set. ToolBench is left out by
default: evaluating a trained encoder means re-encoding its 47k APIs (15+ min here).

    python benchmarks/llm_feedback_training.py --data ../shared/data --datasets seal-tools metatool \\
        --cache-dir runs/emb --models runs/llm/feedback_models --out runs/llm/feedback_training.json
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from llm_quality import config_with, embedding_cache, run_queries, sample_queries

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.llm import register_llm
from toolrerank_plugins.llm.datagen import generate_feedback_traces
from toolrerank_plugins.llm.feedback import FeedbackConfig
from toolrerank_plugins.llm.feedback_training import train_feedback_retriever
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.testing import SimulatedLLM

logger = logging.getLogger("llm_feedback_training")


def _with_encoder(config: EngineConfig, folder: Path) -> EngineConfig:
    data = config.model_dump(mode="json")
    data["dense"]["model_name_or_path"] = str(folder)
    return EngineConfig.model_validate(data)


def _means(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {m: round(100 * statistics.fmean(r["metrics"][m] for r in rows), 2) for m in ("recall@5", "sufficiency@5")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--datasets", nargs="+", default=["seal-tools", "metatool"])
    ap.add_argument("--p", type=float, default=0.9, help="quality of the simulated LLM giving the feedback")
    ap.add_argument("--train-queries", type=int, default=500)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--sample", type=int, default=100, help="dev queries (the same seeded sample as llm_quality)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--models", type=Path, required=True, help="folder for the trained encoders")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("toolrerank_plugins").setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    result: dict[str, Any] = {"simulation": True, "argv": sys.argv[1:] if argv is None else list(argv), "p": args.p}
    result["datasets"] = {}
    for ds in args.datasets:
        catalog = load_catalog(data / ds)
        allq = load_queries(data / ds)
        train = sample_queries([q for q in allq if q.split == "train"], args.train_queries, args.seed)
        dev = sample_queries([q for q in allq if q.split == "dev"], args.sample, args.seed)
        cache = embedding_cache(data, ds, args.cache_dir, None)
        entry: dict[str, Any] = {"train_queries": len(train), "dev_queries": len(dev)}
        # 1. traces: the feedback loop over the train queries on the dense retriever being trained
        t = time.perf_counter()
        dense = Engine.build(catalog, pipeline_config("dense"), embedding_cache=cache)
        sim = SimulatedLLM(catalog, train, p=args.p, seed=args.seed)
        traces = generate_feedback_traces(dense, train, sim, config=FeedbackConfig())
        entry["traces"] = {
            "seconds": round(time.perf_counter() - t, 1),
            "rounds_per_query": round(statistics.fmean(len(r["rounds"]) for r in traces), 2),
            "stop_reasons": dict(Counter(str(r["stop_reason"]) for r in traces)),
            "fallbacks": sum(bool(r["fallback"]) for r in traces),
            "answers": sim.stats(),
        }
        logger.info("%s: %d traces %s", ds, len(traces), entry["traces"])
        # 2. iteration-aware training
        folder = args.models / ds
        report = train_feedback_retriever(
            traces,
            catalog,
            folder,
            batch_size=args.batch_size,
            max_steps=args.max_steps,
            device="cpu",
            seed=args.seed,
            overwrite=True,
        )
        entry["training"] = report.to_dict()
        logger.info("%s: trained %s", ds, entry["training"])
        # 3. dev: untrained vs trained, without and with the feedback stage (simulated LLM, same p)
        dev_sim = SimulatedLLM(catalog, dev, p=args.p, seed=args.seed)
        register_llm("default", dev_sim)
        rows: dict[str, Any] = {}
        plain = config_with(None, "first")
        fb = config_with("iterative_feedback", "first")
        t = time.perf_counter()
        trained_plain = Engine.build(catalog, _with_encoder(plain, folder))
        entry["encode_trained_s"] = round(time.perf_counter() - t, 1)
        trained_cache = trained_plain.first_stage.embedding_cache()
        for name, engine in (
            ("default", Engine.build(catalog, plain, embedding_cache=cache)),
            ("default, trained encoder", trained_plain),
            ("default + feedback", Engine.build(catalog, fb, embedding_cache=cache)),
            (
                "default + feedback, trained encoder",
                Engine.build(catalog, _with_encoder(fb, folder), embedding_cache=trained_cache),
            ),
        ):
            stage = "iterative_feedback" if "feedback" in name.split(",")[0] else None
            r = run_queries(engine, dev, stage)
            rows[name] = {**_means(r), "per_query_recall@5": [x["metrics"]["recall@5"] for x in r]}
            logger.info("%s %-38s %s", ds, name, _means(r))
        base = rows["default"]["per_query_recall@5"]
        for row in rows.values():
            diffs = [a - b for a, b in zip(row["per_query_recall@5"], base)]
            rng = random.Random(args.seed)
            boots = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(1000))
            row["recall@5_vs_default_95ci"] = [round(100 * boots[25], 2), round(100 * boots[974], 2)]
        entry["dev"] = rows
        result["datasets"][ds] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1))
    for ds, entry in result["datasets"].items():
        print(
            f"{ds}: "
            + "; ".join(f"{k} R@5 {v['recall@5']:.1f} Suff@5 {v['sufficiency@5']:.1f}" for k, v in entry["dev"].items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
