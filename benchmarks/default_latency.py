"""Query latency of the ``default`` and ``default-fast`` pipelines against plain ``hybrid``, interleaved.

``default_pipeline.py`` times each pipeline over all queries one after the other; on a shared machine the load
changes between the runs. Here every query is searched by each engine back to back (the order rotating per
query), over ``--rounds`` passes, after a warm-up; the ratios of the p50s to hybrid's are the numbers to read.
The engines share the catalog vectors (no encoding of documents is timed), and each search encodes its query.
``default-serial`` is the default with ``parallel_requests=False`` (a multi-request message's requests encoded on
the calling thread, not on a spare one beside the message); ``--neighbour`` times everything beside a second
process multiplying torch matrices on two threads (as ``benchmarks/threads.py``).

``--pipelines`` times only the engines named (``hybrid`` always among them: the ratios are to it). An engine whose
search ran OpenMP threads (a batched faiss search on two threads, a two-thread encode) leaves them spinning for a
while after it returns (libgomp's default wait policy), on the core the next engine's search would use; ``--gap-ms``
pauses that long between two searches (untimed), as an agent's searches are apart (a model call between them).

Usage::

    python benchmarks/default_latency.py --threads 1 --data ../shared/data --datasets bundled api-bank \\
        --cache-dir runs/emb --toolbench-engine runs/engines/toolbench-hybrid
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from default_pipeline import _cache  # sibling script (benchmarks/ is on sys.path when run)
from threads import NEIGHBOUR  # sibling script

from toolrerank_plugins.catalog import default_catalog_path
from toolrerank_plugins.engine import Engine
from toolrerank_plugins.loaders import load_catalog, load_queries
from toolrerank_plugins.pipelines import pipeline_config

PIPELINES = ("hybrid", "default", "default-serial", "default-fast", "default-word-map")


def _vectors(ds: str, cache_dir: Path | None, toolbench_engine: Path | None) -> dict[str, np.ndarray] | None:
    if ds == "toolbench":
        if toolbench_engine is None:
            raise SystemExit("toolbench needs --toolbench-engine (a saved hybrid engine over DATA/toolbench)")
        return Engine.load(toolbench_engine).first_stage.embedding_cache()
    return _cache(cache_dir, ds)


def _config(
    name: str, threads: int | None, index: str | None = None, device: str | None = None, scan: str | None = None
) -> Any:
    """The preset; ``default-serial`` is the default with every search on its calling thread alone
    (``parallel_requests=False``: the requests are not encoded on a spare thread); ``default-word-map`` is a preset
    (its requests' vectors mapped from word vectors, not encoded: ``DenseConfig.part_vectors``). ``threads``
    sets the torch threads of every encode, ``index`` the dense index (``flat``, ``flat-fp16``, ``hnsw``), ``scan``
    how a flat index is searched (``auto``, ``faiss``) and ``device`` the encoder's device (default: the
    preset's)."""
    preset, extra = ("default", {"parallel_requests": False}) if name == "default-serial" else (name, {})
    cfg = pipeline_config(preset, **extra)
    dense = {
        **({} if threads is None else {"torch_threads": threads}),
        **({} if index is None else {"index": index}),
        **({} if device is None else {"device": device}),
        **({} if scan is None else {"scan": scan}),
    }
    if not dense:
        return cfg
    return pipeline_config(preset, dense={**cfg.dense.model_dump(), **dense}, **extra)


def measure(
    data: Path,
    ds: str,
    *,
    rounds: int,
    limit: int | None,
    cache_dir: Path | None,
    toolbench_engine: Path | None,
    threads: int | None = None,
    index: str | None = None,
    device: str | None = None,
    scan: str | None = None,
    neighbour: bool = False,
    pipelines: Sequence[str] = PIPELINES,
    gap_ms: float = 0.0,
) -> dict[str, Any]:
    folder = Path(default_catalog_path()) if ds == "bundled" else data / ds
    catalog = load_catalog(folder)
    queries = [q.query for q in load_queries(folder) if q.split == "dev"][:limit]
    cache = _vectors(ds, cache_dir, toolbench_engine)
    names = ("hybrid", *(n for n in pipelines if n != "hybrid"))
    engines = {
        name: Engine.build(catalog, _config(name, threads, index, device, scan), embedding_cache=cache)
        for name in names
    }
    for engine in engines.values():  # warm-up: models loaded, caches filled
        for q in queries[:20]:
            engine.search(q, top_k=10)
    times: dict[str, list[float]] = {name: [] for name in names}
    beside = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if neighbour else None
    try:
        if beside is not None:
            time.sleep(2.0)  # the neighbour's torch import done: it is multiplying
        for r in range(rounds):
            for i, q in enumerate(queries):
                shift = (i + r) % len(names)  # each engine goes first, second, ... in turn
                order = names[shift:] + names[:shift]
                for name in order:
                    if gap_ms:
                        time.sleep(gap_ms / 1000)
                    t = time.perf_counter()
                    engines[name].search(q, top_k=10)
                    times[name].append((time.perf_counter() - t) * 1000)
    finally:
        if beside is not None:
            beside.kill()
            beside.wait()
    p50 = {name: float(np.percentile(v, 50)) for name, v in times.items()}
    chosen = {name: _thread_choice(engine) for name, engine in engines.items()}
    return {
        "queries": len(queries),
        "rounds": rounds,
        "neighbour": neighbour,
        "gap_ms": gap_ms,
        "index": index or "preset",
        "device": device or "preset",
        "scan": scan or "preset",
        "threads": threads,
        **{f"{n}_p50_ms": round(v, 2) for n, v in p50.items()},
        **{f"{n}_p95_ms": round(float(np.percentile(v, 95)), 2) for n, v in times.items()},
        **{f"{n}_mean_ms": round(float(np.mean(times[n])), 2) for n in names},
        **{f"{n}_ratio_p50": round(p50[n] / p50["hybrid"], 3) for n in names[1:]},
        **{f"{n}_threads": c for n, c in chosen.items() if c},
    }


def _thread_choice(engine: Engine) -> dict[str, int]:
    """The torch threads the engine's encoder settled on for a search's encode, alone and beside its requests:
    the cheapest count each of its choosers measured (none where the threads are fixed or it has no chooser)."""
    costs = getattr(engine.embedder, "thread_costs", None)
    measured = costs() if costs is not None else {}
    return {kind: min(c, key=c.__getitem__) for kind, c in measured.items() if c}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", default=["bundled"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, help="at most this many dev queries per dataset")
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--toolbench-engine", type=Path)
    ap.add_argument("--threads", type=int, help="torch intra-op threads of every encode (default: the library's)")
    ap.add_argument(
        "--index", choices=("flat", "flat-fp16", "hnsw"), help="every engine's dense index (default: the preset's)"
    )
    ap.add_argument(
        "--scan",
        choices=("auto", "bfloat16", "faiss"),
        help="how every engine searches a flat index (default: the preset's)",
    )
    ap.add_argument("--device", help="every engine's encoder device: cpu, cuda, mps (default: the preset's, auto)")
    ap.add_argument(
        "--neighbour",
        action="store_true",
        help="time beside a second process multiplying torch matrices on two threads (benchmarks/threads.py)",
    )
    ap.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES), help="the engines timed")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="an untimed pause before each search")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    results = {}
    for ds in args.datasets:
        results[ds] = measure(
            args.data,
            ds,
            rounds=args.rounds,
            limit=args.limit,
            cache_dir=args.cache_dir,
            toolbench_engine=args.toolbench_engine,
            threads=args.threads,
            index=args.index,
            device=args.device,
            scan=args.scan,
            neighbour=args.neighbour,
            pipelines=args.pipelines,
            gap_ms=args.gap_ms,
        )
        print(ds, json.dumps(results[ds]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
