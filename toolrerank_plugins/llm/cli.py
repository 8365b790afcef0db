"""CLI for the LLM stages: ``toolrerank llm datagen ...``, ``toolrerank train feedback-retriever``, and
``--llm`` options on ``toolrerank eval`` (added from here; the core CLI is untouched).

An LLM is named on the command line by ``--llm``:

- ``http(s)://host:port/v1`` — an OpenAI-compatible server (Ollama, vLLM, llama.cpp); needs ``--llm-model``.
- ``package.module:attr`` — a Python object implementing the port, or a zero-argument factory returning one
  (e.g. a function wrapping a LangChain chat model with ``langchain-toolrerank``).
- ``replay`` — answers only from ``--llm-cache`` (no LLM at all).

``--llm-cache DIR`` wraps it in the record/replay disk cache, so a second run costs nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from toolrerank_plugins.errors import ConfigError

_PIPELINES = {
    "dense+querygen": ("dense", "query_generation"),
    "bm25+querygen": ("bm25", "query_generation"),
    "dense+qta": ("dense", "qta_rewrite"),
    "bm25+qta": ("bm25", "qta_rewrite"),
    "dense+feedback": ("dense", "iterative_feedback"),
    "bm25+feedback": ("bm25", "iterative_feedback"),
}


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def add_llm_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM (for the LLM stages)")
    g.add_argument("--llm", help="OpenAI-compatible base URL, 'module:attr' (LLM or factory), or 'replay'")
    g.add_argument("--llm-model", help="model name (OpenAI-compatible server; also the cache namespace)")
    g.add_argument("--llm-name", default="default", help="registry name the stages look up (default: default)")
    g.add_argument("--llm-cache", help="record/replay cache directory")
    g.add_argument("--llm-cache-mode", choices=["auto", "record", "replay"], default="auto")
    g.add_argument("--llm-timeout", type=float, default=120.0, help="HTTP timeout of the OpenAI-compatible client")


def build_llm(args: argparse.Namespace) -> Any:
    """The LLM named by ``--llm`` (wrapped in the cache when ``--llm-cache``), or None without ``--llm``."""
    spec = getattr(args, "llm", None)
    if not spec:
        return None
    from toolrerank_plugins.llm.cache import CachedLLM

    llm: Any
    if spec == "replay":
        if not args.llm_cache:
            raise ConfigError("--llm replay needs --llm-cache DIR holding recorded answers")
        return CachedLLM(None, args.llm_cache, mode="replay", namespace=args.llm_model or "")
    if spec.startswith(("http://", "https://")):
        if not args.llm_model:
            raise ConfigError("--llm URL needs --llm-model NAME (the model the server serves)")
        from toolrerank_plugins.llm.openai_compat import OpenAICompatLLM

        llm = OpenAICompatLLM(spec, model=args.llm_model, timeout_s=args.llm_timeout)
    elif ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"--llm {spec}: cannot import {attr!r} from {module!r} ({exc})") from exc
        llm = obj if hasattr(obj, "complete") else obj()
        if not hasattr(llm, "complete"):
            raise ConfigError(f"--llm {spec}: {type(llm).__name__} has no complete(); it is not an LLM")
    else:
        raise ConfigError(f"--llm {spec!r}: expected an http(s) URL, 'module:attr' or 'replay'")
    if args.llm_cache:
        llm = CachedLLM(llm, args.llm_cache, mode=args.llm_cache_mode, namespace=args.llm_model or "")
    return llm


def _register_from_args(args: argparse.Namespace) -> Any:
    llm = build_llm(args)
    if llm is not None:
        from toolrerank_plugins.llm.registry import register_llm

        register_llm(args.llm_name, llm)
    return llm


def _engine(args: argparse.Namespace) -> Any:
    from toolrerank_plugins.engine import Engine

    if args.engine:
        return Engine.load(args.engine)
    if not args.catalog:
        raise ConfigError("give --engine DIR (a saved engine) or --catalog DIR")
    from toolrerank_plugins.loaders import load_catalog
    from toolrerank_plugins.pipelines import pipeline_config

    return Engine.build(load_catalog(args.catalog), pipeline_config(args.pipeline))


def _queries(args: argparse.Namespace) -> list[Any]:
    from toolrerank_plugins.loaders import load_queries

    src = args.queries or args.catalog
    if not src:
        raise ConfigError("give --queries FILE (or a --catalog directory holding queries.jsonl)")
    qs = load_queries(src, split=args.split)
    if args.limit:
        qs = qs[: args.limit]
    if not qs:
        raise ConfigError(f"no queries in {src} (split={args.split})")
    return list(qs)


def cmd_datagen(args: argparse.Namespace) -> int:
    from toolrerank_plugins.llm import datagen

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
    _out(f"wrote {n} rows from {len(queries)} queries -> {args.out}")
    return 0


def cmd_train_feedback(args: argparse.Namespace) -> int:
    from toolrerank_plugins.llm.feedback_training import train_feedback_retriever
    from toolrerank_plugins.loaders import load_catalog

    traces = [json.loads(line) for line in open(args.traces, encoding="utf-8") if line.strip()]
    report = train_feedback_retriever(
        traces,
        load_catalog(args.catalog),
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
    _out(json.dumps(report.to_dict(), indent=1))
    return 0


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", help="saved engine directory")
    p.add_argument("--catalog", help="catalog directory (with --pipeline)")
    p.add_argument("--pipeline", default="dense", help="pipeline for --catalog (default: dense)")
    p.add_argument("--queries", help="queries.jsonl (default: <catalog>/queries.jsonl)")
    p.add_argument("--split", default="train")
    p.add_argument("--limit", type=int, default=0)


def _add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traces", required=True, help="JSONL from `toolrerank llm datagen feedback-traces`")
    p.add_argument("--catalog", required=True, help="catalog directory the traces' ids refer to")
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
    p.set_defaults(func=cmd_train_feedback)


def _subparsers_of(parser: argparse.ArgumentParser) -> Any:
    for action in parser._actions:  # argparse offers no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _pipeline_factory(retriever: str, stage: str) -> Callable[[], Any]:
    def make() -> Any:
        from toolrerank_plugins.engine import EngineConfig

        return EngineConfig.model_validate({"retriever": retriever, "stages": [{"type": stage}]})

    return make


def _register_pipelines() -> None:
    from toolrerank_plugins.pipelines import register_pipeline

    for name, (retriever, stage) in _PIPELINES.items():
        register_pipeline(
            name,
            _pipeline_factory(retriever, stage),
            replace=True,
        )


def _extend_eval(sub: Any) -> None:
    eval_parser = sub.choices.get("eval")
    if eval_parser is None or getattr(eval_parser, "_toolrerank_llm", False):
        return
    add_llm_arguments(eval_parser)
    original = eval_parser.get_default("func")

    def eval_with_llm(args: argparse.Namespace) -> int:
        _register_from_args(args)
        return int(original(args))

    eval_parser.set_defaults(func=eval_with_llm)
    eval_parser._toolrerank_llm = True  # type: ignore[attr-defined]


def register(subparsers: Any) -> None:
    """Add ``llm`` (datagen, train-retriever), ``train feedback-retriever``, and ``eval --llm``."""
    _register_pipelines()
    llm = subparsers.add_parser("llm", help="LLM stages: training-data generation and retriever training")
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

    def datagen_defaults(args: argparse.Namespace) -> int:
        if args.n is None:
            args.n = 2 if args.kind == "qta-dpo" else 8
        if args.k is None:
            args.k = 5 if args.kind == "qta-dpo" else 10
        return cmd_datagen(args)

    dg.set_defaults(func=datagen_defaults)

    _add_train_args(
        llm_sub.add_parser("train-retriever", help="iteration-aware feedback training (= train feedback-retriever)")
    )

    train = subparsers.choices.get("train")
    train_sub = _subparsers_of(train) if train is not None else None
    if train is None:
        train = subparsers.add_parser("train", help="train models")
        train_sub = train.add_subparsers(dest="train_command", required=True)
    if train_sub is not None and "feedback-retriever" not in train_sub.choices:
        _add_train_args(train_sub.add_parser("feedback-retriever", help="iteration-aware feedback retriever training"))
    _extend_eval(subparsers)
