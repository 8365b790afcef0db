"""What each LLM stage gains on top of the default pipeline: a SIMULATED host LLM of quality p, and a real small LLM.

Two modes, both against the ``default`` pipeline without the LLM stage, on the same sampled dev queries:

* ``--mode simulated`` (a SIMULATION, labelled so wherever its numbers appear): every LLM stage answered by
  :class:`toolrerank_plugins.testing.SimulatedLLM` at each quality ``p`` (``--p``): Recall@5 / Sufficiency@5
  gain over the default, split into multi-tool and single-tool queries, LLM calls, estimated tokens and the
  added latency per query (the simulated model's configured latency per call, ``--llm-latency-ms``, times the
  calls, plus our own measured overhead: stage time outside the LLM call, re-retrieval included).
* ``--mode real``: every LLM stage driven by SmolLM2-135M-Instruct (``toolrerank_plugins.llm.local.smollm2``,
  greedy decoding, CPU) through the LLM port, on a smaller sample; the same gains, how often each stage fell back
  and why, and the model's own time per query.

Placement (``--placement``): ``first`` (default) puts the LLM stage right after the first stage, before the
default's ``multi_intent``, ``tool_evidence`` and ``tgr`` — the LLM rewrites what the first stage retrieves, and
the default's stages still run on its result; ``last`` appends it after them (then a rewrite's ranking replaces
the default's).

Queries: each dev set's dev split, a seeded sample of ``--sample`` queries (all when fewer), sorted by id.

    python benchmarks/llm_quality.py --mode simulated --data ../shared/data --sample 100 \\
        --toolbench-engine runs/engines/toolbench-hybrid --cache-dir runs/emb --out runs/llm/quality_sim.json
    python benchmarks/llm_quality.py --mode real --data ../shared/data --sample 20 --threads 1 \\
        --toolbench-engine runs/engines/toolbench-hybrid --cache-dir runs/emb --out runs/llm/quality_real.json
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.evaluation import query_metrics
from toolrerank_plugins.llm import register_llm
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.records import LabelledQuery

logger = logging.getLogger("llm_quality")

DATASETS = ("api-bank", "restbench", "nestful", "seal-tools", "metatool", "toolbench")
STAGES = ("query_generation", "qta_rewrite", "iterative_feedback")
#: Settings that bound a small local model's generation (each call stops at this many new tokens).
REAL_MAX_TOKENS = {"query_generation": 128, "qta_rewrite": 64, "iterative_feedback": 128}


def sample_queries(queries: Sequence[LabelledQuery], n: int, seed: int) -> list[LabelledQuery]:
    usable = [q for q in queries if q.relevant]
    if n and len(usable) > n:
        usable = random.Random(seed).sample(usable, n)
    return sorted(usable, key=lambda q: q.id)


def config_with(stage: str | None, placement: str, params: dict[str, Any] | None = None) -> EngineConfig:
    data = pipeline_config("default").model_dump(mode="json")
    if stage is not None:
        spec = {"type": stage, "params": params or {}}
        data["stages"] = [spec, *data["stages"]] if placement == "first" else [*data["stages"], spec]
    return EngineConfig.model_validate(data)


def embedding_cache(data: Path, ds: str, cache_dir: Path | None, toolbench_engine: Path | None) -> Any:
    if ds == "toolbench":
        if toolbench_engine is None:
            raise SystemExit("toolbench needs --toolbench-engine (a saved hybrid engine over DATA/toolbench)")
        return Engine.load(toolbench_engine).first_stage.embedding_cache()
    path = cache_dir / f"{ds}.npz" if cache_dir else None
    if path is not None and path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    cache = Engine.build(load_catalog(data / ds), pipeline_config("dense")).first_stage.embedding_cache()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **cache)
    return cache


def run_queries(engine: Engine, queries: Sequence[LabelledQuery], stage: str | None) -> list[dict[str, Any]]:
    rows = []
    for q in queries:
        t = time.perf_counter()
        res = engine.search_detailed(q.query, 10)
        ms = (time.perf_counter() - t) * 1000
        row: dict[str, Any] = {
            "id": q.id,
            "multi": len(q.relevant) > 1,
            "metrics": query_metrics([r.id for r in res.results], q.relevant, (5, 10)),
            "ms": ms,
        }
        if stage is not None:
            tr = res.trace.get(stage, {})
            u = tr.get("usage", {})
            row.update(
                llm_calls=u.get("llm_calls", 0),
                prompt_tokens=u.get("prompt_tokens", 0),
                completion_tokens=u.get("completion_tokens", 0),
                llm_ms=u.get("llm_time_ms", 0.0),
                overhead_ms=tr.get("overhead_ms", 0.0),
                fallback=tr.get("fallback"),
                stop=tr.get("stop_reason"),
                dropped=[d["reason"] for d in tr.get("dropped", [])],
                raw=str(tr.get("raw_output") or tr.get("final_query") or "")[:200],
                rounds=[str(r.get("query", ""))[:200] for r in tr.get("rounds", [])[1:]],
            )
        rows.append(row)
    return rows


def _mean(rows: Sequence[dict[str, Any]], metric: str) -> float | None:
    return 100 * statistics.fmean(r["metrics"][metric] for r in rows) if rows else None


def summarise(rows: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], latency_ms: float) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for part, keep in (("all", lambda r: True), ("multi", lambda r: r["multi"]), ("single", lambda r: not r["multi"])):
        mine = [r for r in rows if keep(r)]
        theirs = [r for r in base if keep(r)]
        for m in ("recall@5", "sufficiency@5"):
            a, b = _mean(mine, m), _mean(theirs, m)
            out[f"{part}/{m}"] = None if a is None else round(a, 2)
            out[f"{part}/{m}/gain"] = None if a is None or b is None else round(a - b, 2)
        out[f"{part}/n"] = len(mine)
    if rows and "llm_calls" in rows[0]:
        calls = statistics.fmean(r["llm_calls"] for r in rows)
        overhead = [r["overhead_ms"] for r in rows]
        out.update(
            llm_calls=round(calls, 2),
            prompt_tokens=round(statistics.fmean(r["prompt_tokens"] for r in rows), 1),
            completion_tokens=round(statistics.fmean(r["completion_tokens"] for r in rows), 1),
            llm_ms_measured=round(statistics.fmean(r["llm_ms"] for r in rows), 1),
            overhead_ms_p50=round(statistics.median(overhead), 1),
            overhead_ms_mean=round(statistics.fmean(overhead), 1),
            added_latency_ms=round(calls * latency_ms + statistics.fmean(overhead), 1),
            fallbacks=dict(Counter(_reason(r["fallback"]) for r in rows if r["fallback"])),
            dropped=dict(Counter(d for r in rows for d in r["dropped"])),
            worse_queries=sum(r["metrics"]["recall@5"] < b["metrics"]["recall@5"] for r, b in zip(rows, base)),
            better_queries=sum(r["metrics"]["recall@5"] > b["metrics"]["recall@5"] for r, b in zip(rows, base)),
        )
    return out


def _reason(fallback: str) -> str:
    # "round 1 refinement: unusable_output: echo" -> "unusable_output: echo"; "llm_error: ..." -> "llm_error"
    tail = fallback.split("round ", 1)[-1].split(": ", 1)[-1] if fallback.startswith("round ") else fallback
    head, _, rest = tail.partition(": ")
    return f"{head}: {rest}" if head == "unusable_output" else head


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("simulated", "real"), default="simulated")
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--stages", nargs="+", default=list(STAGES))
    ap.add_argument("--p", nargs="+", type=float, default=[0.5, 0.7, 0.9, 1.0])
    ap.add_argument("--sample", type=int, default=100, help="dev queries per set (seeded sample; 0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--placement", choices=("first", "last"), default="first")
    ap.add_argument("--llm-latency-ms", type=float, default=500.0, help="simulated model's latency per call")
    ap.add_argument("--toolbench-engine", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (shared machine: 1)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("toolrerank_plugins").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    result: dict[str, Any] = {
        "mode": args.mode,
        "simulation": args.mode == "simulated",
        "argv": sys.argv[1:] if argv is None else list(argv),
        "placement": args.placement,
        "sample": args.sample,
        "seed": args.seed,
        "llm_latency_ms": args.llm_latency_ms if args.mode == "simulated" else None,
        "datasets": {},
    }
    real_llm = None
    if args.mode == "real":
        from toolrerank_plugins.llm.local import smollm2

        t = time.perf_counter()
        real_llm = smollm2(torch_threads=args.threads)
        result["model"] = repr(real_llm)
        result["model_load_s"] = round(time.perf_counter() - t, 1)
        result["max_tokens"] = REAL_MAX_TOKENS
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for ds in args.datasets:
        catalog = load_catalog(data / ds)
        queries = sample_queries([q for q in load_queries(data / ds) if q.split == "dev"], args.sample, args.seed)
        cache = embedding_cache(data, ds, args.cache_dir, args.toolbench_engine)
        base_engine = Engine.build(catalog, config_with(None, args.placement), embedding_cache=cache)
        base_rows = run_queries(base_engine, queries, None)
        entry: dict[str, Any] = {
            "n_queries": len(queries),
            "query_ids": [q.id for q in queries],
            "default": summarise(base_rows, base_rows, 0.0),
            "default_ms_p50": round(statistics.median(r["ms"] for r in base_rows), 1),
            "stages": {},
        }
        logger.info("%s: %d queries, default R@5 %.1f", ds, len(queries), entry["default"]["all/recall@5"])
        for stage in args.stages:
            params = {"max_tokens": REAL_MAX_TOKENS[stage]} if args.mode == "real" else {}
            engine = Engine.build(catalog, config_with(stage, args.placement, params), embedding_cache=cache)
            runs: dict[str, Any] = {}
            if args.mode == "real":
                register_llm("default", real_llm)  # type: ignore[arg-type]
                rows = run_queries(engine, queries, stage)
                runs["smollm2"] = {**summarise(rows, base_rows, 0.0), "rows": rows}
                logger.info("%s %s smollm2: %s", ds, stage, {k: v for k, v in runs["smollm2"].items() if k != "rows"})
            else:
                from toolrerank_plugins.testing import SimulatedLLM

                for p in args.p:
                    sim = SimulatedLLM(catalog, queries, p=p, seed=args.seed)
                    register_llm("default", sim)
                    rows = run_queries(engine, queries, stage)
                    s = summarise(rows, base_rows, args.llm_latency_ms)
                    s["answers"] = sim.stats()
                    runs[f"p={p}"] = s
                    logger.info(
                        "%s %s p=%.1f R@5 %+.1f Suff@5 %+.1f calls %.1f fallbacks %s",
                        ds,
                        stage,
                        p,
                        s["all/recall@5/gain"],
                        s["all/sufficiency@5/gain"],
                        s["llm_calls"],
                        s["fallbacks"],
                    )
            entry["stages"][stage] = runs
        result["datasets"][ds] = entry
        args.out.write_text(json.dumps(result, indent=1))  # after each set: a long run keeps what it has
    args.out.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    return 0


def markdown(result: dict[str, Any]) -> str:
    sim = result["mode"] == "simulated"
    lines = []
    for ds, entry in result["datasets"].items():
        d = entry["default"]
        lines.append(
            f"**{ds}** ({entry['n_queries']} dev queries: {d['multi/n']} multi-tool, {d['single/n']} single-tool; "
            f"default R@5 {d['all/recall@5']:.1f}, Suff@5 {d['all/sufficiency@5']:.1f})"
        )
        lines.append("")
        lines.append(
            "| stage | LLM | ΔR@5 all | ΔSuff@5 all | ΔR@5 multi | ΔR@5 single | calls/q "
            "| tokens/q (prompt+completion) | added latency/q (ms) | our overhead p50 (ms) | worse / better queries "
            "| fallbacks |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for stage, runs in entry["stages"].items():
            for label, s in runs.items():

                def g(key: str, s: dict[str, Any] = s) -> str:
                    v = s.get(key)
                    return "–" if v is None else f"{v:+.1f}"

                latency = (
                    f"{s['added_latency_ms']:.0f}" if sim else f"{s['llm_ms_measured'] + s['overhead_ms_mean']:.0f}"
                )
                fb = ", ".join(f"{k} {v}" for k, v in sorted(s["fallbacks"].items(), key=lambda kv: -kv[1]))
                lines.append(
                    f"| {stage} | {label} | {g('all/recall@5/gain')} | {g('all/sufficiency@5/gain')} "
                    f"| {g('multi/recall@5/gain')} | {g('single/recall@5/gain')} | {s['llm_calls']:.1f} "
                    f"| {s['prompt_tokens'] + s['completion_tokens']:.0f} | {latency} | {s['overhead_ms_p50']:.1f} "
                    f"| {s['worse_queries']} / {s['better_queries']} | {fb or '–'} |"
                )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
