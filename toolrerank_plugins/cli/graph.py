"""``toolrerank graph build | stats``: TGR dependency graphs."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from toolrerank_plugins.cli._common import add_format_argument, load_catalog, out
from toolrerank_plugins.errors import ConfigError


def cmd_graph_build(args: argparse.Namespace) -> int:
    from toolrerank_plugins.graph.builder import DiscriminatorJudge, GraphBuildConfig, PruningConfig, build_graph
    from toolrerank_plugins.graph.tool_graph import ToolGraph

    judges: dict[str, Any] = {}
    emb = ids = None
    if args.engine:
        from toolrerank_plugins.engine import Engine

        engine = Engine.load(args.engine)
        catalog = engine.catalog
        if engine.dense is not None:
            emb, ids = engine.dense.embeddings, engine.dense.ids
    elif args.catalog:
        catalog = load_catalog(args.catalog, args)
    else:
        raise ConfigError("graph build needs a catalog folder or --engine")
    if args.traces:
        catalog = _apply_traces(catalog, args.traces, args.trace_mode, args.min_support)
    if "discriminator" in args.sources:
        if not args.discriminator:
            raise ConfigError("source 'discriminator' needs --discriminator PATH")
        from toolrerank_plugins.graph.discriminator import DependencyDiscriminator

        judges["discriminator"] = DiscriminatorJudge(
            DependencyDiscriminator.load(args.discriminator, device=args.device), args.threshold
        )
        if emb is None:
            from toolrerank_plugins.encoders import SentenceTransformerEmbedder
            from toolrerank_plugins.render import render_tool

            ids = catalog.ids
            emb = SentenceTransformerEmbedder().encode([render_tool(catalog[i]) for i in ids])
    base = ToolGraph.load(args.graph_file) if args.graph_file else None
    cfg = GraphBuildConfig(
        sources=args.sources,
        pruning=PruningConfig(scope=args.scope, knn=args.knn, max_pairs=args.max_pairs),
        on_unknown=args.on_unknown,
    )
    timings: dict[str, float] = {}
    t = time.perf_counter()
    graph = build_graph(catalog, cfg, embeddings=emb, ids=ids, judges=judges, base=base, timings=timings)
    secs = time.perf_counter() - t
    graph.save(args.out)
    out(json.dumps({"seconds": round(secs, 2), "timings": timings, **graph.stats(), "out": args.out}, indent=1))
    return 0


def _apply_traces(catalog: Any, traces_path: str, mode: str, min_support: int) -> Any:
    """Declared edges after ``--traces``: ``filter`` keeps those the call traces support, ``mine`` adds
    every API pair the traces call in order (co-occurrence, see graph/traces.py)."""
    from toolrerank_plugins.catalog import Catalog
    from toolrerank_plugins.graph.traces import edges_from_traces, mine_trace_edges
    from toolrerank_plugins.loaders import load_queries

    traces = [q.calls for q in load_queries(traces_path) if q.calls]
    if not traces:
        raise ConfigError(f"{traces_path}: no query has 'calls' (ordered API ids); nothing to learn edges from")
    if mode == "filter":
        edges = edges_from_traces(catalog.edges, traces, min_support=min_support)
        out(f"traces: kept {len(edges)} of {len(catalog.edges)} declared edges ({len(traces)} traces)")
    else:
        mined = mine_trace_edges(traces, min_support=min_support)
        mined = [e for e in mined if e.source in catalog and e.target in catalog]
        known = {(e.source, e.target) for e in catalog.edges}
        edges = catalog.edges + [e for e in mined if (e.source, e.target) not in known]
        out(f"traces: mined {len(mined)} edges from {len(traces)} traces ({len(edges)} declared edges now)")
    return Catalog(list(catalog), edges=edges, seen_tools=catalog.seen_tools, source=catalog.source)


def cmd_graph_stats(args: argparse.Namespace) -> int:
    from toolrerank_plugins.graph.tool_graph import ToolGraph

    catalog = load_catalog(args.catalog, args) if args.catalog else None
    graph = ToolGraph.load(args.graph, catalog=catalog)
    out(json.dumps(graph.stats(), indent=1))
    return 0


def add_parser(sub: Any) -> None:
    """Add ``graph`` (build, stats) to the ``toolrerank`` sub-commands ``sub``."""
    g = sub.add_parser("graph", help="build and inspect TGR dependency graphs")
    gsub = g.add_subparsers(dest="graph_command", required=True)
    s = gsub.add_parser("build", help="build a dependency graph (node-link JSON) for a catalog")
    s.add_argument(
        "catalog",
        nargs="?",
        help="catalog folder (tools.jsonl [+ edges.jsonl]) or file (JSONL, OpenAPI / Swagger, MCP tools/list, OpenAI "
        "tools)",
    )
    add_format_argument(s)
    s.add_argument("--engine", help="saved engine: its catalog and embeddings (for nearest-neighbour pruning)")
    s.add_argument("--out", required=True, help="graph JSON to write")
    s.add_argument(
        "--sources", nargs="+", default=["declared", "schema"], choices=["declared", "schema", "discriminator", "file"]
    )
    s.add_argument("--discriminator", help="trained discriminator folder")
    s.add_argument("--threshold", type=float, default=0.0, help="min probability of the argmax class")
    s.add_argument("--graph-file", help="existing graph to start from (source 'file')")
    s.add_argument("--traces", help="queries.jsonl whose 'calls' are logged call traces (ordered API ids)")
    s.add_argument(
        "--trace-mode",
        default="filter",
        choices=["filter", "mine"],
        help="filter: keep declared edges the traces support; mine: add every pair called in order",
    )
    s.add_argument("--min-support", type=int, default=1, help="traces needed to keep/mine an edge")
    s.add_argument("--scope", default="auto", choices=["auto", "tool", "category", "all"])
    s.add_argument("--knn", type=int, default=5)
    s.add_argument("--max-pairs", type=int, default=None)
    s.add_argument("--on-unknown", default="error", choices=["error", "drop"])
    s.add_argument("--device", default="auto")
    s.set_defaults(func=cmd_graph_build)

    s = gsub.add_parser("stats", help="node/edge counts of a graph (checked against a catalog when given)")
    s.add_argument("graph")
    s.add_argument("--catalog", help="catalog folder or file the graph's ids refer to")
    add_format_argument(s)
    s.set_defaults(func=cmd_graph_stats)
