"""Overhead of the LLM stages excluding LLM time, and LLM calls / prompt tokens per query, on ToolBench dev.

There is no LLM on the benchmark machine: a ScriptedLLM answers instantly with plausible text (a query list
derived from the request, a rewrite, feedback paragraphs, a distinct refinement every round, so the
feedback loop runs its full T rounds). The numbers are the stages' own cost (prompt building, parsing,
re-retrieval, interleaving) and their LLM usage at default settings. They say nothing about retrieval
quality with a real LLM, and none is reported.

    python benchmarks/llm_overhead.py --data ../shared/data --out /work/runs/llm/overhead.json
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins.engine import Engine
from toolrerank_plugins.llm import register_llm
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.stages import StageSpec, build_stage
from toolrerank_plugins.testing import ScriptedLLM

FILLER = (
    "The user wants to look up information and act on it. The retrieved tools cover search, details and "
    "listing endpoints of several services; their inputs are identifiers and free-text queries, their outputs "
    "are JSON records. "
)


def plausible_llm() -> ScriptedLLM:
    counter = {"n": 0}

    def query_list(prompt: str) -> str:
        m = re.search(r"Human: (.*)\nAnswer:", prompt, re.S)
        req = m.group(1) if m else prompt
        parts = [p.strip() for p in re.split(r"[.?!;]|\band\b", req) if len(p.split()) >= 3][:5]
        return "Sure! Here are the API descriptions:\n" + "\n".join(
            f"{i}. API to {' '.join(p.split()[:15])}" for i, p in enumerate(parts or [req[:80]], 1)
        )

    def rewrite(prompt: str) -> str:
        m = re.search(r"<user_request>\n(.*?)\n</user_request>", prompt, re.S)
        return "Rewritten query: Search for " + (m.group(1) if m else "")[:200] + " and get the details"

    def refine(prompt: str) -> str:
        counter["n"] += 1
        m = re.search(r"<instruction>\n(.*?)\n</instruction>", prompt, re.S)
        return f"Refined instruction: {(m.group(1) if m else '')[:150]} (step {counter['n']})"

    return ScriptedLLM(
        rules=[
            (r"Rewritten query:\s*$", rewrite),
            (r"Step 1 - Comprehension", FILLER * 3),
            (r"Step 2 - Assessment", FILLER * 3),
            (r"Step 3 - Refinement", refine),
            (r"Human: ", query_list),
        ]
    )


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--engine", help="saved ToolBench engine (default: build BM25 over <data>/toolbench)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default="/work/runs/llm/overhead.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    root = Path(args.data) / "toolbench"
    t = time.perf_counter()
    if args.engine:
        engine = Engine.load(args.engine)
    else:
        engine = Engine.build(load_catalog(root), pipeline_config("bm25"))
    build_s = time.perf_counter() - t
    queries = load_queries(root, split=args.split)
    if args.limit:
        queries = queries[: args.limit]
    register_llm("default", plausible_llm())
    result: dict[str, Any] = {
        "engine": repr(engine),
        "engine_build_or_load_s": round(build_s, 1),
        "n_queries": len(queries),
        "split": args.split,
        "depth": engine.config.depth,
        "stages": {},
    }
    for stage_type in ("query_generation", "qta_rewrite", "iterative_feedback"):
        stage = build_stage(StageSpec(type=stage_type), engine.context)
        rows = []
        for q in queries:
            first_t = time.perf_counter()
            cands = engine.retrieve([q.query], engine.config.depth)[0]
            first_ms = (time.perf_counter() - first_t) * 1000
            trace: dict[str, Any] = {}
            t0 = time.perf_counter()
            stage.run(q.query, cands, engine.context, trace)
            total_ms = (time.perf_counter() - t0) * 1000
            u = trace["usage"]
            rows.append(
                {
                    "first_stage_ms": first_ms,
                    "stage_ms": total_ms,
                    "overhead_ms": total_ms - u["llm_time_ms"],
                    "llm_calls": u["llm_calls"],
                    "prompt_tokens": u["prompt_tokens"],
                    "completion_tokens": u["completion_tokens"],
                    "fallback": trace.get("fallback"),
                }
            )
        over = [r["overhead_ms"] for r in rows]
        result["stages"][stage_type] = {
            "overhead_ms_excl_llm": {"p50": pct(over, 50), "p95": pct(over, 95), "mean": statistics.mean(over)},
            "first_stage_ms_mean": statistics.mean(r["first_stage_ms"] for r in rows),
            "llm_calls_per_query": statistics.mean(r["llm_calls"] for r in rows),
            "prompt_tokens_per_query": statistics.mean(r["prompt_tokens"] for r in rows),
            "prompt_tokens_per_query_max": max(r["prompt_tokens"] for r in rows),
            "completion_tokens_per_query": statistics.mean(r["completion_tokens"] for r in rows),
            "fallbacks": sum(1 for r in rows if r["fallback"]),
        }
        sys.stdout.write(f"{stage_type}: {json.dumps(result['stages'][stage_type])}\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    sys.stdout.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
