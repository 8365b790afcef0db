"""Command line: ``toolrerank index | search | eval | demo`` (+ subcommands registered by stage modules)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolrerank_plugins.errors import ToolRerankError

logger = logging.getLogger("toolrerank_plugins.cli")

#: Modules that add subcommands (``register(subparsers)``); skipped when not present.
_EXTENSIONS = ("toolrerank_plugins.rerank.cli", "toolrerank_plugins.graph.cli", "toolrerank_plugins.llm.cli")


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _engine_config(args: argparse.Namespace) -> Any:
    from toolrerank_plugins.pipelines import pipeline_config

    return pipeline_config(args.pipeline)


def _load_catalog(path: str) -> Any:
    from toolrerank_plugins.loaders import load_catalog

    return load_catalog(path)


def cmd_index(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine

    catalog = _load_catalog(args.catalog)
    t = time.perf_counter()
    engine = Engine.build(catalog, _engine_config(args))
    secs = time.perf_counter() - t
    engine.save(args.out, overwrite=args.overwrite)
    _out(f"indexed {len(catalog)} APIs in {len(catalog.tools())} tools ({secs:.1f}s) -> {args.out}")
    return 0


def _print_results(results: Any, explain: bool) -> None:
    for r in results:
        t = r.tool
        where = " / ".join(x for x in (t.category, t.tool) if x)
        _out(f"{r.rank:>3}. {t.name}  [{where}]  score={r.score:.4f}  id={t.id}")
        if explain:
            stages = ", ".join(f"{k}={v:.4f}" for k, v in r.stage_scores.items())
            _out(f"       stages: {stages}")
            if t.description:
                _out(f"       {t.description[:160]}")


def cmd_search(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine

    engine = Engine.load(args.engine)
    res = engine.search_detailed(args.query, top_k=args.top_k)
    if args.json:
        _out(json.dumps(res.to_dict(), indent=2, ensure_ascii=False))
        return 0
    _print_results(res.results, args.explain)
    if args.explain:
        for stage, trace in res.trace.items():
            if trace:
                _out(f"  [{stage}] " + json.dumps(trace, ensure_ascii=False, default=str)[:400])
        _out("  timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in res.timings_ms.items()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries

    t = time.perf_counter()
    if args.engine:
        engine = Engine.load(args.engine)
        build_s = None
    else:
        catalog = _load_catalog(args.catalog)
        engine = Engine.build(catalog, _engine_config(args))
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
    _out(f"{engine!r}; {len(queries)} queries" + (f"; built in {build_s:.1f}s" if build_s else ""))
    _out(report.format_table())
    if args.output:
        Path(args.output).write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
        _out(f"wrote {args.output}")
    return 0


DEMO_QUERIES = (
    "I forgot which flights go from Lisbon to Berlin next Friday, find me one and book it",
    "change the email address on my account",
    "what's the weather going to be like in Oslo this weekend?",
)


def cmd_demo(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.testing import default_catalog_path

    root = default_catalog_path()
    catalog = _load_catalog(str(root))
    _out(
        f"Bundled default catalog: {len(catalog)} APIs, {len(catalog.tools())} tools, "
        f"{len(catalog.categories())} categories, {len(catalog.edges)} dependency edges"
    )
    t = time.perf_counter()
    engine = Engine.build(catalog, _engine_config(args))
    _out(f"Built {engine!r} in {time.perf_counter() - t:.1f}s\n")
    for q in args.query or DEMO_QUERIES:
        _out(f"Query: {q}")
        res = engine.search_detailed(q, top_k=args.top_k)
        _print_results(res.results, explain=True)
        _out("")
    queries = load_queries(root)
    report = evaluate(engine, queries, ks=(5, 10), batch_size=None)
    _out(f"Evaluation on the {len(queries)} labelled queries of the bundled catalog:")
    _out(report.format_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from toolrerank_plugins._version import __version__

    p = argparse.ArgumentParser(prog="toolrerank", description="Tool retrieval for LLM agents.")
    p.add_argument("--version", action="version", version=f"toolrerank-plugins {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="-v INFO (progress bars), -vv DEBUG")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("index", help="build an engine over a catalog and save it")
    s.add_argument("catalog", help="catalog directory (tools.jsonl [+ edges.jsonl]) or JSONL file")
    s.add_argument("--out", required=True, help="engine directory to write")
    s.add_argument("--pipeline", default="dense", help="pipeline name or engine config .json (default: dense)")
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
    g.add_argument("--pipeline", default="dense", help="pipeline name or engine config .json")
    g.add_argument("--engine", help="saved engine directory (instead of --catalog/--pipeline)")
    s.add_argument("--k", type=int, nargs="+", default=[5, 10])
    s.add_argument("--limit", type=int, default=0, help="evaluate only the first N queries")
    s.add_argument("--batch-size", type=int, default=32, help="batch size of the throughput pass (0: skip)")
    s.add_argument("--output", help="write the full report as JSON")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("demo", help="build an engine over the bundled catalog and answer a few queries")
    s.add_argument(
        "--pipeline", default="hybrid+tgr", help="pipeline name or engine config .json (default: hybrid+tgr)"
    )
    s.add_argument("--query", action="append", help="your own query (repeatable)")
    s.add_argument("--top-k", type=int, default=5)
    s.set_defaults(func=cmd_demo)

    for mod in _EXTENSIONS:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name and mod.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # bm25s sets its own logger to DEBUG when imported; filter at the handler so -v/-vv decide.
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)
    if args.verbose < 1:  # model-loading progress bars are noise unless asked for with -v
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.command == "eval" and not args.engine and not args.catalog:
        parser.error("eval needs --catalog (with --pipeline) or --engine")
    try:
        return int(args.func(args))
    except ToolRerankError as exc:
        sys.stderr.write(f"toolrerank: error: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
