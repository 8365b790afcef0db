"""``toolrerank index | search | eval | demo``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins.cli._common import (
    add_format_argument,
    add_llm_arguments,
    engine_config,
    load_catalog,
    non_blank_query,
    non_negative_int,
    out,
    pipeline_help,
    positive_int,
    register_llm_from_args,
    writable_file,
)
from toolrerank_plugins.errors import ToolRerankError

DEMO_QUERIES = (
    "I forgot which flights go from Lisbon to Berlin next Friday, find me one and book it",
    "change the email address on my account",
    "what's the weather going to be like in Oslo this weekend?",
)


def _progress(args: argparse.Namespace) -> bool | None:
    """Encoding progress: hidden with ``--quiet``, shown when stderr is a terminal, else the library default
    (shown for long encodes at ``-v``)."""
    if args.quiet:
        return False
    return True if sys.stderr.isatty() else None


def _check_out(path: str, overwrite: bool) -> None:
    """Refuse an existing ``--out`` without ``--overwrite`` before the build (minutes of encoding), naming the
    CLI option (the library's own message names the Python argument ``overwrite=True``)."""
    if "\0" in path:
        raise ToolRerankError(f"--out {path!r}: a path cannot hold a NUL byte")
    if os.path.lexists(path) and not overwrite:
        raise ToolRerankError(
            f"--out {path} already exists; pass --overwrite to replace it (only a saved engine or an empty "
            "folder is replaced)"
        )


def cmd_index(args: argparse.Namespace) -> int:
    from toolrerank_plugins.encoders import encode_progress
    from toolrerank_plugins.engine import Engine

    _check_out(args.out, args.overwrite)
    catalog = load_catalog(args.catalog, args)
    config = engine_config(args)
    progress = _progress(args)
    if progress:
        sys.stderr.write(
            f"indexing {len(catalog)} APIs (pipeline {args.pipeline}); dense encoding on a CPU takes a while "
            "(the 47k-API ToolBench catalog: 20-70 min on 2 cores)\n"
        )
    t = time.perf_counter()
    with encode_progress(progress):
        engine = Engine.build(catalog, config)
    secs = time.perf_counter() - t
    _check_out(args.out, args.overwrite)  # something may have appeared there during the build
    engine.save(args.out, overwrite=args.overwrite)
    out(f"indexed {len(catalog)} APIs in {len(catalog.tools())} tools ({secs:.1f}s) -> {args.out}")
    return 0


def _print_results(results: Any, explain: bool, trace: Mapping[str, Any] | None = None) -> None:
    inserted = _inserted(trace or {}, {r.id: r.tool.name for r in results})
    for r in results:
        t = r.tool
        where = " / ".join(x for x in (t.category, t.tool) if x)
        out(f"{r.rank:>3}. {t.name}  [{where}]  score={r.score:.4f}  id={t.id}")
        if explain:
            stages = ", ".join(f"{k}={v:.4f}" for k, v in r.stage_scores.items())
            out(f"       stages: {stages}")
            if r.id in inserted:
                out(f"       why: {inserted[r.id]}")
            if t.description:
                out(f"       {t.description[:160]}")


def _inserted(trace: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, str]:
    """Why a stage put a result where it is, by id: the prerequisites the graph stage inserted (its trace's
    ``expanded``), each with the result it serves and the kind of edge."""
    why: dict[str, str] = {}
    for stage_trace in trace.values():
        if not isinstance(stage_trace, Mapping):
            continue
        for entry in stage_trace.get("expanded") or ():
            if isinstance(entry, Mapping) and entry.get("id") in names:
                dep = str(entry.get("prerequisite_of"))
                why[entry["id"]] = (
                    f"inserted as a prerequisite of {names.get(dep, dep)} ({entry.get('origin', '?')} edge, "
                    f"weight {entry.get('weight', '?')}); its score sits between its neighbours'"
                )
    return why


def _print_scales(engine: Any) -> None:
    """What each stage score means (they are on different scales), once per run."""
    out("  score scales (stages score on different scales; a result's score is its last stage's):")
    for key, scale in engine.score_scales().items():
        out(f"    {key}: {scale}")


def _load_engine(path: str) -> Any:
    """``Engine.load(path)``; a catalog (a folder of ``tools.jsonl`` or a catalog file) given instead of an
    engine gets the command that builds one."""
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.errors import PersistenceError

    try:
        return Engine.load(path)
    except PersistenceError as exc:
        if _is_catalog(path):
            raise ToolRerankError(
                f"{path} is a catalog, not a saved engine; build one first with `toolrerank index {path} "
                f"--out ENGINE_DIR`, then search ENGINE_DIR"
            ) from exc
        raise


def _is_catalog(path: str) -> bool:
    from toolrerank_plugins.loaders import detect_format

    p = Path(path)
    if p.is_dir():
        return (p / "tools.jsonl").is_file()
    try:
        detect_format(p)
    except (ToolRerankError, OSError):
        return False
    return True


def cmd_search(args: argparse.Namespace) -> int:
    t = time.perf_counter()
    engine = _load_engine(args.engine)
    load_ms = (time.perf_counter() - t) * 1000
    warm_ms = None
    if args.explain or args.json:
        # Models (encoder, reranker) load on first use: one untimed search first, so the timings below are
        # the search's own and not the model loading (seconds, which made the first stage look slow).
        t = time.perf_counter()
        engine.search(args.query, top_k=args.top_k)
        warm_ms = (time.perf_counter() - t) * 1000
    res = engine.search_detailed(args.query, top_k=args.top_k)
    if args.json:
        data = res.to_dict()
        data["setup_ms"] = {"load": load_ms, "warm_up": warm_ms}
        data["score_scales"] = engine.score_scales()
        out(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    _print_results(res.results, args.explain, res.trace)
    if args.explain:
        _print_scales(engine)
        for stage, trace in res.trace.items():
            if trace:
                out(f"  [{stage}] " + json.dumps(trace, ensure_ascii=False, default=str)[:400])
        out("  timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in res.timings_ms.items()))
        out(
            f"  not counted above: engine loaded in {load_ms:.1f} ms; models loaded by an untimed first search "
            f"of {warm_ms:.1f} ms"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries

    if args.output:  # before the evaluation: a bad path must not cost the computed report
        writable_file(args.output, "--output")
    queries_path = args.queries or args.catalog  # checked before the build, which takes minutes
    if not queries_path:
        raise ToolRerankError("eval needs --queries (or a --catalog directory holding queries.jsonl)")
    if not args.queries and not Path(args.catalog).is_dir():
        raise ToolRerankError(
            f"eval needs --queries QUERIES.jsonl: --catalog {args.catalog} is a file, and only a catalog folder "
            "holds its own queries.jsonl"
        )
    register_llm_from_args(args)  # the LLM stages of the pipeline look it up by --llm-name
    t = time.perf_counter()
    if args.engine:
        engine = _load_engine(args.engine)
        build_s = None
    else:
        catalog = load_catalog(args.catalog, args)
        engine = Engine.build(catalog, engine_config(args))
        build_s = time.perf_counter() - t
    learned, log_texts = None, None
    if args.usage_log:  # the log's requests are the past: learn them before evaluating the new ones
        from toolrerank_plugins.cli.learn import load_log

        log = load_log(args.usage_log, split=args.usage_split, skip_malformed=args.skip_malformed)
        learned = engine.learn(log.records)
        log_texts = {r.query for r in log.records}
        out(
            f"usage memory: learned {learned['learned']} of {learned['records']} records from {args.usage_log} "
            f"in {learned['seconds']:.1f}s"
        )
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
    if learned is not None and log_texts is not None:
        from toolrerank_plugins.usage import memorised_split

        split = memorised_split(report.per_query, log_texts)
        report.queries["usage_log"] = {
            "source": str(args.usage_log),
            "split": args.usage_split,
            "learn": learned,
            **split,
        }
        for name in ("memorised", "generalised"):
            vals = split[name]
            cells = ", ".join(f"{k} {100 * v:.1f}" for k, v in vals.items() if k != "n")
            out(f"{name:<12} n={int(vals['n'])}" + (f": {cells}" if cells else ""))
    if args.output:
        text = json.dumps(report.to_dict(), indent=1, ensure_ascii=False)
        try:
            write_atomic(args.output, text)
        except (OSError, ValueError) as exc:  # changed since the check above: keep the report on stdout
            out(text)
            raise ToolRerankError(f"--output {args.output}: cannot write the report ({exc}); printed it above") from exc
        out(f"wrote {args.output}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from toolrerank_plugins.catalog import default_catalog_path
    from toolrerank_plugins.engine import Engine
    from toolrerank_plugins.evaluation import evaluate
    from toolrerank_plugins.loaders import load_queries

    root = default_catalog_path()
    catalog = load_catalog(str(root))  # the bundled JSONL folder
    out(
        f"Bundled default catalog: {len(catalog)} APIs, {len(catalog.tools())} tools, "
        f"{len(catalog.categories())} categories, {len(catalog.edges)} dependency edges"
    )
    t = time.perf_counter()
    engine = Engine.build(catalog, engine_config(args))
    out(f"Built {engine!r} in {time.perf_counter() - t:.1f}s")
    _print_scales(engine)
    out("")
    for q in args.query or DEMO_QUERIES:
        out(f"Query: {q}")
        res = engine.search_detailed(q, top_k=args.top_k)
        _print_results(res.results, explain=True, trace=res.trace)
        out("")
    if args.query and not args.eval:  # your own queries: answered, nothing else (the evaluation takes minutes)
        return 0
    queries = load_queries(root)
    report = evaluate(engine, queries, ks=(5, 10), batch_size=None)
    out(f"Evaluation on the {len(queries)} labelled queries of the bundled catalog:")
    out(report.format_table())
    return 0


def add_parser(sub: Any) -> None:
    """Add ``index``, ``search``, ``eval`` and ``demo`` to the ``toolrerank`` sub-commands ``sub``."""
    s = sub.add_parser("index", help="build an engine over a catalog and save it")
    s.add_argument(
        "catalog",
        help="catalog folder (tools.jsonl [+ edges.jsonl]) or file: JSONL, an OpenAPI 3.x / Swagger 2.0 spec "
        "(JSON or YAML), an MCP tools/list result, or an OpenAI tool list (detected from its content)",
    )
    add_format_argument(s)
    s.add_argument("--out", required=True, help="engine directory to write")
    s.add_argument(
        "--pipeline",
        default="default",
        help=pipeline_help("pipeline name or engine config .json (default: default, the recommended pipeline)"),
    )
    s.add_argument("--overwrite", action="store_true", help="replace --out if it is a saved engine (or empty)")
    s.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (shown by default when stderr is a terminal)"
    )
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("search", help="search a saved engine")
    s.add_argument("engine", help="engine directory written by `toolrerank index`")
    s.add_argument("query", type=non_blank_query)
    s.add_argument("--top-k", type=positive_int, default=5)
    s.add_argument(
        "--explain",
        action="store_true",
        help="show per-stage scores, traces and timings (of a second search: model loading is reported apart)",
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("eval", help="evaluate a pipeline or saved engine on labelled queries")
    s.add_argument(
        "--catalog",
        help="catalog folder (with its queries.jsonl) or catalog file (JSONL, OpenAPI / Swagger, MCP tools/list, "
        "OpenAI tools; needs --queries)",
    )
    add_format_argument(s)
    s.add_argument("--queries", help="queries.jsonl (default: <catalog>/queries.jsonl)")
    s.add_argument("--split", default=None, help="train / dev / test (default: all)")
    s.add_argument("--group", nargs="*", help="only these query groups")
    g = s.add_mutually_exclusive_group()
    g.add_argument(
        "--pipeline",
        default="default",
        help=pipeline_help("pipeline name or engine config .json (default: default, the recommended pipeline)"),
    )
    g.add_argument("--engine", help="saved engine directory (instead of --catalog/--pipeline)")
    s.add_argument("--k", type=positive_int, nargs="+", default=[5, 10])
    s.add_argument("--limit", type=non_negative_int, default=0, help="evaluate only the first N queries")
    s.add_argument(
        "--batch-size", type=non_negative_int, default=32, help="batch size of the throughput pass (0: skip)"
    )
    s.add_argument("--output", help="write the full report as JSON")
    s.add_argument(
        "--usage-log",
        help="a usage log (or queries.jsonl) learned as the past before evaluating (engine.learn); queries "
        "identical to a log request are reported apart (memorised vs generalised)",
    )
    s.add_argument("--usage-split", default=None, help="only usage-log records of this split (e.g. train)")
    s.add_argument("--skip-malformed", action="store_true", help="skip and count malformed usage-log lines")
    add_llm_arguments(s)
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("demo", help="build an engine over the bundled catalog and answer a few queries")
    s.add_argument(
        "--pipeline",
        default="default",
        help=pipeline_help("pipeline name or engine config .json (default: default, the recommended pipeline)"),
    )
    s.add_argument(
        "--query",
        type=non_blank_query,
        action="append",
        help="your own query (repeatable): answered instead of the sample queries, without the evaluation",
    )
    s.add_argument(
        "--eval",
        action="store_true",
        help="evaluate on the 88 labelled queries also with --query (without --query it always runs)",
    )
    s.add_argument("--top-k", type=positive_int, default=5)
    s.set_defaults(func=cmd_demo)
