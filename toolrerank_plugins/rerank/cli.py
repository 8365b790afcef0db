"""``toolrerank train reranker|classifier`` and ``toolrerank tune`` (added to the main CLI)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolrerank_plugins.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from toolrerank_plugins.rerank.training import Pair, TrainingSource

logger = logging.getLogger(__name__)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _engine_map(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--engine expects DATA_DIR=ENGINE_DIR, got {item!r}")
        data, eng = item.split("=", 1)
        out[str(Path(data).resolve())] = eng
    return out


def load_source(data_dir: str, split: str | None, engine_dir: str | None, first_stage: str) -> TrainingSource:
    """Catalog + first-stage engine (loaded, or built in memory) + queries of one benchmark folder."""
    from toolrerank_plugins.engine import Engine, EngineConfig
    from toolrerank_plugins.loaders import load_catalog, load_queries
    from toolrerank_plugins.rerank.training import TrainingSource

    path = Path(data_dir)
    if engine_dir:
        engine = Engine.load(engine_dir)
    else:
        t = time.perf_counter()
        engine = Engine.build(load_catalog(path), EngineConfig(retriever=first_stage))  # type: ignore[arg-type]
        logger.info("built %s first stage over %s in %.1fs", first_stage, path, time.perf_counter() - t)
    queries = load_queries(path, split=split) if (path / "queries.jsonl").exists() else []
    return TrainingSource(path.name, engine.catalog, engine, queries)


def source_loader(split: str | None, engines: dict[str, str], first_stage: str) -> Callable[[str], TrainingSource]:
    """``folder -> TrainingSource``, loading each benchmark folder (and its first stage) once."""
    cache: dict[str, TrainingSource] = {}

    def source(d: str) -> TrainingSource:
        key = str(Path(d).resolve())
        if key not in cache:
            cache[key] = load_source(d, split, engines.get(key), first_stage)
        return cache[key]

    return source


def collect_pairs(
    source: Callable[[str], TrainingSource],
    labelled: Sequence[tuple[str, int | None, int]],
    pseudo: Sequence[tuple[str, int, int]] = (),
    *,
    negative_depth: int,
    seed: int,
    mask_description: bool = False,
) -> tuple[list[Pair], set[str], dict[str, Any]]:
    """Training pairs from each source: ``labelled`` = (folder, max queries, negatives per query),
    ``pseudo`` = (folder, APIs, negatives per pseudo-query). Returns the pairs, the seen tools and a
    per-source recipe for the model's metadata."""
    from toolrerank_plugins.rerank.training import labelled_pairs, pseudo_query_pairs

    pairs: list[Pair] = []
    seen: set[str] = set()
    recipe: dict[str, Any] = {}
    for d, max_queries, negatives in labelled:
        src = source(d)
        p, s = labelled_pairs(
            src, negatives_per_query=negatives, negative_depth=negative_depth, max_queries=max_queries, seed=seed
        )
        pairs += p
        seen |= s
        n_queries = min(len(src.queries), max_queries or len(src.queries))
        recipe[src.name] = {"labelled_queries": n_queries, "negatives": negatives}
        _out(f"{src.name}: {len(p)} labelled pairs from {len(src.queries)} queries, {len(s)} seen tools")
    for d, n_apis, negatives in pseudo:
        src = source(d)
        p = pseudo_query_pairs(
            src, n_apis=n_apis, negatives_per_query=negatives, seed=seed, mask_description=mask_description
        )
        pairs += p
        entry = recipe.setdefault(src.name, {})
        entry["pseudo_queries"] = n_apis
        if mask_description:
            entry["pseudo_mask_description"] = True
        _out(f"{src.name}: {len(p)} pseudo-query pairs from {min(n_apis, len(src.catalog))} APIs")
    return pairs, seen, recipe


def cmd_train_reranker(args: argparse.Namespace) -> int:
    from toolrerank_plugins.rerank.training import train_cross_encoder

    source = source_loader(args.split, _engine_map(args.engine), args.first_stage)
    pairs, seen, sources = collect_pairs(
        source,
        [(d, args.max_queries, args.negatives) for d in args.data or []],
        [(d, args.pseudo_apis, args.negatives) for d in args.pseudo_from or []],
        negative_depth=args.negative_depth,
        seed=args.seed,
    )
    prior = Path(args.base_model) / "toolrerank_reranker.json"
    if prior.is_file():  # continuing a trained reranker: it has seen what it saw before too
        before = json.loads(prior.read_text(encoding="utf-8"))
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
    _out(json.dumps(facts, indent=1))
    _out(f"saved reranker to {args.out} ({len(seen)} seen tools recorded)")
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
    texts, labels = classifier_training_set([s for _, _, s in sources], max_per_source=args.max_per_source)
    t = time.perf_counter()
    clf = QueryTypeClassifier(embedder).fit(texts, labels)
    clf.info["train_seconds"] = round(time.perf_counter() - t, 2)
    report: dict[str, Any] = {"train": clf.info}
    if args.eval_split:
        for d, cat, src in sources:
            qs = load_queries(d, split=args.eval_split)
            if not qs:
                continue
            gold = [query_type(q, cat) for q in qs]
            pred = clf.predict([q.query for q in qs])
            acc = sum(a == b for a, b in zip(gold, pred)) / len(qs)
            report[f"{src.name}:{args.eval_split}"] = {"accuracy": acc, "n": len(qs), "n_multi": gold.count("multi")}
    clf.info["eval"] = {k: v for k, v in report.items() if k != "train"}
    clf.save(args.out)
    _out(json.dumps(report, indent=1))
    _out(f"saved classifier to {args.out}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.rerank.cross_encoder import CachedReranker
    from toolrerank_plugins.rerank.stage import ToolRerankConfig, _factory
    from toolrerank_plugins.rerank.tune import PAPER_GRID, prepare, tune

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
        k=args.k,
        oracle_queries=(args.queries or args.catalog) if args.classification == "oracle" else None,
    )
    stage = _factory(cfg, engine, None)
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
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    _out(f"best {result['metric']} = {100 * result['objective']:.2f} with {result['params']} ({result['seconds']}s)")
    _out(f"wrote {args.out}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``train`` and ``tune`` to the ``toolrerank`` command."""
    from toolrerank_plugins.rerank.stage import register_pipelines

    register_pipelines()
    train = subparsers.add_parser("train", help="train ToolRerank models")
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
    s.set_defaults(func=cmd_train_reranker)

    s = tsub.add_parser("classifier", help="train the single- vs multi-tool query classifier")
    s.add_argument("--data", nargs="+", required=True)
    s.add_argument("--split", default="train")
    s.add_argument("--eval-split", default="dev", help="report accuracy on this split ('' to skip)")
    s.add_argument("--max-per-source", type=int, default=600)
    s.add_argument("--embedder", default="default")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_train_classifier)

    s = subparsers.add_parser("tune", help="grid-search the ToolRerank knobs on a dev split (paper Table 2)")
    s.add_argument("--catalog", required=True)
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
