"""``toolrerank index | search | eval | demo``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins.cli._common import (
    add_llm_arguments,
    engine_config,
    load_catalog,
    out,
    pipeline_help,
    register_llm_from_args,
)
from toolrerank_plugins.errors import ToolRerankError

DEMO_QUERIES = (
    "I forgot which flights go from Lisbon to Berlin next Friday, find me one and book it",
    "change the email address on my account",
    "what's the weather going to be like in Oslo this weekend?",
)


def cmd_index(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine

    catalog = load_catalog(args.catalog)
    t = time.perf_counter()
    engine = Engine.build(catalog, engine_config(args))
    secs = time.perf_counter() - t
    engine.save(args.out, overwrite=args.overwrite)
    out(f"indexed {len(catalog)} APIs in {len(catalog.tools())} tools ({secs:.1f}s) -> {args.out}")
    return 0


def _print_results(results: Any, explain: bool) -> None:
    for r in results:
        t = r.tool
        where = " / ".join(x for x in (t.category, t.tool) if x)
        out(f"{r.rank:>3}. {t.name}  [{where}]  score={r.score:.4f}  id={t.id}")
        if explain:
            stages = ", ".join(f"{k}={v:.4f}" for k, v in r.stage_scores.items())
            out(f"       stages: {stages}")
            if t.description:
                out(f"       {t.description[:160]}")


def cmd_search(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine

    engine = Engine.load(args.engine)
    res = engine.search_detailed(args.query, top_k=args.top_k)
    if args.json:
        out(json.dumps(res.to_dict(), indent=2, ensure_ascii=False))
        return 0
    _print_results(res.results, args.explain)
    if args.explain:
        for stage, trace in res.trace.items():
            if trace:
                out(f"  [{stage}] " + json.dumps(trace, ensure_ascii=False, default=str)[:400])
        out("  timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in res.timings_ms.items()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries

    register_llm_from_args(args)  # the LLM stages of the pipeline look it up by --llm-name
    t = time.perf_counter()
    if args.engine:
        engine = Engine.load(args.engine)
        build_s = None
    else:
        catalog = load_catalog(args.catalog)
        engine = Engine.build(catalog, engine_config(args))
        build_s = time.perf_counter() - t
    queries_path = args.queries or args.catalog
    if not queries_path:
        raise ToolRerankError("eval needs --queries (or a --catalog directory holding queries.jsonl)")
    queries = load_queries(queries_path, split=args.split)
    if args.group:
        queries = [q for q in queries if q.group in set(args.group)]
    if args.limit:
        queries = queries[: args.limit]
    if not queries:
        raise ToolRerankError(f"no queries to evaluate in {queries_path} (split={args.split}, group={args.group})")
    report = evaluate(engine, queries, ks=args.k, batch_size=args.batch_size or None)
    report.build_seconds = build_s
    report.queries.update({"source": str(queries_path), "split": args.split})
    out(f"{engine!r}; {len(queries)} queries" + (f"; built in {build_s:.1f}s" if build_s else ""))
    out(report.format_table())
    if args.output:
        Path(args.output).write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
        out(f"wrote {args.output}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from toolrerank_plugins.catalog import default_catalog_path
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries

    root = default_catalog_path()
    catalog = load_catalog(str(root))
    out(
        f"Bundled default catalog: {len(catalog)} APIs, {len(catalog.tools())} tools, "
        f"{len(catalog.categories())} categories, {len(catalog.edges)} dependency edges"
    )
    t = time.perf_counter()
    engine = Engine.build(catalog, engine_config(args))
    out(f"Built {engine!r} in {time.perf_counter() - t:.1f}s\n")
    for q in args.query or DEMO_QUERIES:
        out(f"Query: {q}")
        res = engine.search_detailed(q, top_k=args.top_k)
        _print_results(res.results, explain=True)
        out("")
    queries = load_queries(root)
    report = evaluate(engine, queries, ks=(5, 10), batch_size=None)
    out(f"Evaluation on the {len(queries)} labelled queries of the bundled catalog:")
    out(report.format_table())
    return 0


def add_parser(sub: Any) -> None:
    """Add ``index``, ``search``, ``eval`` and ``demo`` to the ``toolrerank`` sub-commands ``sub``."""
    s = sub.add_parser("index", help="build an engine over a catalog and save it")
    s.add_argument("catalog", help="catalog directory (tools.jsonl [+ edges.jsonl]) or JSONL file")
    s.add_argument("--out", required=True, help="engine directory to write")
    s.add_argument(
        "--pipeline", default="dense", help=pipeline_help("pipeline name or engine config .json (default: dense)")
    )
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("search", help="search a saved engine")
    s.add_argument("engine", help="engine directory written by `toolrerank index`")
    s.add_argument("query")
    s.add_argument("--top-k", type=int, default=5)
    s.add_argument("--explain", action="store_true", help="show per-stage scores, traces and timings")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("eval", help="evaluate a pipeline or saved engine on labelled queries")
    s.add_argument("--catalog", help="catalog directory or tools.jsonl")
    s.add_argument("--queries", help="queries.jsonl (default: <catalog>/queries.jsonl)")
    s.add_argument("--split", default=None, help="train / dev / test (default: all)")
    s.add_argument("--group", nargs="*", help="only these query groups")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--pipeline", default="dense", help=pipeline_help("pipeline name or engine config .json"))
    g.add_argument("--engine", help="saved engine directory (instead of --catalog/--pipeline)")
    s.add_argument("--k", type=int, nargs="+", default=[5, 10])
    s.add_argument("--limit", type=int, default=0, help="evaluate only the first N queries")
    s.add_argument("--batch-size", type=int, default=32, help="batch size of the throughput pass (0: skip)")
    s.add_argument("--output", help="write the full report as JSON")
    add_llm_arguments(s)
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("demo", help="build an engine over the bundled catalog and answer a few queries")
    s.add_argument(
        "--pipeline",
        default="hybrid+tgr",
        help=pipeline_help("pipeline name or engine config .json (default: hybrid+tgr)"),
    )
    s.add_argument("--query", action="append", help="your own query (repeatable)")
    s.add_argument("--top-k", type=int, default=5)
    s.set_defaults(func=cmd_demo)
