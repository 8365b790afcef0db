"""Faster CPU encoders judged by retrieval, not by cosine (issue 28, item 2).

For each encoder variant — torch float32 (today's), ONNX Runtime float32 and int8, a shorter ``max_length`` (128
word pieces instead of 256), and the static model2vec model distilled from MiniLM — this reports:

- speed: API texts encoded per second on a sample of ToolBench's rendered texts, and the p50 of one query's
  encode, all variants in the same run (ratios to torch float32);
- quality: dev Recall@5 / Sufficiency@5 of the recommended default pipeline and of plain dense retrieval with that
  encoder, on every shared dev set and the bundled catalog (the catalog encoded with the variant itself).

Vectors are cached per variant and dataset (``--cache-dir``) so reruns only evaluate. torch float32 on ToolBench
reuses a saved engine's vectors (``--toolbench-engine``).

Usage::

    python benchmarks/encoders.py --data ../shared/data --cache-dir runs/emb-variants \\
        --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/encoders.json --md runs/bench/encoders.md
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from toolrerank_plugins import Engine, default_catalog_path, load_catalog
from toolrerank_plugins.evaluation import evaluate
from toolrerank_plugins.loaders import load_queries
from toolrerank_plugins.pipelines import pipeline_config
from toolrerank_plugins.render import render_tool

logger = logging.getLogger("encoders")

#: variant -> DenseConfig fields
VARIANTS: dict[str, dict[str, Any]] = {
    "torch": {"backend": "torch"},
    "torch-128": {"backend": "torch", "max_length": 128},
    "onnx": {"backend": "onnx"},
    "onnx-int8": {"backend": "onnx-int8"},
    "onnx-int8-128": {"backend": "onnx-int8", "max_length": 128},
    "static": {"backend": "static"},
}
DATASETS = ("bundled", "api-bank", "restbench", "nestful", "seal-tools", "metatool", "toolbench")


def _dense(variant: str) -> dict[str, Any]:
    return {**pipeline_config("default").dense.model_dump(), **VARIANTS[variant]}


def _folder(data: Path, ds: str) -> Path:
    return Path(default_catalog_path()) if ds == "bundled" else data / ds


def speed(data: Path, variants: list[str], sample: int) -> dict[str, Any]:
    from toolrerank_plugins.retrieval.dense import DenseConfig, make_encoder

    catalog = load_catalog(data / "toolbench")
    step = max(1, len(catalog) // sample)
    texts = [render_tool(catalog[i]) for i in catalog.ids[::step][:sample]]
    queries = [q.query for q in load_queries(data / "toolbench")][:100]
    out: dict[str, Any] = {}
    for variant in variants:
        encoder = make_encoder(DenseConfig(**_dense(variant)))
        encoder.encode(texts[:32])  # load, export or distil first: not timed
        t = time.perf_counter()
        encoder.encode(texts)
        docs_s = time.perf_counter() - t
        times = []
        for q in queries:
            t = time.perf_counter()
            encoder.encode([q])
            times.append((time.perf_counter() - t) * 1000)
        out[variant] = {
            "texts_per_s": round(len(texts) / docs_s, 1),
            "query_p50_ms": round(statistics.median(times), 2),
        }
        logger.info("speed %-14s %8.1f texts/s  query p50 %.2f ms", variant, out[variant]["texts_per_s"],
                    out[variant]["query_p50_ms"])
    base = out.get("torch")
    if base:
        for v in out.values():
            v["speedup"] = round(v["texts_per_s"] / base["texts_per_s"], 2)
    return out


def vectors(data: Path, ds: str, variant: str, cache_dir: Path, toolbench_engine: Path | None) -> dict[str, Any]:
    path = cache_dir / f"{ds}-{variant}.npz"
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    if ds == "toolbench" and variant == "torch" and toolbench_engine is not None:
        cache = Engine.load(toolbench_engine).first_stage.embedding_cache()
    else:
        t = time.perf_counter()
        catalog = load_catalog(_folder(data, ds))
        cache = Engine.build(catalog, pipeline_config("dense", dense=_dense(variant))).first_stage.embedding_cache()
        logger.info("%s %s: encoded %d APIs in %.0f s", ds, variant, len(catalog), time.perf_counter() - t)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, **cache)  # type: ignore[arg-type]
    return cache


def quality(data: Path, datasets: list[str], variants: list[str], cache_dir: Path, tb: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ds in datasets:
        folder = _folder(data, ds)
        catalog = load_catalog(folder)
        queries = [q for q in load_queries(folder) if q.split == "dev"]
        for variant in variants:
            cache = vectors(data, ds, variant, cache_dir, tb)
            row = {}
            for pipeline in ("default", "dense"):
                config = pipeline_config(pipeline, dense=_dense(variant))
                engine = Engine.build(catalog, config, embedding_cache=cache)
                o = evaluate(engine, queries, ks=(5,), batch_size=None).overall
                row[pipeline] = {
                    "recall@5": round(100 * o["recall@5"], 1),
                    "sufficiency@5": round(100 * o["sufficiency@5"], 1),
                }
            out.setdefault(ds, {})[variant] = row
            logger.info("%s %-14s default R@5 %.1f  dense R@5 %.1f", ds, variant, row["default"]["recall@5"],
                        row["dense"]["recall@5"])
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = []
    if result.get("speed"):
        lines += ["| encoder | API texts / s | × torch | one query's encode p50 (ms) |", "|---|---|---|---|"]
        for v, s in result["speed"].items():
            lines.append(f"| {v} | {s['texts_per_s']:.0f} | {s.get('speedup', 1):.2f}× | {s['query_p50_ms']:.1f} |")
        lines.append("")
    q = result.get("quality") or {}
    if q:
        datasets = list(q)
        variants = list(next(iter(q.values())))
        lines += ["Default pipeline, dev Recall@5 (plain dense in brackets):", ""]
        lines += ["| encoder | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
        for v in variants:
            cells = []
            for ds in datasets:
                r = q[ds][v]
                cells.append(f"{r['default']['recall@5']:.1f} ({r['dense']['recall@5']:.1f})")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        lines += ["", "Difference from torch, default pipeline Recall@5:", ""]
        lines += ["| encoder | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
        for v in variants:
            cells = [
                f"{q[ds][v]['default']['recall@5'] - q[ds]['torch']['default']['recall@5']:+.1f}" for ds in datasets
            ]
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--cache-dir", type=Path, required=True)
    ap.add_argument("--toolbench-engine", type=Path)
    ap.add_argument("--sample", type=int, default=1000, help="ToolBench texts timed per variant")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result: dict[str, Any] = {}
    if not args.skip_speed:
        result["speed"] = speed(args.data, args.variants, args.sample)
    if not args.skip_quality:
        result["quality"] = quality(args.data, args.datasets, args.variants, args.cache_dir, args.toolbench_engine)
    md = markdown(result)
    print(md)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    if args.md:
        args.md.write_text(md)


if __name__ == "__main__":
    main()
