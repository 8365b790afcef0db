"""Peak memory of building and of serving the 47k-API ToolBench index, and of the default pipeline's process
(issue 28, item 5). Each measurement runs in a process of its own and reports its peak RSS (``ru_maxrss``) and
what the engine's parts hold (the vectors, the faiss index, the BM25 model and token lists, the catalog).

- ``build``: ``Engine.build`` of the default pipeline over ToolBench, with the vectors of all but ``--encode``
  APIs from a saved engine (so the encoder's activations are part of the peak without a 15-minute encode);
- ``serve``: ``Engine.load`` of the saved default engine and the 154 dev queries searched;
- ``python``: an interpreter that imported the library, torch and sentence-transformers (the floor).

Usage::

    python benchmarks/memory.py --data ../shared/data --toolbench-engine runs/engines/toolbench-hybrid \\
        --work runs/memory --out runs/bench/memory.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _current_mb() -> float:
    with open("/proc/self/statm") as fh:
        return round(int(fh.read().split()[1]) * resource.getpagesize() / 2**20, 1)


def parts(engine: Any) -> dict[str, float]:
    """MB the engine's big parts hold (numpy arrays and faiss buffers; token lists estimated at 8 bytes each)."""
    out: dict[str, float] = {}
    fs = engine.first_stage.parts
    dense, bm25 = fs.get("dense"), fs.get("bm25")
    if dense is not None:
        emb = getattr(dense, "_emb", None)
        out["dense_vectors_mb"] = round(emb.nbytes / 2**20, 1) if emb is not None else 0.0
        index = getattr(dense, "_index", None)
        out["faiss_index_mb"] = round(index.ntotal * index.d * 4 / 2**20, 1) if index is not None else 0.0
    if bm25 is not None:
        tokens = getattr(bm25, "_tokens", [])
        out["bm25_token_refs_mb"] = round(sum(len(t) for t in tokens) * 8 / 2**20, 1)
        out["bm25_texts_mb"] = round(sum(len(t) for t in getattr(bm25, "_texts", [])) / 2**20, 1)
        model = getattr(bm25, "_model", None)
        scores = getattr(model, "scores", None) if model is not None else None
        if isinstance(scores, dict):
            out["bm25_model_mb"] = round(sum(getattr(v, "nbytes", 0) for v in scores.values()) / 2**20, 1)
    return out


def worker(kind: str, data: Path, tb: Path, work: Path, encode: int) -> dict[str, Any]:
    from toolrerank_plugins import Engine, load_catalog
    from toolrerank_plugins.loaders import load_queries
    from toolrerank_plugins.pipelines import pipeline_config

    if kind == "python":
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401

        return {"max_rss_mb": _rss_mb()}
    queries = [q.query for q in load_queries(data / "toolbench") if q.split == "dev"]
    if kind == "build":
        catalog = load_catalog(data / "toolbench")
        cache = Engine.load(tb).first_stage.embedding_cache()
        for key in list(cache)[:encode]:
            del cache[key]  # these are encoded again by the build
        before = _current_mb()
        t = time.perf_counter()
        engine = Engine.build(catalog, pipeline_config("default"), embedding_cache=cache)
        build_s = time.perf_counter() - t
        del cache
        engine.save(work / "default", overwrite=True)
        return {"max_rss_mb": _rss_mb(), "rss_before_build_mb": before, "build_s": round(build_s, 1),
                "encoded": encode, **parts(engine)}
    t = time.perf_counter()
    engine = Engine.load(work / "default")
    load_s = time.perf_counter() - t
    for q in queries:
        engine.search(q, top_k=5)
    return {"max_rss_mb": _rss_mb(), "current_mb": _current_mb(), "load_s": round(load_s, 1), **parts(engine)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--toolbench-engine", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--encode", type=int, default=2000, help="APIs the build encodes itself")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {}
    for kind in ("python", "build", "serve"):
        cmd = [sys.executable, __file__, "--worker", kind, str(args.data), str(args.toolbench_engine),
               str(args.work), str(args.encode)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-4000:])
        result[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(kind, json.dumps(result[kind]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        a = sys.argv
        print(json.dumps(worker(a[2], Path(a[3]), Path(a[4]), Path(a[5]), int(a[6]))))
    else:
        main()
