"""Per-query latency of the ToolRerank stage on the 47k ToolBench corpus vs the bare cross-encoder.

For each dev query, interleaved in the same run and with nothing cached between queries:

* ``toolrerank``: ``engine.search_detailed(query, 5)`` (first stage + truncation + cross-encoder +
  classifier + hierarchy step);
* ``direct``: the same first stage, the same truncated candidates, scored with
  ``sentence_transformers.CrossEncoder.predict`` directly and sorted;
* ``direct_same_pairs``: as ``direct`` but also scoring the APIs the stage's extended list added for that
  query (so both paths run the cross-encoder over exactly the same pairs; the ratio then isolates the
  stage's own overhead: classifier, hierarchy step, bookkeeping).

Usage: see docs/benchmarks/toolrerank.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.rerank.truncation import adaptive_truncate
from toolrerank_plugins.retrieval.hybrid import first_stage_from_parts
from toolrerank_plugins.stages import StageSpec, build_stage

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--engine", default=None, help="saved ToolBench engine (else BM25 is built in memory)")
    ap.add_argument("--retriever", default="bm25")
    ap.add_argument("--rrf-k", type=int, default=None, help="override a loaded engine's hybrid RRF constant")
    ap.add_argument("--model", required=True)
    ap.add_argument("--classifier", default=None)
    ap.add_argument("--params", default=None, help="best.json (params) from tuning")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    root = Path(args.data) / "toolbench"
    if args.engine:
        engine = Engine.load(args.engine)
        update: dict[str, Any] = {"retriever": args.retriever}
        if args.rrf_k is not None:
            update["hybrid"] = engine.config.hybrid.model_copy(update={"rrf_k": args.rrf_k})
        config = engine.config.model_copy(update=update)
        # a view of the loaded indexes with the requested first stage (nothing re-encoded)
        engine = Engine.from_parts(
            engine.catalog, config, first_stage_from_parts(args.retriever, engine.first_stage.parts, config)
        )
    else:
        engine = Engine.build(load_catalog(root), EngineConfig(retriever=args.retriever))  # type: ignore[arg-type]
    params = json.loads(Path(args.params).read_text())["params"] if args.params else {"m_s": 10, "m_u": 30}
    stage_params = {**params, "model_path": args.model, "device": "cpu"}
    if args.classifier:
        stage_params |= {"classifier_path": args.classifier, "classification": "classifier"}
    else:
        stage_params["classification"] = "single"
    engine.config = engine.config.model_copy(update={"depth": max(params["m_s"], params["m_u"])})
    stage = build_stage(StageSpec(type="toolrerank", params=stage_params), engine.context)
    engine.stages = [stage]
    ce = stage.reranker.model  # type: ignore[attr-defined]
    seen = stage.seen_tools(engine.context)
    qs = [q.query for q in load_queries(root, split="dev")][: args.queries]
    for q in qs[:3]:  # warm-up (model load, first-call allocations)
        engine.search_detailed(q, 5)
    tr, direct, same, scored, stage_only = [], [], [], [], []
    load_before = os.getloadavg()
    for q in qs:
        t = time.perf_counter()
        res = engine.search_detailed(q, 5)
        tr.append((time.perf_counter() - t) * 1000)
        stage_only.append(res.timings_ms.get(stage.name, 0.0))
        scored.append(res.trace[stage.name]["truncated_to"] + len(res.trace[stage.name].get("added", [])))
        t = time.perf_counter()
        cands = engine.retrieve([q], engine.config.depth)[0]
        kept, _ = adaptive_truncate(cands, lambda c: c.tool.tool_key in seen, params["m_s"], params["m_u"])
        with torch.inference_mode():
            s = ce.predict([(q, engine.render(c.tool)) for c in kept], batch_size=64, activation_fn=torch.nn.Sigmoid())
        _ = [kept[i] for i in np.argsort(-s, kind="stable")][:5]
        direct.append((time.perf_counter() - t) * 1000)
        added = [engine.catalog[a] for a in res.trace[stage.name].get("added", [])]
        t = time.perf_counter()
        cands = engine.retrieve([q], engine.config.depth)[0]
        kept, _ = adaptive_truncate(cands, lambda c: c.tool.tool_key in seen, params["m_s"], params["m_u"])
        texts = [engine.render(c.tool) for c in kept] + [engine.render(a) for a in added]
        with torch.inference_mode():
            s = ce.predict([(q, x) for x in texts], batch_size=64, activation_fn=torch.nn.Sigmoid())
        _ = np.argsort(-s, kind="stable")[:5]
        same.append((time.perf_counter() - t) * 1000)

    def pct(v: list[float]) -> dict[str, float]:
        return {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "mean": float(np.mean(v))}

    out = {
        "n_queries": len(qs),
        "retriever": args.retriever,
        "params": params,
        "threads": args.threads,
        "toolrerank_ms": pct(tr),
        "toolrerank_stage_only_ms": pct(stage_only),
        "direct_cross_encoder_ms": pct(direct),
        "direct_same_pairs_ms": pct(same),
        "ratio_p50": float(np.percentile(tr, 50) / np.percentile(direct, 50)),
        "ratio_p50_same_pairs": float(np.percentile(tr, 50) / np.percentile(same, 50)),
        "pairs_scored_per_query": pct([float(x) for x in scored]),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
