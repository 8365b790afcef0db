"""``toolrerank tune``: grid-search the ToolRerank knobs on a dev split."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins._atomic import write_atomic
from toolrerank_plugins.cli._common import out
from toolrerank_plugins.errors import ConfigError


def cmd_tune(args: argparse.Namespace) -> int:
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.rerank.cross_encoder import CachedReranker
    from toolrerank_plugins.rerank.sources import load_source
    from toolrerank_plugins.rerank.stage import ToolRerankConfig, _factory
    from toolrerank_plugins.rerank.tune import PAPER_GRID, prepare, tune

    if not args.queries and not Path(args.catalog).is_dir():
        raise ConfigError(
            f"tune needs --queries FILE: --catalog {args.catalog} is a file, and only a folder holds queries"
        )
    src = load_source(args.catalog, None, args.engine, args.first_stage)
    engine = src.engine
    queries = load_queries(args.queries or args.catalog, split=args.split)
    if args.group:
        queries = [q for q in queries if q.group in set(args.group)]
    if not queries:
        raise ConfigError(f"no queries for split {args.split!r} in {args.queries or args.catalog}")
    cfg = ToolRerankConfig(
        model_path=args.model,
        classifier_path=args.classifier,
        classification=args.classification,
        top_k=args.k,
        oracle_queries=(args.queries or args.catalog) if args.classification == "oracle" else None,
    )
    stage = _factory(cfg, engine.context, None)
    if stage.reranker is not None:
        stage.reranker = CachedReranker(stage.reranker)
    grid = dict(PAPER_GRID)
    if args.grid:
        grid.update(json.loads(Path(args.grid).read_text(encoding="utf-8")))
    t = time.perf_counter()
    prep = prepare(engine, queries, max(max(grid["m_s"]), max(grid["m_u"])))
    result = tune(stage, engine, prep, grid, metric=args.metric)
    result["seconds"] = round(time.perf_counter() - t, 1)
    result["n_queries"] = len(queries)
    best = cfg.model_copy(update=result["params"]).model_dump(mode="json", exclude_none=True)
    result["stage_params"] = best
    write_atomic(args.out, json.dumps(result, indent=1))
    out(f"best {result['metric']} = {100 * result['objective']:.2f} with {result['params']} ({result['seconds']}s)")
    out(f"wrote {args.out}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``tune`` to the ``toolrerank`` sub-commands ``sub``."""
    s = sub.add_parser("tune", help="grid-search the ToolRerank knobs on a dev split (paper Table 2)")
    s.add_argument("--catalog", required=True, help="catalog folder (with its queries.jsonl) or catalog file")
    s.add_argument("--queries", default=None)
    s.add_argument("--split", default="dev")
    s.add_argument("--group", nargs="*")
    s.add_argument("--engine", default=None, help="saved first-stage engine (else built with --first-stage)")
    s.add_argument("--first-stage", default="bm25", choices=["bm25", "dense", "hybrid"])
    s.add_argument("--model", default=None)
    s.add_argument("--classifier", default=None)
    s.add_argument(
        "--classification", default="auto", choices=["auto", "classifier", "none", "single", "multi", "oracle"]
    )
    s.add_argument("--metric", default="recall", choices=["recall", "ndcg", "sufficiency"])
    s.add_argument("--k", type=int, default=5)
    s.add_argument("--grid", default=None, help="JSON file overriding grid axes")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_tune)
