"""ToolRerank at interactive speed on a CPU (issue 28 item 4): end-to-end latency of settings side by side.

Each setting is a cross-encoder backend (``torch`` / ``onnx`` / ``onnx-int8``), its threads (a number, or ``auto``:
chosen per call by measured speed), a pair ``max_length`` and stage knobs changed from the tuned ones (``m_s``,
``m_u``, ``extended``, ...). Over the 47k-API ToolBench engine (hybrid first stage), for every dev query and every
setting, interleaved in one run (the order of the settings rotates from query to query, so a change of load
falls on all of them alike), nothing cached between queries:

* ``engine``: ``engine.search_detailed(query, 5)`` with the setting's toolrerank stage (first stage, truncation,
  cross-encoder, classifier, hierarchy step, extended list);
* ``bare``: the same first stage (``engine.retrieve``), then the same backend's bare model over exactly the pairs
  the stage scored for that query (the truncated list plus what its extended list added): for ``torch``
  ``CrossEncoder.predict``, for ONNX the tokenizer and ``InferenceSession.run``, at the setting's thread count
  (``auto``: all cores), sorted; the ratio ``engine / bare`` is the stage's own overhead.

Quality of the same settings: benchmarks/toolrerank_eval.py (``--backend``, ``--max-length``, ``--variants``).
Commands and numbers: docs/benchmarks/toolrerank.md ("Interactive latency on a CPU").

    python benchmarks/toolrerank_interactive.py --engine runs/engines/toolbench-hybrid --rrf-k 5 \\
        --model runs/toolrerank-cpu/ce-A --classifier runs/toolrerank-cpu/classifier-toolbench \\
        --params runs/toolrerank-cpu/tuned.json --settings benchmarks/toolrerank_interactive_settings.json \\
        --out runs/toolrerank-cpu/interactive.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_queries
from toolrerank_plugins.rerank.cross_encoder import OnnxReranker, SentenceTransformerReranker
from toolrerank_plugins.rerank.truncation import adaptive_truncate
from toolrerank_plugins.retrieval.hybrid import first_stage_from_parts
from toolrerank_plugins.stages import StageSpec, build_stage

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
#: Settings when no --settings file is given: the three backends at the tuned knobs and with the extended list off.
DEFAULT_SETTINGS = [
    {"name": f"{b} {e}", "backend": b, "threads": "auto", "params": {"extended": e == "ext-on"}}
    for b in ("torch", "onnx", "onnx-int8")
    for e in ("ext-on", "ext-off")
]


def pct(v: list[float]) -> dict[str, float]:
    return {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "mean": float(np.mean(v))}


class Setting:
    """One setting: its engine view (shared indexes) with its own stage, and its bare scorer."""

    def __init__(self, spec: dict[str, Any], base: Engine, args: argparse.Namespace, tuned: dict[str, Any]) -> None:
        self.name = spec["name"]
        self.spec = spec
        self.params = {**tuned, **spec.get("params", {})}
        threads = spec.get("threads", "auto")
        self.threads = None if threads == "auto" else int(threads)
        stage_params = {
            **self.params,
            "model_path": args.model,
            "device": "cpu",
            "backend": spec.get("backend", "torch"),
            "threads": self.threads,
            "max_length": spec.get("max_length"),
        }
        if args.classifier:
            stage_params |= {"classifier_path": args.classifier, "classification": "classifier"}
        else:
            stage_params["classification"] = "single"
        # the first-stage depth of the quality runs (toolrerank_eval.py --depth): an extended API ranked below
        # the truncation keeps its first-stage score, so the depth changes rankings, not only the time
        depth = max(args.depth, self.params["m_s"], self.params["m_u"])
        config = base.config.model_copy(update={"depth": depth})
        # a view of the loaded indexes (nothing re-encoded) with this setting's stage
        self.engine = Engine.from_parts(
            base.catalog, config, first_stage_from_parts(config.retriever, base.first_stage.parts, config)
        )
        self.stage = build_stage(StageSpec(type="toolrerank", params=stage_params), self.engine.context)
        self.engine.stages = [self.stage]
        self.reranker: Any = self.stage.reranker  # type: ignore[attr-defined]
        self.seen = self.stage.seen_tools(self.engine.context)  # type: ignore[attr-defined]
        self.times: dict[str, list[float]] = {"engine": [], "bare": [], "bare_first_stage": [], "bare_model": []}
        self.stage_ms: list[float] = []
        self.first_stage_ms: list[float] = []
        self.pairs: list[int] = []

    def bare_threads(self) -> int:
        return self.threads or (os.cpu_count() or 1)

    def run_engine(self, q: str) -> Any:
        t = time.perf_counter()
        res = self.engine.search_detailed(q, 5)
        self.times["engine"].append((time.perf_counter() - t) * 1000)
        self.stage_ms.append(res.timings_ms.get(self.stage.name, 0.0))
        self.first_stage_ms.append(sum(v for k, v in res.timings_ms.items() if k not in (self.stage.name, "total")))
        trace = res.trace[self.stage.name]
        self.pairs.append(trace["truncated_to"] + len(trace.get("added", [])))
        return res

    def run_bare(self, q: str, res: Any) -> None:
        e = self.engine
        added = [e.catalog[a] for a in res.trace[self.stage.name].get("added", [])]
        t = time.perf_counter()
        cands = e.retrieve([q], e.config.depth)[0]
        m_s, m_u = self.params["m_s"], self.params["m_u"]
        kept, _ = adaptive_truncate(cands, lambda c: c.tool.tool_key in self.seen, m_s, m_u)
        texts = [e.render(c.tool) for c in kept] + [e.render(a) for a in added]
        t1 = time.perf_counter()
        scores = self.bare_scores(q, texts)
        _ = np.argsort(-scores, kind="stable")[:5]
        t2 = time.perf_counter()
        self.times["bare"].append((t2 - t) * 1000)
        self.times["bare_first_stage"].append((t1 - t) * 1000)
        self.times["bare_model"].append((t2 - t1) * 1000)

    def bare_scores(self, q: str, texts: list[str]) -> np.ndarray:
        import torch

        from toolrerank_plugins.encoders import intra_op_threads

        if isinstance(self.reranker, SentenceTransformerReranker):
            with intra_op_threads(self.bare_threads()), torch.inference_mode():
                return np.asarray(
                    self.reranker.model.predict(
                        [(q, x) for x in texts],
                        batch_size=64,
                        activation_fn=torch.nn.Sigmoid(),
                        show_progress_bar=False,
                    )
                )
        assert isinstance(self.reranker, OnnxReranker)
        session = self.reranker._session(self.bare_threads())
        enc = self.reranker.tokenizer(
            [q] * len(texts),
            texts,
            padding=True,
            truncation=True,
            max_length=self.reranker.max_length,
            return_tensors="np",
        )
        feed = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
        return np.asarray(session.run(["score"], feed)[0])

    def summary(self) -> dict[str, Any]:
        eng, bare = self.times["engine"], self.times["bare"]
        return {
            "spec": self.spec,
            "params": self.params,
            **{f"{k}_ms": pct(v) for k, v in self.times.items()},
            "stage_ms": pct(self.stage_ms),
            "engine_first_stage_ms": pct(self.first_stage_ms),
            "ratio_p50": float(np.percentile(eng, 50) / np.percentile(bare, 50)),
            "ratio_p95": float(np.percentile(eng, 95) / np.percentile(bare, 95)),
            "pairs_scored_per_query": pct([float(x) for x in self.pairs]),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--engine", required=True, help="saved ToolBench engine (hybrid)")
    ap.add_argument("--rrf-k", type=int, default=None, help="override the loaded engine's hybrid RRF constant")
    ap.add_argument("--model", required=True)
    ap.add_argument("--classifier", default=None)
    ap.add_argument("--params", required=True, help="JSON with the tuned stage params under 'params'")
    ap.add_argument("--settings", default=None, help="JSON list of settings (see the module docs)")
    ap.add_argument("--depth", type=int, default=50, help="first-stage depth, as in the quality runs")
    ap.add_argument("--queries", type=int, default=0, help="first N dev queries (0: all)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the process (the query encoder's wide)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    base = Engine.load(args.engine)
    if args.rrf_k is not None:
        base.config = base.config.model_copy(
            update={"hybrid": base.config.hybrid.model_copy(update={"rrf_k": args.rrf_k})}
        )
    tuned = json.loads(Path(args.params).read_text())["params"]
    specs = json.loads(Path(args.settings).read_text()) if args.settings else DEFAULT_SETTINGS
    settings = [Setting(spec, base, args, tuned) for spec in specs]
    qs = [q.query for q in load_queries(Path(args.data) / "toolbench", split="dev")]
    qs = qs[: args.queries] if args.queries else qs
    for s in settings:  # warm-up: model load, ONNX export (cached), first-call allocations, both thread options
        for q in qs[-args.warmup :]:
            s.run_bare(q, s.run_engine(q))
        for v in (*s.times.values(), s.stage_ms, s.first_stage_ms, s.pairs):
            v.clear()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    for i, q in enumerate(qs):
        for j in range(len(settings)):
            s = settings[(i + j) % len(settings)]
            s.run_bare(q, s.run_engine(q))
    out = {
        "n_queries": len(qs),
        "threads": args.threads,
        "tuned_params": tuned,
        "settings": {s.name: s.summary() for s in settings},
        "seconds": time.perf_counter() - t0,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"{'setting':34} {'engine p50/p95':>16} {'bare p50/p95':>16} {'ratio':>6} {'stage':>6} {'model':>6} pairs")
    for name, r in out["settings"].items():
        e, b = r["engine_ms"], r["bare_ms"]
        print(
            f"{name:34} {e['p50']:7.1f}/{e['p95']:7.1f} {b['p50']:7.1f}/{b['p95']:7.1f} {r['ratio_p50']:6.2f} "
            f"{r['stage_ms']['p50']:6.1f} {r['bare_model_ms']['p50']:6.1f} {r['pairs_scored_per_query']['p50']:.0f}"
        )
    print("load", load_before, os.getloadavg())


if __name__ == "__main__":
    main()
