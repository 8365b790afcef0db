"""``toolrerank llm datagen | train-retriever``: training data from an LLM, and feedback retriever training.

The LLM is named by ``--llm`` (see :func:`toolrerank_plugins.cli._common.add_llm_arguments`); ``toolrerank eval``
takes the same options to run the LLM pipelines (``bm25+querygen``, ``dense+qta``, ...).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from toolrerank_plugins.cli._common import (
    add_format_argument,
    add_llm_arguments,
    build_llm,
    load_catalog,
    out,
    pipeline_help,
)
from toolrerank_plugins.cli.train import add_feedback_arguments
from toolrerank_plugins.errors import ConfigError


def _engine(args: argparse.Namespace) -> Any:
    from toolrerank_plugins.engine import Engine

    if args.engine:
        return Engine.load(args.engine)
    if not args.catalog:
        raise ConfigError("give --engine DIR (a saved engine) or --catalog DIR")
    from toolrerank_plugins.pipelines import pipeline_config

    return Engine.build(load_catalog(args.catalog, args), pipeline_config(args.pipeline))


def _queries(args: argparse.Namespace) -> list[Any]:
    from toolrerank_plugins.loaders import load_queries

    src = args.queries or args.catalog
    if not src:
        raise ConfigError("give --queries FILE (or a --catalog directory holding queries.jsonl)")
    if not args.queries and not Path(src).is_dir():
        raise ConfigError(f"give --queries FILE: --catalog {src} is a file, and only a catalog folder holds queries")
    qs = load_queries(src, split=args.split)
    if args.limit:
        qs = qs[: args.limit]
    if not qs:
        raise ConfigError(f"no queries in {src} (split={args.split})")
    return list(qs)


def cmd_datagen(args: argparse.Namespace) -> int:
    from toolrerank_plugins.llm import datagen

    if args.n is None:  # per-kind defaults: samples (qta-dpo) / drafts per query
        args.n = 2 if args.kind == "qta-dpo" else 8
    if args.k is None:  # per-kind reward cut-off
        args.k = 5 if args.kind == "qta-dpo" else 10
    llm = build_llm(args)
    if llm is None:
        raise ConfigError("datagen needs --llm (see `toolrerank llm datagen --help`)")
    engine, queries = _engine(args), _queries(args)
    if args.kind == "qta-dpo":
        rows = datagen.generate_qta_dpo_pairs(
            engine,
            queries,
            llm,
            n_samples=args.n,
            pairs_per_query=args.pairs_per_query,
            temperature=args.temperature,
            k=args.k,
        )
    elif args.kind == "rejection-sampling":
        rows = datagen.rejection_sampling(
            engine,
            queries,
            llm,
            n_drafts=args.n,
            temperature=args.temperature,
            k=args.k,
            top_n=args.top_n,
            min_reward=args.min_reward,
            percentile=args.percentile,
        )
    else:
        from toolrerank_plugins.llm.feedback import FeedbackConfig

        rows = datagen.generate_feedback_traces(engine, queries, llm, config=FeedbackConfig(rounds=args.rounds))
    n = datagen.write_jsonl(args.out, rows)
    out(f"wrote {n} rows from {len(queries)} queries -> {args.out}")
    return 0


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", help="saved engine directory")
    p.add_argument("--catalog", help="catalog folder or file (with --pipeline)")
    add_format_argument(p)
    p.add_argument("--pipeline", default="dense", help=pipeline_help("pipeline for --catalog (default: dense)"))
    p.add_argument("--queries", help="queries.jsonl (default: <catalog>/queries.jsonl)")
    p.add_argument("--split", default="train")
    p.add_argument("--limit", type=int, default=0)


def add_parser(sub: Any) -> None:
    """Add ``llm`` (datagen, train-retriever) to the ``toolrerank`` sub-commands ``sub``."""
    llm = sub.add_parser("llm", help="LLM stages: training-data generation and retriever training")
    llm_sub = llm.add_subparsers(dest="llm_command", required=True)

    dg = llm_sub.add_parser("datagen", help="generate training data with an LLM")
    dg.add_argument("kind", choices=["qta-dpo", "rejection-sampling", "feedback-traces"])
    _add_source_args(dg)
    add_llm_arguments(dg)
    dg.add_argument("--out", required=True, help="JSONL file to write")
    dg.add_argument("--n", type=int, default=None, help="samples (qta-dpo, default 2) / drafts (default 8) per query")
    dg.add_argument("--pairs-per-query", type=int, default=1)
    dg.add_argument("--temperature", type=float, default=1.0)
    dg.add_argument("--k", type=int, default=None, help="reward cut-off (qta-dpo: 5, rejection-sampling: 10)")
    dg.add_argument("--top-n", type=int, default=1)
    dg.add_argument("--min-reward", type=float, default=0.05)
    dg.add_argument("--percentile", type=float, default=100.0)
    dg.add_argument("--rounds", type=int, default=3, help="feedback rounds (feedback-traces)")
    dg.set_defaults(func=cmd_datagen)

    add_feedback_arguments(
        llm_sub.add_parser("train-retriever", help="iteration-aware feedback training (= train feedback-retriever)")
    )
