"""``toolrerank train reranker | classifier | discriminator | feedback-retriever``."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from toolrerank_plugins.cli._common import add_format_argument, load_catalog, out
from toolrerank_plugins.errors import ConfigError

logger = logging.getLogger(__name__)

#: The name a usage log source goes by among the ``--data`` folders (``--log``).
LOG_SOURCE = "usage-log"


def add_log_arguments(p: argparse.ArgumentParser, *, catalog: bool = True) -> None:
    """``--log`` (a usage log as labelled training queries) and, with ``catalog``, ``--log-catalog``."""
    p.add_argument(
        "--log",
        nargs="+",
        default=[],
        help="usage log(s) (JSONL written by a UsageRecorder, or a queries.jsonl): each served request is a "
        "labelled query whose relevant tools are the ones that served it",
    )
    if catalog:
        p.add_argument(
            "--log-catalog",
            help="what the log's tool ids refer to: a saved engine directory (its first stage mines hard "
            "negatives), or a catalog folder or file (JSONL, OpenAPI / Swagger, MCP tools/list, OpenAI tools)",
        )
    p.add_argument("--log-split", default=None, help="only log records of this split (default: all)")


def log_queries(paths: list[str], catalog: Any, split: str | None) -> list[Any]:
    """The labelled queries of usage logs (ids unknown to ``catalog`` dropped, records without one skipped)."""
    from toolrerank_plugins.usage import read_usage_log, records_to_queries

    records = [r for path in paths for r in read_usage_log(path, split=split).records]
    queries = records_to_queries(records, catalog)
    out(f"{LOG_SOURCE}: {len(queries)} labelled queries from {len(records)} records")
    return queries


def log_source(args: argparse.Namespace, first_stage: str = "bm25") -> Any:
    """``--log`` + ``--log-catalog`` as a :class:`~toolrerank_plugins.rerank.training.TrainingSource`."""
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.persistence import POINTER_FILE
    from toolrerank_plugins.rerank.training import TrainingSource

    if not args.log_catalog:
        raise ConfigError("--log needs --log-catalog: the saved engine or catalog its tool ids refer to")
    root = Path(args.log_catalog)
    if (root / POINTER_FILE).exists() or (root / "config.json").exists():
        engine = Engine.load(root)
    else:
        engine = Engine.build(load_catalog(str(root)), EngineConfig(retriever=first_stage))
    queries = log_queries(args.log, engine.catalog, args.log_split)
    return TrainingSource(LOG_SOURCE, engine.catalog, engine, queries)


def cmd_train_reranker(args: argparse.Namespace) -> int:
    from toolrerank_plugins.rerank.cross_encoder import RERANKER_META, read_reranker_meta
    from toolrerank_plugins.rerank.sources import collect_pairs, engine_map, source_loader
    from toolrerank_plugins.rerank.training import train_cross_encoder

    # continuing a trained reranker (read and checked before any pairs are collected): it has seen what it saw
    # before too
    before = read_reranker_meta(args.base_model) if (Path(args.base_model) / RERANKER_META).is_file() else None
    folders = source_loader(args.split, engine_map(args.engine), args.first_stage)
    from_log = log_source(args, args.first_stage) if args.log else None

    def source(d: str) -> Any:
        return from_log if d == LOG_SOURCE and from_log is not None else folders(d)

    labelled = [(d, args.max_queries, args.negatives) for d in args.data or []]
    if from_log is not None:
        labelled.append((LOG_SOURCE, args.max_queries, args.negatives))
    if not labelled and not args.pseudo_from:
        raise ConfigError("nothing to train on: give --data folders, --log with --log-catalog, or --pseudo-from")
    pairs, seen, sources = collect_pairs(
        source,
        labelled,
        [(d, args.pseudo_apis, args.negatives) for d in args.pseudo_from or []],
        negative_depth=args.negative_depth,
        seed=args.seed,
        report=out,
    )
    if before is not None:
        seen |= set(before.get("seen_tools", []))
        sources["continued_from"] = {
            "path": args.base_model,
            "steps": before.get("steps"),
            "train_seconds": before.get("train_seconds"),
        }
    facts = train_cross_encoder(
        pairs,
        args.out,
        base_model=args.base_model,
        seen_tools=sorted(seen),
        max_length=args.max_length,
        batch_size=args.batch_size,
        epochs=args.epochs,
        lr=args.lr,
        head_lr=args.head_lr,
        time_budget_s=args.time_budget,
        device=args.device,
        threads=args.threads,
        num_layers=args.num_layers,
        seed=args.seed,
        extra_meta={"sources": sources, "split": args.split},
    )
    out(json.dumps(facts, indent=1))
    out(f"saved reranker to {args.out} ({len(seen)} seen tools recorded)")
    return 0


def cmd_train_classifier(args: argparse.Namespace) -> int:
    from toolrerank_plugins.encoders import SentenceTransformerEmbedder
    from toolrerank_plugins.loaders import load_catalog, load_queries
    from toolrerank_plugins.rerank.classifier import QueryTypeClassifier, query_type
    from toolrerank_plugins.rerank.training import TrainingSource, classifier_training_set

    embedder = SentenceTransformerEmbedder(args.embedder)
    sources = []
    for d in args.data:
        cat = load_catalog(d)
        sources.append((d, cat, TrainingSource(Path(d).name, cat, None, load_queries(d, split=args.split))))  # type: ignore[arg-type]
    if args.log:
        src = log_source(args)
        sources.append((LOG_SOURCE, src.catalog, TrainingSource(LOG_SOURCE, src.catalog, None, src.queries)))  # type: ignore[arg-type]
    if not sources:
        raise ConfigError("nothing to train on: give --data folders or --log with --log-catalog")
    texts, labels = classifier_training_set([s for _, _, s in sources], max_per_source=args.max_per_source)
    t = time.perf_counter()
    clf = QueryTypeClassifier(embedder).fit(texts, labels)
    clf.info["train_seconds"] = round(time.perf_counter() - t, 2)
    report: dict[str, Any] = {"train": clf.info}
    if args.eval_split:
        for d, cat, src in sources:
            if d == LOG_SOURCE:
                continue
            qs = load_queries(d, split=args.eval_split)
            if not qs:
                continue
            gold = [query_type(q, cat) for q in qs]
            pred = clf.predict([q.query for q in qs])
            acc = sum(a == b for a, b in zip(gold, pred)) / len(qs)
            report[f"{src.name}:{args.eval_split}"] = {"accuracy": acc, "n": len(qs), "n_multi": gold.count("multi")}
    clf.info["eval"] = {k: v for k, v in report.items() if k != "train"}
    clf.save(args.out)
    out(json.dumps(report, indent=1))
    out(f"saved classifier to {args.out}")
    return 0


def cmd_train_discriminator(args: argparse.Namespace) -> int:
    from toolrerank_plugins.graph.discriminator import DependencyDiscriminator, TrainConfig, make_pairs
    from toolrerank_plugins.graph.schema_deps import SchemaDependencyDetector
    from toolrerank_plugins.loaders import load_catalog

    detector = SchemaDependencyDetector()
    pretrain, finetune, test = [], [], []
    for i, d in enumerate(args.data):
        cat = load_catalog(d)
        labelled = {(e.source, e.target) for e in cat.edges}
        schema = [e for e in detector.detect(cat) if (e.source, e.target) not in labelled][: args.max_schema_edges]
        edges = list(cat.edges) + (schema if args.schema_pairs else [])
        if not edges:
            logger.warning("%s: no labelled or schema edges; skipped", d)
            continue
        pretrain += make_pairs(cat, edges, negatives_per_edge=1.0, seed=10 + i, source=d)
        finetune += make_pairs(cat, edges, negatives_per_edge=args.negatives, seed=20 + i, source=d)
    for i, d in enumerate(args.test or []):
        cat = load_catalog(d)
        test += make_pairs(cat, cat.edges, negatives_per_edge=args.negatives, seed=99 + i, source=d)
    if not pretrain:
        raise ConfigError("no training pairs: give --data folders with edges.jsonl or schema data flow")
    cfg = TrainConfig(
        pretrain_epochs=args.epochs,
        finetune_epochs=args.epochs,
        batch_size=args.batch_size,
        max_length=args.max_length,
        torch_threads=args.threads,
        head_learning_rate=args.head_lr,
    )
    t = time.perf_counter()
    model = DependencyDiscriminator(args.base_model, device=args.device, max_length=args.max_length)
    model.fit(pretrain, finetune, cfg)
    model.save(args.out)
    out(f"trained on {len(pretrain)} + {len(finetune)} pairs in {time.perf_counter() - t:.1f}s -> {args.out}")
    if test:
        out(json.dumps(model.evaluate(test), indent=1))
    return 0


def cmd_train_feedback(args: argparse.Namespace) -> int:
    from toolrerank_plugins.llm.feedback_training import train_feedback_retriever

    catalog = load_catalog(args.catalog, args)
    traces = []
    if args.traces:
        traces = [json.loads(line) for line in open(args.traces, encoding="utf-8") if line.strip()]
    if args.log:
        traces += log_traces(log_queries(args.log, catalog, args.log_split), catalog, args.log_depth)
    if not traces:
        raise ConfigError("nothing to train on: give --traces (feedback traces) and/or --log (a usage log)")
    report = train_feedback_retriever(
        traces,
        catalog,
        args.out,
        base_model=args.base_model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        alpha=args.alpha,
        hard_negatives=args.hard_negatives,
        max_steps=args.max_steps or None,
        device=args.device,
        overwrite=args.overwrite,
    )
    out(json.dumps(report.to_dict(), indent=1))
    return 0


def log_traces(queries: list[Any], catalog: Any, depth: int) -> list[dict[str, Any]]:
    """Usage-log queries as one-round feedback traces (round 0: the request as asked; its hard negatives
    come from a BM25 ranking over ``catalog``), the rows ``train_feedback_retriever`` reads."""
    from toolrerank_plugins.engine import Engine, EngineConfig

    if not queries:
        return []
    engine = Engine.build(catalog, EngineConfig(retriever="bm25"))
    rankings = engine.search_batch([q.query for q in queries], top_k=depth)
    return [
        {
            "id": q.id,
            "query": q.query,
            "relevant": list(q.relevant),
            "rounds": [{"round": 0, "query": q.query, "ranking": [r.id for r in ranking]}],
        }
        for q, ranking in zip(queries, rankings)
    ]


def add_feedback_arguments(p: argparse.ArgumentParser) -> None:
    """Options of iteration-aware feedback retriever training (also ``toolrerank llm train-retriever``)."""
    p.add_argument("--traces", help="JSONL from `toolrerank llm datagen feedback-traces`")
    p.add_argument("--catalog", required=True, help="catalog folder or file the traces' ids refer to")
    add_format_argument(p)
    p.add_argument("--out", required=True, help="folder for the trained sentence-transformers model")
    p.add_argument("--base-model", default="default")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--alpha", type=float, default=1.0, help="per-round weight alpha**t (paper: 1)")
    p.add_argument("--hard-negatives", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--overwrite", action="store_true")
    add_log_arguments(p, catalog=False)  # the log's ids refer to --catalog
    p.add_argument("--log-depth", type=int, default=10, help="BM25 candidates per logged request (hard negatives)")
    p.set_defaults(func=cmd_train_feedback)


def add_parser(sub: Any) -> None:
    """Add ``train`` and its sub-commands to the ``toolrerank`` sub-commands ``sub``."""
    train = sub.add_parser("train", help="train ToolRerank models")
    tsub = train.add_subparsers(dest="what", required=True)

    s = tsub.add_parser("reranker", help="fine-tune a cross-encoder on labelled queries and/or catalog pseudo-queries")
    s.add_argument("--data", nargs="*", default=[], help="benchmark folders (tools.jsonl + queries.jsonl)")
    s.add_argument("--split", default="train")
    s.add_argument("--out", required=True)
    s.add_argument("--engine", action="append", help="DATA_DIR=SAVED_ENGINE_DIR: first stage for hard negatives")
    s.add_argument("--first-stage", default="bm25", choices=["bm25", "dense", "hybrid"])
    s.add_argument("--max-queries", type=int, default=None, help="subsample each source's labelled queries")
    s.add_argument("--negatives", type=int, default=6, help="hard negatives per query")
    s.add_argument("--negative-depth", type=int, default=30)
    s.add_argument("--pseudo-from", nargs="*", default=[], help="folders to mine pseudo-queries from")
    s.add_argument("--pseudo-apis", type=int, default=2000)
    s.add_argument("--base-model", default="default")
    s.add_argument("--max-length", type=int, default=128)
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--epochs", type=int, default=1)
    s.add_argument("--lr", type=float, default=5e-5)
    s.add_argument("--head-lr", type=float, default=None, help="learning rate of the new scoring head (default: --lr)")
    s.add_argument("--time-budget", type=float, default=None, help="seconds; stop and save when reached")
    s.add_argument("--device", default="auto")
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--num-layers", type=int, default=None, help="keep only the first N layers (faster reranker)")
    s.add_argument("--seed", type=int, default=0, help="shuffling / sampling seed (change it to continue training)")
    add_log_arguments(s)
    s.set_defaults(func=cmd_train_reranker)

    s = tsub.add_parser("classifier", help="train the single- vs multi-tool query classifier")
    s.add_argument("--data", nargs="*", default=[])
    s.add_argument("--split", default="train")
    s.add_argument("--eval-split", default="dev", help="report accuracy on this split ('' to skip)")
    add_log_arguments(s)
    s.add_argument("--max-per-source", type=int, default=600)
    s.add_argument("--embedder", default="default")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_train_classifier)

    s = tsub.add_parser("discriminator", help="train the TGR 3-class dependency discriminator")
    s.add_argument("--data", nargs="+", required=True, help="folders with tools.jsonl (+ edges.jsonl)")
    s.add_argument("--test", nargs="*", help="folders whose labelled edges are the test set (report P/R/F1)")
    s.add_argument("--out", required=True, help="folder for the save_pretrained model")
    s.add_argument(
        "--schema-pairs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add JSON-Schema data-flow edges as training pairs",
    )
    s.add_argument("--max-schema-edges", type=int, default=150, help="per --data folder")
    s.add_argument("--negatives", type=float, default=4.0, help="fine-tuning negatives per edge")
    s.add_argument("--base-model", default="default")
    s.add_argument("--epochs", type=int, default=1)
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--max-length", type=int, default=160)
    s.add_argument("--head-lr", type=float, default=None, help="learning rate of the new 3-class head")
    s.add_argument("--device", default="auto")
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=cmd_train_discriminator)

    add_feedback_arguments(tsub.add_parser("feedback-retriever", help="iteration-aware feedback retriever training"))
