"""The recommended ``default`` pipeline against every single retriever, on all six shared benchmarks, with ablations.

One command reproduces the per-dataset table of ``docs/benchmarks/default_pipeline.md``: BM25, dense, hybrid,
hybrid+tgr, default, and the default with each of its parts switched off. Every number comes from
:func:`toolrerank_plugins.evaluation.evaluate` (the harness behind ``toolrerank eval``). For each dataset the
catalog is encoded once; every pipeline reuses those vectors (``Engine.build(..., embedding_cache=...)``), so
only BM25 indexes and stages are rebuilt. ``--cache-dir`` keeps the vectors between runs (``.npz``, keyed by
text hash) — ToolBench's 47k APIs take 20-70 min to encode on 2 CPU cores, so build them once with
``toolrerank index DATA/toolbench --out ENGINE --pipeline hybrid`` and pass ``--toolbench-engine ENGINE``.

Paired-bootstrap 95 % intervals (1,000 resamples of the evaluated queries) are reported for the default's
Recall@5 minus each baseline's.

Usage::

    python benchmarks/default_pipeline.py --data ../shared/data --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/default_pipeline.json \\
        --md runs/bench/default_pipeline.md
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.evaluation import EvalReport, evaluate
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config

logger = logging.getLogger("default_pipeline")

#: dataset -> the split reported (dev everywhere; ToolBench ships train + dev). ``bundled`` is the catalog shipped
#: with the library (88 labelled queries, its declared edges).
DATASETS = ("bundled", "api-bank", "restbench", "nestful", "seal-tools", "metatool", "toolbench")
BASELINES = ("bm25", "dense", "hybrid", "hybrid+tgr")


def _without_stage(stage: str) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        cfg["stages"] = [s for s in cfg.get("stages", []) if s["type"] != stage]

    return edit


def _set(path: Sequence[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value

    return edit


def _sets(values: Mapping[tuple[str, ...], Any]) -> Callable[[dict[str, Any]], None]:
    edits = [_set(path, value) for path, value in values.items()]

    def edit(cfg: dict[str, Any]) -> None:
        for one in edits:
            one(cfg)

    return edit


def _stage_param(stage: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        for spec in cfg.get("stages", []):
            if spec["type"] == stage:
                spec.setdefault("params", {})[key] = value

    return edit


def _with_stage(stage: str, after: str) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        stages = cfg.setdefault("stages", [])
        if any(s["type"] == stage for s in stages):
            return
        at = next((i + 1 for i, s in enumerate(stages) if s["type"] == after), 0)
        stages.insert(at, {"type": stage})

    return edit


def _knob(knob: str, on: bool) -> Callable[[dict[str, Any]], None]:
    """``auto_tune`` with ``knob`` added (``on``) or removed, the other knobs kept."""

    def edit(cfg: dict[str, Any]) -> None:
        knobs = [k for k in cfg.get("auto_tune", []) if k != knob]
        cfg["auto_tune"] = [*knobs, knob] if on else knobs

    return edit


def _expansion(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        for spec in cfg.get("stages", []):
            if spec["type"] == "tgr":
                spec.setdefault("params", {}).setdefault("expansion", {})[key] = value

    return edit


#: ablation name -> an edit of the default pipeline's config data (each switches one part off; "+": an option on).
ABLATIONS: Mapping[str, Callable[[dict[str, Any]], None]] = {
    "default -identifiers": _set(("bm25", "tokenizer"), "plain"),
    "default -stemming": _set(("bm25", "stemmer"), None),
    "default -agreement fusion (RRF k=5)": _set(("hybrid", "fusion"), "rrf"),
    # the default's fusion until the thirteenth dev catalog (issue 29): reciprocal-rank fusion since
    "default +agreement fusion": _set(("hybrid", "fusion"), "agreement"),
    "default +z-score fusion (the default before)": _set(("hybrid", "fusion"), "zscore"),  # before issue 29
    "default -confidence weights": _set(("hybrid", "confidence_weighted"), False),
    "default -multi_intent": _without_stage("multi_intent"),
    "default +pooled message vector": _stage_param("multi_intent", "pooled", True),
    "default +lexical requests": _stage_param("multi_intent", "requests_by", "lexical"),
    "default -asking lines (every line a request)": _stage_param("multi_intent", "lines", "all"),
    "default -preamble as context (self-description a request)": _stage_param("multi_intent", "preamble", "request"),
    "default +named tools": _stage_param("multi_intent", "named_tools", True),  # on again since the fixed point
    "default -named tools": _stage_param("multi_intent", "named_tools", False),
    "default -action verbs": _stage_param("multi_intent", "actions", False),
    "default -action compounds": _stage_param("multi_intent", "action_compounds", False),
    "default -and before a verb": _stage_param("multi_intent", "and_verbs", False),
    "default -tool_evidence": _without_stage("tool_evidence"),
    "default -tgr": _without_stage("tgr"),
    "default -declared chains": _expansion("declared_chains", False),  # on (from top_k 10) since issue 29
    "default +declared chains at every top_k": _expansion("chain_min_top_k", 1),
    "default +auto fusion": _knob("hybrid.fusion", True),  # off again: agreement fusion chosen per query
    "default +auto stemming": _knob("bm25.stemmer", True),
    "default -auto stemming": _knob("bm25.stemmer", False),
    # for judging a default without these parts (benchmarks/transfer.py --config): each switched back on
    "default +identifiers": _set(("bm25", "tokenizer"), "identifiers"),
    "default +stemming": _set(("bm25", "stemmer"), "english"),
    "default +action verbs": _stage_param("multi_intent", "actions", True),
    "default +tool_evidence": _with_stage("tool_evidence", after="multi_intent"),
    "default +and before a verb": _stage_param("multi_intent", "and_verbs", True),
    "default +comma before a verb": _stage_param("multi_intent", "comma_verbs", True),
    # not a part: the dense index's vectors as 16-bit floats (a speed and memory option; the rankings should not move)
    "default +fp16 vectors": _set(("dense", "index"), "flat-fp16"),
    # the requests' vectors without the encoder (a speed option: DenseConfig.part_vectors), at three query weights
    "default +word-mapped requests": _set(("dense", "part_vectors"), "word-map"),
    "default +word-mapped requests (query weight 0.25)": _sets(
        {("dense", "part_vectors"): "word-map", ("dense", "part_query_weight"): 0.25}
    ),
    "default +word-mapped requests (query weight 1)": _sets(
        {("dense", "part_vectors"): "word-map", ("dense", "part_query_weight"): 1.0}
    ),
}


def pipelines(ablations: Sequence[str] = tuple(ABLATIONS)) -> dict[str, EngineConfig]:
    """The baselines, the default and the named ablations of it."""
    out = {name: pipeline_config(name) for name in (*BASELINES, "default")}
    base = pipeline_config("default").model_dump(mode="json")
    for name in ablations:
        data = copy.deepcopy(base)
        ABLATIONS[name](data)
        out[name] = EngineConfig.model_validate(data)
    return out


def _cache(cache_dir: Path | None, ds: str) -> dict[str, np.ndarray] | None:
    if cache_dir is None or not (cache_dir / f"{ds}.npz").exists():
        return None
    with np.load(cache_dir / f"{ds}.npz") as z:
        return {k: z[k] for k in z.files}


def bootstrap(a: Sequence[float], b: Sequence[float], *, n: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``a - b`` (paired, per query) and its 95 % bootstrap interval, in points."""
    d = 100 * (np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def run_dataset(
    data: Path,
    ds: str,
    configs: Mapping[str, EngineConfig],
    *,
    cache_dir: Path | None,
    toolbench_engine: Path | None,
    split: str = "dev",
) -> dict[str, EvalReport]:
    folder = Path(default_catalog_path()) if ds == "bundled" else data / ds
    catalog = load_catalog(folder)
    queries = [q for q in load_queries(folder) if q.split == split]
    if ds == "toolbench":
        if toolbench_engine is None:
            raise SystemExit("toolbench needs --toolbench-engine (a saved hybrid engine over DATA/toolbench)")
        cache = Engine.load(toolbench_engine).first_stage.embedding_cache()
    else:
        cache = _cache(cache_dir, ds)
        if cache is None:
            t = time.perf_counter()
            cache = Engine.build(catalog, pipeline_config("dense")).first_stage.embedding_cache()
            logger.info("%s: encoded %d APIs in %.0f s", ds, len(catalog), time.perf_counter() - t)
            if cache_dir is not None:
                cache_dir.mkdir(parents=True, exist_ok=True)
                np.savez(cache_dir / f"{ds}.npz", **cache)  # type: ignore[arg-type]
    reports = {}
    for name, config in configs.items():
        t = time.perf_counter()
        engine = Engine.build(catalog, config, embedding_cache=cache)
        build = time.perf_counter() - t
        reports[name] = evaluate(engine, queries, ks=(5, 10), batch_size=None)
        reports[name].build_seconds = build
        o = reports[name].overall
        logger.info(
            "%s %-34s R@5 %.1f Suff@5 %.1f p50 %.1f ms",
            ds,
            name,
            100 * o["recall@5"],
            100 * o["sufficiency@5"],
            reports[name].latency_ms["p50"],
        )
    return reports


def _metric(report: EvalReport, metric: str) -> list[float]:
    return [q["metrics"][metric] for q in report.per_query]


def markdown(results: Mapping[str, Mapping[str, EvalReport]]) -> str:
    names = list(next(iter(results.values())))
    lines = ["| pipeline | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for name in names:
        cells = []
        for reports in results.values():
            o = reports[name].overall
            cells.append(f"{100 * o['recall@5']:.1f} / {100 * o['sufficiency@5']:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Default minus baseline, Recall@5, paired bootstrap 95 % interval:", ""]
    lines += ["| baseline | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for base in BASELINES:
        cells = []
        for reports in results.values():
            m, lo, hi = bootstrap(_metric(reports["default"], "recall@5"), _metric(reports[base], "recall@5"))
            cells.append(f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}]")
        lines.append(f"| {base} | " + " | ".join(cells) + " |")
    lines += ["", "Query p50 latency (ms) and the default's ratio to hybrid in the same run:", ""]
    lines += ["| | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for name in ("hybrid", "default"):
        lines.append(f"| {name} | " + " | ".join(f"{r[name].latency_ms['p50']:.1f}" for r in results.values()) + " |")
    lines.append(
        "| ratio | "
        + " | ".join(f"{r['default'].latency_ms['p50'] / r['hybrid'].latency_ms['p50']:.2f}×" for r in results.values())
        + " |"
    )
    return "\n".join(lines) + "\n"


def groups_markdown(reports: Mapping[str, EvalReport], names: Sequence[str]) -> str:
    groups = sorted(reports[names[0]].groups)
    lines = ["| pipeline | " + " | ".join(groups) + " | macro |", "|---|" + "---|" * (len(groups) + 1)]
    for name in names:
        g = reports[name].groups
        r5 = [100 * g[x]["recall@5"] for x in groups]
        s5 = [100 * g[x]["sufficiency@5"] for x in groups]
        cells = [f"{r:.1f} / {s:.1f}" for r, s in zip(r5, s5)]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {np.mean(r5):.1f} / {np.mean(s5):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder holding the shared benchmark folders")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--cache-dir", type=Path, help="keep each catalog's vectors here between runs")
    ap.add_argument("--toolbench-engine", type=Path, help="saved hybrid engine over DATA/toolbench")
    ap.add_argument("--split", default="dev", help="queries of this split (dev; train to check a choice)")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--ablations", nargs="+", choices=list(ABLATIONS), help="only these ablations (default: all)")
    ap.add_argument("--out", type=Path, help="JSON with every report (per-query rankings included)")
    ap.add_argument("--md", type=Path, help="write the markdown tables here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    configs = pipelines(() if args.no_ablations else args.ablations or tuple(ABLATIONS))
    results = {
        ds: run_dataset(
            args.data, ds, configs, cache_dir=args.cache_dir, toolbench_engine=args.toolbench_engine, split=args.split
        )
        for ds in args.datasets
    }
    text = markdown(results)
    for ds, reports in results.items():
        if len(reports[next(iter(reports))].groups) > 1:
            text += f"\n{ds} per group (Recall@5 / Sufficiency@5):\n\n" + groups_markdown(reports, list(reports))
    print(text)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text, encoding="utf-8")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({ds: {n: r.to_dict() for n, r in reps.items()} for ds, reps in results.items()}),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
